"""Labels against a slow per-row reference, on hand-made paths and on a real store."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lobsurf.data.dataset import load_book_tensors
from lobsurf.data.labels import LabelConfig, compute_labels, labels_from_mid


def reference_labels(mid: np.ndarray, seg_stop_of_row: np.ndarray, cfg: LabelConfig) -> dict:
    # Obviously-correct loop: one row, one horizon at a time.
    n, hs = len(mid), cfg.horizons_snapshots
    out = {k: np.zeros((n, len(hs)), dt) for k, dt in
           [("ret", np.float64), ("dir", np.float32), ("dir_valid", bool),
            ("bucket", np.int64), ("bucket_valid", bool)]}
    for t in range(n):
        for j, h in enumerate(hs):
            if t + h >= seg_stop_of_row[t]:
                out["bucket"][t, j] = sum(1 for e in cfg.bucket_edges_ticks if e <= 0.0)
                continue
            r = mid[t + h] - mid[t]
            out["ret"][t, j] = r
            out["dir"][t, j] = 1.0 if r > 0 else 0.0
            out["dir_valid"][t, j] = r != 0
            out["bucket"][t, j] = sum(1 for e in cfg.bucket_edges_ticks if e <= r)
            out["bucket_valid"][t, j] = True
    return out


def _assert_matches(labels, ref) -> None:
    np.testing.assert_array_equal(labels.direction_valid.numpy(), ref["dir_valid"])
    np.testing.assert_array_equal(labels.bucket_valid.numpy(), ref["bucket_valid"])
    valid = ref["bucket_valid"]
    np.testing.assert_array_equal(labels.return_ticks.numpy()[valid], ref["ret"][valid])
    np.testing.assert_array_equal(labels.bucket.numpy()[valid], ref["bucket"][valid])
    dv = ref["dir_valid"]
    np.testing.assert_array_equal(labels.direction.numpy()[dv], ref["dir"][dv])


def test_hand_made_path() -> None:
    # Two segments: rows 0..5 and 6..8. Mid in ticks.
    mid = np.array([10.0, 10.5, 10.5, 9.0, 12.0, 12.0, 50.0, 49.5, 49.5])
    stop = np.array([6] * 6 + [9] * 3)
    cfg = LabelConfig(horizons_snapshots=(1, 3), bucket_edges_ticks=(-1.25, -0.25, 0.25, 1.25))
    lab = labels_from_mid(torch.tensor(mid), torch.tensor(stop), cfg)
    # Row 0, h=1: +0.5 → up, bucket 3 ([0.25, 1.25)). h=3: -1.0 → down, bucket 1.
    assert lab.direction[0].tolist() == [1.0, 0.0]
    assert lab.bucket[0].tolist() == [3, 1]
    # Row 1, h=1: flat → no direction, but a valid zero-return bucket (2).
    assert not lab.direction_valid[1, 0] and lab.bucket_valid[1, 0] and lab.bucket[1, 0] == 2
    # Row 4, h=3 would reach row 7 of the next segment: invalid.
    assert not lab.bucket_valid[4, 1] and not lab.direction_valid[4, 1]
    # Row 6, h=1: -0.5 in the second segment; h=3 leaves the store: invalid.
    assert lab.direction[6, 0] == 0.0 and lab.direction_valid[6, 0]
    assert not lab.bucket_valid[6, 1]
    _assert_matches(lab, reference_labels(mid, stop, cfg))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_paths_match_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    mid = 1000 + np.cumsum(rng.choice([-1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 3.0], n))
    cuts = np.sort(rng.choice(np.arange(1, n), 3, replace=False))
    stop = np.searchsorted(np.append(cuts, n), np.arange(n), side="right")
    stop = np.append(cuts, n)[stop]
    cfg = LabelConfig(horizons_snapshots=(1, 7, 40))
    lab = labels_from_mid(torch.tensor(mid), torch.tensor(stop), cfg)
    _assert_matches(lab, reference_labels(mid, stop, cfg))


def test_store_labels_match_reference(tiny_store) -> None:
    book = load_book_tensors(tiny_store)
    cfg = LabelConfig()
    lab = compute_labels(book, cfg)
    stop = book.segment_stop[book.segment_of_row].numpy()
    _assert_matches(lab, reference_labels(book.mid_ticks().numpy(), stop, cfg))
    assert lab.direction.shape == (len(book), cfg.num_horizons)
    assert lab.bucket.max() < cfg.num_buckets and lab.bucket.min() >= 0


def test_default_buckets_are_symmetric() -> None:
    cfg = LabelConfig(horizons_snapshots=(1,))
    r = torch.arange(-12, 13, dtype=torch.float64) / 2  # the half-tick grid
    # Path 0, r0, 0, r1, ...: the h=1 return at even rows is r_i.
    mid = torch.stack([torch.zeros_like(r), r], dim=1).flatten()
    b = labels_from_mid(mid, torch.full((len(mid),), len(mid)), cfg).bucket[0::2, 0]
    assert torch.equal(b, (cfg.num_buckets - 1) - b.flip(0))
    assert (b == cfg.num_buckets // 2).nonzero().flatten().tolist() == [12]  # only r == 0


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        LabelConfig(horizons_snapshots=(50, 10))
    with pytest.raises(ValueError):
        LabelConfig(bucket_edges_ticks=(1.0, -1.0))


def test_a_return_exactly_on_a_bucket_edge_goes_to_the_bucket_above():
    # Edges on the half-tick grid: returns of exactly -1, 0 and +1 tick sit on an edge and
    # belong to the bucket that starts there ([edge, next edge)), as the docstring says.
    cfg = LabelConfig(horizons_snapshots=(1,), bucket_edges_ticks=(-1.0, 0.0, 1.0))
    mid = torch.tensor([0.0, -1.0, -1.0, 0.0, 1.0, -0.5, 0.0], dtype=torch.float64)
    labels = labels_from_mid(mid, torch.full((7,), 7, dtype=torch.int64), cfg)
    returns = labels.return_ticks[:6, 0].tolist()
    assert returns == [-1.0, 0.0, 1.0, 1.0, -1.5, 0.5]
    assert labels.bucket[:6, 0].tolist() == [1, 2, 3, 3, 0, 2]
    assert labels.bucket_valid[:6, 0].all() and not labels.bucket_valid[6, 0]
