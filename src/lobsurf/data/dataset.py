"""The device dataset: one instrument's snapshots as structure-of-arrays tensors.

``BookTensors`` is what the simulator, the features and the replay buffer index into.
Prices become integer ticks relative to ``price_origin_fixed`` (the store's lowest
defined price), so they fit int32 exactly and cost 4 bytes a level. Sizes are int32 lots.

Empty levels (UNDEF in the store) get a finite placeholder price, one tick further from
the top than the previous level on that side, and size 0: fills never touch them (zero
size) and features stay finite. The store only holds two-sided books, so level 0 is
always real.

Trades (what printed in the interval (row - 1, row] of each row, by aggressor side) come as
four [N] int32 columns: the lowest price a seller-initiated trade printed at and the volume
sold there, the highest price a buyer-initiated trade printed at and the volume bought
there; a row where nothing printed holds ``TRADE_NONE_SELL`` / ``TRADE_NONE_BUY`` and size 0.
``lobsurf.data.trade_columns`` derives them from the store's trade table and says how. A
book without trades (``has_trades`` False: a store written before they were recorded, or
from a source without them) has None there, and ``require_trades`` refuses it. These four
suffice for resting orders at one price (lobsurf.sim.queue).

``gather_window`` returns the last K snapshots before each of B cursors, by index, in one
vectorised gather (no Python loop over B): [B, K, 10] per field.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

from lobsurf.data.schema import LEVELS, TRADE_NONE_BUY, TRADE_NONE_SELL, UNDEF_PRICE
from lobsurf.data.store import Store, StoreError
from lobsurf.data.store.instrument import SESSIONS
from lobsurf.data.trade_columns import TRADE_FIELDS, require_trades, row_trade_columns

__all__ = ["ROW_FIELDS", "TRADE_FIELDS", "TRADE_NONE_BUY", "TRADE_NONE_SELL", "BookTensors",
           "Window",
           "clamped_window_rows", "gather_window", "load_book_tensors", "require_trades",
           "window_rows"]

#: ticks of room below the lowest best bid for the origin: deeper bid levels and their
#: empty-level placeholders (one tick apart) stay non-negative.
ORIGIN_HEADROOM_TICKS = 4 * LEVELS


@dataclass
class BookTensors:
    """N snapshots of one instrument on one device.

    Attributes:
        ts_ns: [N] int64 capture time (UNIX ns).
        bid_px_ticks, ask_px_ticks: [N, 10] int32 prices in ticks above ``price_origin_fixed``.
        bid_sz, ask_sz: [N, 10] int32 lots (0 on empty levels).
        bid_ct, ask_ct: [N, 10] int32 order counts.
        segment_start, segment_stop: [S] int64 row ranges [start, stop) of the segments.
        segment_of_row: [N] int64 segment index of each row.
        tick_size: price of one tick in currency units.
        multiplier: currency per price unit per lot.
        price_origin_fixed: fixed-point price (1e-9 units) of tick 0.
        tick_size_fixed: fixed-point tick.
        features: optional [N, F] float32 per-snapshot features (set by
            ``lobsurf.models.feature_table.with_feature_table``, which the training step
            gathers by row instead of computing them per window); None without.
        feature_config: the ``FeatureConfig`` the table holds (None without one).
        fee_per_lot, fee_bps: the instrument's fees recorded in the store at ingest
            (currency per lot, bps of notional; lobsurf.sim.fees); None: not recorded.
            The taker fee, paid by market orders.
        sell_trade_px_ticks: [N] int32 lowest price (ticks, the origin of ``bid_px_ticks``)
            at which a seller-initiated trade printed in (row - 1, row]; ``TRADE_NONE_SELL``
            where none did. None without trades.
        sell_trade_sz: [N] int32 lots sold by sellers at that lowest price; 0 where none.
        buy_trade_px_ticks: [N] int32 highest price at which a buyer-initiated trade printed
            in (row - 1, row]; ``TRADE_NONE_BUY`` where none did. None without trades.
        buy_trade_sz: [N] int32 lots bought by buyers at that highest price; 0 where none.
        has_trades: whether the four trade columns are there (False: a store written before
            trades were recorded or from a source without them; passive orders are refused
            on it).
        maker_fee_per_lot, maker_fee_bps: the maker fee recorded in the store at ingest,
            paid by resting orders' fills (negative: a rebate); None: not recorded.
        synth: the synthetic generator's config recorded in the store (``Manifest.synth``);
            None for real data.
        size_unit: base-asset amount of one size unit ("lot"; 1 for whole lots).
        market_hours: "sessions" or "24/7" (the store's instrument record).
    """

    ts_ns: torch.Tensor
    bid_px_ticks: torch.Tensor
    ask_px_ticks: torch.Tensor
    bid_sz: torch.Tensor
    ask_sz: torch.Tensor
    bid_ct: torch.Tensor
    ask_ct: torch.Tensor
    segment_start: torch.Tensor
    segment_stop: torch.Tensor
    segment_of_row: torch.Tensor
    tick_size: float
    multiplier: float
    price_origin_fixed: int
    tick_size_fixed: int
    features: torch.Tensor | None = None
    feature_config: object | None = None
    fee_per_lot: float | None = None
    fee_bps: float | None = None
    sell_trade_px_ticks: torch.Tensor | None = None
    sell_trade_sz: torch.Tensor | None = None
    buy_trade_px_ticks: torch.Tensor | None = None
    buy_trade_sz: torch.Tensor | None = None
    has_trades: bool = False
    maker_fee_per_lot: float | None = None
    maker_fee_bps: float | None = None
    synth: dict | None = None
    size_unit: float = 1.0
    market_hours: str = SESSIONS

    def __post_init__(self) -> None:
        present = [getattr(self, name) is not None for name in TRADE_FIELDS]
        if self.has_trades and not all(present):
            raise ValueError("has_trades needs all four trade columns")
        if not self.has_trades and any(present):
            raise ValueError("trade columns given but has_trades is False")

    def __len__(self) -> int:
        return int(self.ts_ns.shape[0])

    @property
    def num_segments(self) -> int:
        return int(self.segment_start.shape[0])

    @property
    def device(self) -> torch.device:
        return self.ts_ns.device

    def to(self, device: torch.device | str) -> BookTensors:
        moved = {
            f.name: (v.to(device) if isinstance(v, torch.Tensor) else v)
            for f in fields(self)
            for v in [getattr(self, f.name)]
        }
        return BookTensors(**moved)

    def mid_ticks(self) -> torch.Tensor:
        """[N] float64 mid price in ticks (half ticks are exact in float64)."""
        return (self.bid_px_ticks[:, 0].double() + self.ask_px_ticks[:, 0].double()) / 2

    def price(self, ticks: torch.Tensor) -> torch.Tensor:
        """Ticks above the origin → currency price (float64)."""
        return ticks.double() * self.tick_size + self.price_origin_fixed / 1e9


#: BookTensors fields indexed by row: a slice of the book slices each of them
ROW_FIELDS = ("ts_ns", "bid_px_ticks", "ask_px_ticks", "bid_sz", "ask_sz", "bid_ct", "ask_ct",
              "segment_of_row") + TRADE_FIELDS


@dataclass
class Window:
    """The last K snapshots before each of B cursors: every field [B, K, 10] (ts: [B, K])."""

    ts_ns: torch.Tensor
    bid_px_ticks: torch.Tensor
    ask_px_ticks: torch.Tensor
    bid_sz: torch.Tensor
    ask_sz: torch.Tensor
    bid_ct: torch.Tensor
    ask_ct: torch.Tensor


def _fill_empty_levels(px: np.ndarray, size: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
    # px, size: [n, 10] fixed point; step = -tick for bids (prices fall), +tick for asks.
    px = px.copy()
    empty = px == UNDEF_PRICE
    size = np.where(empty, 0, size)
    for level in range(1, LEVELS):
        px[:, level] = np.where(empty[:, level], px[:, level - 1] + step, px[:, level])
    return px, size


INT32 = np.iinfo(np.int32)


def _as_int32(values: np.ndarray, what: str, store: Store, first_row: int) -> np.ndarray:
    # The store holds uint32 (as DBN); the device tensors int32. A cast would wrap a size
    # above 2**31 - 1 to a negative one, so such a value is refused, not converted.
    if values.size and int(values.max()) > INT32.max:
        row = first_row + int(np.argwhere(values > INT32.max)[0][0])
        raise StoreError(f"{store.path}: row {row}: {what} {int(values.max())} is more than "
                         f"the device dataset holds (int32, {INT32.max})")
    return values.astype(np.int32)


def load_book_tensors(
    store: Store,
    device: torch.device | str = "cpu",
    instrument_id: int | None = None,
    segments: list[int] | None = None,
    chunk_rows: int = 1 << 20,
) -> BookTensors:
    """Load one instrument's segments of a store onto ``device``.

    Args:
        store: an open store.
        device: where the tensors live.
        instrument_id: which instrument; may be omitted when the store holds one.
        segments: indices into ``store.manifest.segments`` to load (default: all of the
            instrument's), in store order. Row indices of the result are renumbered.
        chunk_rows: rows converted at a time on the host (bounds host memory).
    """
    manifest = store.manifest
    ids = sorted({s.instrument_id for s in manifest.segments})
    if instrument_id is None:
        if len(ids) != 1:
            raise StoreError(f"store holds instruments {ids}; choose one with instrument_id "
                             "(--instrument-id)")
        instrument_id = ids[0]
    inst = manifest.instrument(instrument_id)
    chosen = [
        i for i, s in enumerate(manifest.segments)
        if s.instrument_id == instrument_id and (segments is None or i in segments)
    ]
    if not chosen:
        raise StoreError(f"no segments of instrument {instrument_id} selected")
    tick = inst.tick_size_fixed
    lowest = min(
        int(np.min(store.columns["bid_px"][s.start:s.stop, 0]))
        for s in (manifest.segments[i] for i in chosen)
    )
    # Origin: the lowest top-of-book bid, leaving room below for the deeper bid levels.
    origin = lowest - ORIGIN_HEADROOM_TICKS * tick
    origin -= origin % tick

    def ticks(px: np.ndarray) -> np.ndarray:
        # Range first, in Python ints: px - origin itself can overflow int64 for absurd prices.
        if px.size and not (INT32.min <= (int(px.min()) - origin) // tick
                            and (int(px.max()) - origin) // tick <= INT32.max):
            raise StoreError(f"{store.path}: prices span more ticks than int32 holds")
        rel, off_grid = np.divmod(px - origin, tick)
        if off_grid.any():
            raise StoreError(f"prices off the instrument's tick {tick / 1e9:g}; re-ingest with "
                             "the right --tick-size")
        return rel.astype(np.int32)

    parts: dict[str, list[np.ndarray]] = {k: [] for k in
                                          ("ts", "bpx", "apx", "bsz", "asz", "bct", "act",
                                           *TRADE_FIELDS)}
    starts, stops, seg_of_row = [], [], []
    offset = 0
    for seg_index, i in enumerate(chosen):
        seg = manifest.segments[i]
        starts.append(offset)
        for lo in range(seg.start, seg.stop, chunk_rows):
            hi = min(seg.stop, lo + chunk_rows)
            c = store.rows(lo, hi)
            bpx, bsz = _fill_empty_levels(c.bid_px, c.bid_sz, -tick)
            apx, asz = _fill_empty_levels(c.ask_px, c.ask_sz, +tick)
            parts["ts"].append(c.ts_recv_ns)
            parts["bpx"].append(ticks(bpx))
            parts["apx"].append(ticks(apx))
            parts["bsz"].append(_as_int32(bsz, "bid size", store, lo))
            parts["asz"].append(_as_int32(asz, "ask size", store, lo))
            parts["bct"].append(_as_int32(np.where(c.bid_px == UNDEF_PRICE, 0, c.bid_ct),
                                          "bid order count", store, lo))
            parts["act"].append(_as_int32(np.where(c.ask_px == UNDEF_PRICE, 0, c.ask_ct),
                                          "ask order count", store, lo))
            if store.has_trades:
                for name, column in zip(TRADE_FIELDS,
                                        _trade_columns(store, c, lo, origin, tick)):
                    parts[name].append(column)
        offset += len(seg)
        stops.append(offset)
        seg_of_row.append(np.full(len(seg), seg_index, np.int64))

    def dev(key: str) -> torch.Tensor:
        return torch.from_numpy(np.concatenate(parts[key])).to(device)

    return BookTensors(
        ts_ns=dev("ts"),
        bid_px_ticks=dev("bpx"),
        ask_px_ticks=dev("apx"),
        bid_sz=dev("bsz"),
        ask_sz=dev("asz"),
        bid_ct=dev("bct"),
        ask_ct=dev("act"),
        segment_start=torch.tensor(starts, dtype=torch.int64, device=device),
        segment_stop=torch.tensor(stops, dtype=torch.int64, device=device),
        segment_of_row=torch.from_numpy(np.concatenate(seg_of_row)).to(device),
        tick_size=inst.tick_size,
        multiplier=inst.multiplier,
        price_origin_fixed=int(origin),
        tick_size_fixed=int(tick),
        fee_per_lot=inst.fee_per_lot,
        fee_bps=inst.fee_bps,
        maker_fee_per_lot=inst.maker_fee_per_lot,
        maker_fee_bps=inst.maker_fee_bps,
        **({name: dev(name) for name in TRADE_FIELDS} if store.has_trades else {}),
        has_trades=store.has_trades,
        synth=manifest.synth,
        size_unit=inst.size_unit,
        market_hours=inst.market_hours,
    )


def _trade_columns(store: Store, chunk, lo: int, origin: int, tick: int) -> tuple:
    # The four trade columns of store rows [lo, lo + len(chunk)), from the trade table; the
    # quotes before each row classify trades of unknown side (trade_columns).
    n = len(chunk)
    trades = store.trades_of_rows(lo, lo + n)
    local = trades.with_rows(trades.row - lo)
    bid0, ask0 = chunk.bid_px[:, 0].astype(np.int64), chunk.ask_px[:, 0].astype(np.int64)
    if lo > 0:  # row lo - 1's quotes (a segment's first row holds no trades: any will do)
        bid0 = np.concatenate([[int(store.columns["bid_px"][lo - 1, 0])], bid0])
        ask0 = np.concatenate([[int(store.columns["ask_px"][lo - 1, 0])], ask0])
    else:
        bid0, ask0 = np.concatenate([bid0[:1], bid0]), np.concatenate([ask0[:1], ask0])
    try:
        return row_trade_columns(local, n, bid0[local.row], ask0[local.row], origin, tick)
    except ValueError as exc:
        raise StoreError(f"{store.path}: rows {lo}..{lo + n - 1}: {exc}") from None


def window_rows(end_row: torch.Tensor, window: int) -> torch.Tensor:
    """[B] last rows → [B, K] row indices end_row-K+1 .. end_row (oldest first)."""
    offsets = torch.arange(1 - window, 1, device=end_row.device, dtype=end_row.dtype)
    return end_row[:, None] + offsets


def clamped_window_rows(book: BookTensors, end_row: torch.Tensor, window: int) -> torch.Tensor:
    """[B] last rows -> [B, K] rows of their K-windows clamped to [0, N): the rows
    ``gather_window`` reads (callers keep windows inside their segment; the clamp only keeps
    a stray index from reading out of bounds)."""
    return window_rows(end_row, window).clamp_(0, len(book) - 1)


def gather_window(book: BookTensors, end_row: torch.Tensor, window: int) -> Window:
    """Gather the K snapshots ending at each cursor.

    Args:
        book: the device dataset.
        end_row: [B] int64 row of the newest snapshot of each window. Callers keep
            end_row - K + 1 inside the cursor's segment; rows are clamped to [0, N) so a
            stray index can never read out of bounds.
        window: K.

    Returns:
        Window with [B, K, 10] book fields and [B, K] timestamps, oldest snapshot first.
    """
    rows = clamped_window_rows(book, end_row, window)
    return Window(
        ts_ns=book.ts_ns[rows],
        bid_px_ticks=book.bid_px_ticks[rows],
        ask_px_ticks=book.ask_px_ticks[rows],
        bid_sz=book.bid_sz[rows],
        ask_sz=book.ask_sz[rows],
        bid_ct=book.bid_ct[rows],
        ask_ct=book.ask_ct[rows],
    )
