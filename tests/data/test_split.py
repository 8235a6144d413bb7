"""The purged time split against a per-row reference, on a two-session store."""

from __future__ import annotations

import pytest
import torch

from lobsurf.data.dataset import load_book_tensors
from lobsurf.data.split import choose_cut, evenly_spaced, time_split, validation_tail
from lobsurf.errors import UserError

K, MIN_H, MAX_H = 8, 5, 20


def _reference(book, cut: int) -> tuple[list[int], list[int]]:
    train, test = [], []
    starts, stops = book.segment_start.tolist(), book.segment_stop.tolist()
    for t in range(len(book)):
        s = next(i for i in range(len(starts)) if starts[i] <= t < stops[i])
        if t - K + 1 < starts[s] or t + MIN_H >= stops[s]:
            continue  # window leaves the segment, or no label at all
        if t + MAX_H < cut:
            train.append(t)
        elif t - K + 1 >= cut:
            test.append(t)
    return train, test


@pytest.mark.parametrize("at_segment, expected_cut", [(True, 2000), (False, 2800)])
def test_split_matches_reference(tiny_store, at_segment: bool, expected_cut: int) -> None:
    book = load_book_tensors(tiny_store)  # segments [0, 2000) and [2000, 3500)
    split = time_split(book, K, MIN_H, MAX_H, train_fraction=0.8, at_segment=at_segment)
    assert split.cut_row == expected_cut
    train, test = _reference(book, expected_cut)
    assert split.train_rows.tolist() == train and split.test_rows.tolist() == test
    # The purge: end rows of the two sides are at least K + max horizon apart, and no
    # training label or held-out snapshot crosses the cut.
    assert int(split.test_rows.min() - split.train_rows.max()) >= K + MAX_H
    assert int(split.train_rows.max()) + MAX_H < split.cut_row <= int(split.test_rows.min()) - K + 1


def test_single_segment_cuts_at_the_fraction(tiny_store) -> None:
    book = load_book_tensors(tiny_store, segments=[0])
    assert choose_cut(book, 0.75, at_segment=True) == 1500


def test_too_small_is_a_user_error(tiny_store) -> None:
    book = load_book_tensors(tiny_store)
    with pytest.raises(UserError, match="too small"):
        time_split(book, 1990, MIN_H, MAX_H, 0.8)


def test_evenly_spaced() -> None:
    rows = torch.arange(100, 200)
    assert torch.equal(evenly_spaced(rows, 1000), rows)
    picked = evenly_spaced(rows, 5)
    assert picked.tolist() == [100, 125, 150, 174, 199]  # linspace 0..99 rounded half to even


def test_validation_tail_is_the_latest_rows_purged(tiny_store) -> None:
    book = load_book_tensors(tiny_store)
    train = time_split(book, K, MIN_H, MAX_H, train_fraction=0.8).train_rows
    fit, tail = validation_tail(train, 0.25, K, MAX_H)
    # Both are subsets of the training rows, in order, the tail after the fitting rows...
    assert set(fit.tolist()) | set(tail.tolist()) <= set(train.tolist())
    assert torch.equal(fit, fit.sort().values) and int(fit.max()) < int(tail.min())
    # ...holding about the requested share, with the purge: no fitting label reaches the
    # first snapshot of a tail window.
    assert abs(len(tail) / len(train) - 0.25) < 0.02
    assert int(fit.max()) + MAX_H < int(tail.min()) - K + 1
    # Rows between the two sides are dropped, not moved: exactly the purge gap.
    assert len(train) - len(fit) - len(tail) == K - 1 + MAX_H
    none_fit, none_tail = validation_tail(train, 0.0, K, MAX_H)
    assert torch.equal(none_fit, train) and len(none_tail) == 0
