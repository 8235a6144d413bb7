"""The feature table gathered by row equals the features computed per window."""

from __future__ import annotations

import pytest
import torch

from lobsurf.data.dataset import gather_window, load_book_tensors
from lobsurf.models.feature_table import (
    FeatureRows,
    book_window,
    feature_table,
    table_features,
    window_features,
    with_feature_table,
)
from lobsurf.models.features import FeatureConfig, snapshot_features


def _end_rows(book, k: int) -> torch.Tensor:
    n = len(book)
    starts = book.segment_start.tolist()
    # the book's first rows (windows clamped at row 0), windows starting at a segment's first
    # row or ending just after it, the last row, rows past the end (clamped), random rows
    rows = [0, 1, k - 2, k - 1, k, *(s + k - 1 for s in starts), *(s + 1 for s in starts),
            n - 1, n + 3]
    rows += torch.randint(0, n, (40,), generator=torch.Generator().manual_seed(k)).tolist()
    return torch.tensor([max(r, 0) for r in rows])


@pytest.mark.parametrize("k", [1, 2, 5, 64])
@pytest.mark.parametrize("cfg", [FeatureConfig(), FeatureConfig(book_levels=3, ofi_levels=0),
                                 FeatureConfig(book_levels=10, ofi_levels=10)])
def test_table_rows_equal_per_window_features(tiny_store, k: int, cfg: FeatureConfig) -> None:
    book = load_book_tensors(tiny_store)
    end = _end_rows(book, k)
    want = snapshot_features(gather_window(book, end, k), cfg)
    # chunks of 7 rows: the chunk boundaries fall inside most windows
    table = feature_table(book, cfg, chunk_rows=7)
    assert torch.equal(table, feature_table(book, cfg))
    rows = book_window(with_feature_table(book, cfg), end, k)
    assert isinstance(rows, FeatureRows)
    got = table_features(FeatureRows(table, rows.rows, cfg), cfg)
    assert got.x.shape == want.x.shape
    torch.testing.assert_close(got.x, want.x, rtol=0, atol=0)
    torch.testing.assert_close(got.log_dt, want.log_dt, rtol=0, atol=0)


def test_book_without_table_gathers_fields_and_a_mismatched_table_is_refused(tiny_store):
    book = load_book_tensors(tiny_store)
    end = torch.tensor([10, 200])
    cfg = FeatureConfig()
    assert not isinstance(book_window(book, end, 4), FeatureRows)
    assert torch.equal(window_features(book_window(book, end, 4), cfg).x,
                       snapshot_features(gather_window(book, end, 4), cfg).x)
    rows = book_window(with_feature_table(book, FeatureConfig(ofi_levels=1)), end, 4)
    with pytest.raises(ValueError, match="feature table was computed for"):
        window_features(rows, cfg)
