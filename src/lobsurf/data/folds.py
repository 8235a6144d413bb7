"""The blocks of rows that walk-forward folds train on and trade, for both kinds of market.

Walk-forward with K folds cuts the rows into K + 1 blocks in time order: fold k trains on
blocks 0..k-1 (before a purge gap) and trades block k. For a market with sessions the
blocks are its segments (a session each). A 24/7 market has no sessions, and its segments
end only at gaps in the recording (a few, of any length), so its blocks are K + 1 runs of
equally many rows; windows and label horizons still never cross a segment boundary.
"""

from __future__ import annotations

from lobsurf.data.dataset import BookTensors
from lobsurf.data.store.instrument import AROUND_THE_CLOCK
from lobsurf.errors import UserError


def max_folds(book: BookTensors) -> int | None:
    """The most folds the book can give (None: no limit from its segments: 24/7)."""
    return None if book.market_hours == AROUND_THE_CLOCK else book.num_segments - 1


def fold_block(book: BookTensors, k: int, folds: int | None) -> tuple[int, int]:
    """Rows [start, stop) of block k of the ``folds`` + 1 blocks (module doc)."""
    if folds is None:
        raise UserError("a 24/7 store has no sessions to count folds by: give --walk-forward K")
    if not 0 <= k <= folds:
        raise UserError(f"walk-forward block {k} of {folds + 1}: no such block")
    if book.market_hours == AROUND_THE_CLOCK:
        n = len(book)
        return k * n // (folds + 1), (k + 1) * n // (folds + 1)
    if folds > book.num_segments - 1:
        raise UserError(f"--walk-forward {folds}: the store has {book.num_segments} "
                        f"segment(s), so at most {book.num_segments - 1} fold(s)")
    return int(book.segment_start[k]), int(book.segment_stop[k])
