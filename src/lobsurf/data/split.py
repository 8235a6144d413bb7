"""Time split of a book into training and held-out windows, with a purge gap.

Rows are in time order (segments in store order). A cut row c splits them:

* a training window ends at row t with t + max_horizon < c: its snapshots and every label
  it is trained on (any position's, any horizon's) lie strictly before c;
* a held-out window ends at row t with t - K + 1 >= c: its snapshots start at or after c.

So no snapshot or label horizon is shared across the cut, and the end rows of the two sides
are at least K + max_horizon apart (the purge gap of Lopez de Prado's purged split). Every
window also lies inside one segment, and at least the shortest horizon of its last
snapshot stays inside that segment (other windows carry no label at all).
With several segments the cut is placed at the session boundary nearest the target share
(not for a 24/7 market, whose segments are gaps, not sessions).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lobsurf.data.dataset import BookTensors
from lobsurf.data.store.instrument import AROUND_THE_CLOCK
from lobsurf.errors import UserError


@dataclass
class TimeSplit:
    """Attributes:
    cut_row: first row of the held-out side.
    train_rows: [n_train] int64 end rows of training windows.
    test_rows: [n_test] int64 end rows of held-out windows.
    """

    cut_row: int
    train_rows: torch.Tensor
    test_rows: torch.Tensor


def choose_cut(book: BookTensors, train_fraction: float, at_segment: bool) -> int:
    """The cut row: the segment start nearest ``train_fraction * N`` or that row itself.

    A 24/7 market has no sessions: its segments end only at gaps in the recording, so the
    cut is never moved to one (it could sit far from the target share)."""
    target = int(round(train_fraction * len(book)))
    starts = book.segment_start[1:].tolist()  # setup-time host read, not a hot path
    if at_segment and starts and book.market_hours != AROUND_THE_CLOCK:
        return min(starts, key=lambda s: abs(s - target))
    return target


def time_split(book: BookTensors, window: int, min_horizon: int, max_horizon: int,
               train_fraction: float, at_segment: bool = True) -> TimeSplit:
    """Split the book's rows into training and held-out window end rows (see module doc).

    Args:
        book: the device dataset.
        window: K, snapshots per window.
        min_horizon, max_horizon: shortest and longest label horizon, in snapshots.
        train_fraction: target share of rows before the cut.
        at_segment: cut at the nearest segment boundary when the book has several.

    Returns:
        TimeSplit on the book's device. Raises UserError when a side is empty.
    """
    cut = choose_cut(book, train_fraction, at_segment)
    t = torch.arange(len(book), device=book.device)
    seg = book.segment_of_row
    usable = (t - window + 1 >= book.segment_start[seg]) & (t + min_horizon < book.segment_stop[seg])
    train = usable & (t + max_horizon < cut)
    test = usable & (t - window + 1 >= cut)
    split = TimeSplit(cut_row=cut, train_rows=t[train], test_rows=t[test])
    if len(split.train_rows) == 0 or len(split.test_rows) == 0:
        raise UserError(
            f"store too small to split: {len(book)} rows, cut at row {cut}, window {window}, "
            f"horizons up to {max_horizon} leave {len(split.train_rows)} training and "
            f"{len(split.test_rows)} held-out windows")
    return split


def evenly_spaced(rows: torch.Tensor, limit: int) -> torch.Tensor:
    """At most ``limit`` of ``rows`` ([n] int64), evenly spaced, first one included."""
    if len(rows) <= limit:
        return rows
    index = torch.linspace(0, len(rows) - 1, limit, device=rows.device).round().long()
    return rows[index]


def validation_tail(train_rows: torch.Tensor, fraction: float, window: int,
                    max_horizon: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split training end rows into fitting rows and a later, purged validation tail.

    The tail holds the latest ``fraction`` of the end rows. It is purged like the time
    split: every fitting window's labels end before the first snapshot of any tail window,
    so early stopping on the tail measures generalisation forward in time, as the held-out
    side will.

    Args:
        train_rows: [n] int64 training end rows, ascending (``TimeSplit.train_rows``).
        fraction: share of the rows for the tail, in [0, 1); 0 gives no tail.
        window: K. max_horizon: the longest label horizon, in snapshots.

    Returns:
        (fit_rows, tail_rows), both ascending; tail_rows is empty (and fit_rows is
        train_rows) when fraction is 0 or either side would be empty.
    """
    n = len(train_rows)
    if fraction <= 0 or n == 0:
        return train_rows, train_rows[:0]
    cut = train_rows[min(n - 1, int(n * (1 - fraction)))]  # first snapshot of the tail
    fit = train_rows[train_rows + max_horizon < cut]
    tail = train_rows[train_rows - window + 1 >= cut]
    if len(fit) == 0 or len(tail) == 0:
        return train_rows, train_rows[:0]
    return fit, tail
