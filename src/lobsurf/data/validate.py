"""Book validation: which snapshots enter the store, and why the others do not.

Every rule is vectorised over a chunk and returns a keep-mask plus a count per reason, so
nothing is dropped silently: the counts end up in the store manifest and in ``lobsurf info``.
A snapshot is skipped for the first reason that applies, in this order:

``empty_book``        neither side has a level-0 price (UNDEF on both).
``one_sided_book``    exactly one side has no level-0 price.
``crossed_book``      best bid > best ask.
``locked_book``       best bid == best ask.
``malformed_levels``  an UNDEF level with size > 0, a defined level with size 0 (nothing to
                      trade there: a ghost order) or a size the store's uint32 cannot hold,
                      a defined level after an UNDEF one, or prices not strictly worse with
                      depth (bids falling, asks rising).
``off_tick``          a defined price is not a multiple of the instrument's tick (only when
                      the tick is given; otherwise the tick is inferred from the prices).
``ts_backwards``      capture time (ts_recv) earlier than an earlier record's of the same
                      source, so the store's time axis is monotone. Compared with the running
                      maximum: one record stamped far in the future also hides the ones after
                      it, which the count then shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lobsurf.data.schema import MAX_SIZE, UNDEF_PRICE, SnapshotChunk

REASONS = (
    "empty_book",
    "one_sided_book",
    "crossed_book",
    "locked_book",
    "malformed_levels",
    "off_tick",
    "ts_backwards",
)


@dataclass
class ValidationState:
    """What validation carries from one chunk to the next within a source."""

    max_ts_ns: int = np.iinfo(np.int64).min


def _malformed_side(px: np.ndarray, size: np.ndarray, worse: int) -> np.ndarray:
    # px, size: [n, 10]; worse = -1 for bids (prices fall with depth), +1 for asks.
    undef = px == UNDEF_PRICE
    ghost_size = (undef & (size > 0)).any(axis=1)
    bad_size = (~undef & (size == 0)).any(axis=1)
    if size.dtype != np.uint32:  # DBN's own uint32 sizes always fit; summed ones may not
        bad_size |= ((size < 0) | (size > MAX_SIZE)).any(axis=1)
    # A defined level after an UNDEF one: undef must be monotone non-decreasing with depth.
    gap = (undef[:, :-1] & ~undef[:, 1:]).any(axis=1)
    both = ~undef[:, :-1] & ~undef[:, 1:]
    # Compared, not subtracted: a difference of two extreme int64 prices would overflow.
    deeper, upper = px[:, 1:], px[:, :-1]
    strictly_worse = deeper < upper if worse < 0 else deeper > upper
    not_monotone = (both & ~strictly_worse).any(axis=1)
    return ghost_size | bad_size | gap | not_monotone


def validate_chunk(
    chunk: SnapshotChunk, state: ValidationState, tick_size_fixed: int | None = None
) -> tuple[np.ndarray, dict[str, int]]:
    """Decide which rows of ``chunk`` are valid books.

    Args:
        chunk: N snapshots in store units, in file order.
        state: carried across chunks of one source; updated in place.
        tick_size_fixed: if given, prices off this grid are skipped as ``off_tick``.

    Returns:
        keep: [N] bool mask of valid rows.
        counts: reason → number of rows skipped for it (each row counted once).
    """
    n = len(chunk)
    bid0, ask0 = chunk.bid_px[:, 0], chunk.ask_px[:, 0]
    no_bid, no_ask = bid0 == UNDEF_PRICE, ask0 == UNDEF_PRICE
    two_sided = ~no_bid & ~no_ask
    checks: dict[str, np.ndarray] = {
        "empty_book": no_bid & no_ask,
        "one_sided_book": no_bid ^ no_ask,
        "crossed_book": two_sided & (bid0 > ask0),
        "locked_book": two_sided & (bid0 == ask0),
        "malformed_levels": _malformed_side(chunk.bid_px, chunk.bid_sz, -1)
        | _malformed_side(chunk.ask_px, chunk.ask_sz, +1),
    }
    if tick_size_fixed:
        off = lambda px: ((px != UNDEF_PRICE) & (px % tick_size_fixed != 0)).any(axis=1)  # noqa: E731
        checks["off_tick"] = off(chunk.bid_px) | off(chunk.ask_px)
    ts = chunk.ts_recv_ns
    running_max = np.maximum.accumulate(np.concatenate([[state.max_ts_ns], ts]))[:-1]
    checks["ts_backwards"] = ts < running_max
    if n:
        state.max_ts_ns = max(state.max_ts_ns, int(ts.max()))

    keep = np.ones(n, bool)
    counts: dict[str, int] = {}
    for reason in REASONS:
        hit = checks.get(reason)
        if hit is None:
            continue
        first_hit = hit & keep
        counts[reason] = int(first_hit.sum())
        keep &= ~hit
    return keep, counts


#: every how many rows all 10 levels join the tick inference (level 0 always does)
TICK_SAMPLE_EVERY = 64


def infer_tick_fixed(chunk: SnapshotChunk, current: int = 0) -> int:
    """Greatest common divisor of the defined prices (and ``current``): the finest grid.

    The gcd runs over every distinct top-of-book price plus all levels of every
    ``TICK_SAMPLE_EVERY``-th row (gcd per element is the most expensive operation of ingest);
    then every price is checked against that grid and any off it refine the gcd, so the
    result divides all prices exactly. A very quiet book can still over-estimate the true
    tick (every price seen may sit on a coarser grid), so ingest lets the user pass it.
    """
    sample = (chunk.bid_px[::TICK_SAMPLE_EVERY].ravel(), chunk.ask_px[::TICK_SAMPLE_EVERY].ravel(),
              chunk.bid_px[:, 0], chunk.ask_px[:, 0])
    prices = np.unique(np.concatenate(sample))
    prices = prices[prices != UNDEF_PRICE]
    if prices.size == 0:
        return current
    tick = int(np.gcd.reduce(np.abs(prices), initial=current))
    # Exactness: any price the sample missed that is off this grid refines it (a modulo per
    # price is cheap; the gcd runs only over the few that are off).
    for px in (chunk.bid_px, chunk.ask_px):
        off = px[_off_grid(px, tick)]
        if off.size:
            tick = int(np.gcd.reduce(np.abs(off), initial=tick))
    return tick


def _off_grid(px: np.ndarray, tick: int) -> np.ndarray:
    # px % tick != 0 for defined prices, in float64: exact while |px| < 2**53 (prices up to
    # 9e6 currency units at 1e-9), and several times faster than int64 modulo.
    as_float = px.astype(np.float64)
    off = np.rint(as_float / tick) * tick != as_float
    return off & (px != UNDEF_PRICE)
