"""The resting orders' walk over a step's rows as one Triton kernel (the CUDA path of
``lobsurf.sim.passive``'s row walk).

Per row the walk reads each order's size, prints and crosses at its price
(``lobsurf.sim.queue.read_rows``), then both sides' fills (``lobsurf.sim.queue.fill_known``),
then books the bid's fill, then the ask's (``lobsurf.sim.episode.book_fill``). As PyTorch ops
that is a [B, R, 2, 10] gather of the window and dozens of small kernels a row, each
reading and writing every [B] field; here one program walks all rows of a block of envs
with the fields in registers, reads and writes each field once, and reads the book only
for the sides that rest an order (benchmarks/RESULTS.md, "Simulator step / With passive
orders").

Its results equal the PyTorch walk's bit for bit: the same operations in the same order
in float64 and int64; on CUDA each float64 product is rounded on its own (``mul.rn``), as
PyTorch's separate kernels round it, never fused into the next addition. On CPU it runs
in Triton's interpreter (the tests), where no product is fused.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from lobsurf.models.kernels.triton_support import available_for, interpreter_active
from lobsurf.sim.tables import PassiveTables

try:
    import triton
    import triton.language as tl
except ImportError:  # installs without Triton: the PyTorch walk runs instead
    triton = None

#: whether float64 products are rounded alone on CUDA (``mul.rn``); never in the interpreter,
#: which is fixed when Triton is imported
EXACT_PRODUCTS = not interpreter_active()
#: envs one program walks (a power of two) and its warps
WALK_BLOCK = 64
WALK_WARPS = 4


class Walked(NamedTuple):
    """What the walk returns: the orders ([B, 2] lots left, queue ahead, the last row's
    visible size and whether seen, lots filled so far this step), the books' fields ([B],
    ``TradeBooks`` order) and the maker fees paid so far."""

    remaining: torch.Tensor
    queue: torch.Tensor
    size: torch.Tensor
    seen: torch.Tensor
    filled: torch.Tensor
    books: tuple[torch.Tensor, ...]
    maker_fees: torch.Tensor


def walk_kernel_runs(device: torch.device | str) -> bool:
    """Whether the walk's kernel runs on ``device``: on CUDA where Triton imports (the CPU
    keeps the PyTorch walk; the tests run the kernel in Triton's interpreter)."""
    return torch.device(device).type == "cuda" and available_for(torch.device(device))


if triton is not None:

    @triton.jit
    def _mul(a, b, EXACT: tl.constexpr):
        """a * b in float64, rounded on its own (never fused into a following add)."""
        if EXACT:
            return tl.inline_asm_elementwise("mul.rn.f64 $0, $1, $2;", "=d,d,d", [a, b],
                                             dtype=tl.float64, is_pure=True, pack=1)
        else:
            return a * b

    @triton.jit
    def _fill(remaining, queue, size_before, seen_before, size, seen, through, traded,
              PROBABILISTIC: tl.constexpr, POWER: tl.constexpr, EXACT: tl.constexpr):
        """``lobsurf.sim.queue.fill_known`` for one side of a block of envs."""
        traded_f = traded.to(tl.float64)
        beyond = tl.maximum(traded_f - queue, 0.0).to(tl.int64)  # >= 0: floor = truncation
        filled = tl.where(through, remaining, tl.minimum(beyond, remaining))
        queue = tl.maximum(queue - traded_f, 0.0)
        if PROBABILISTIC:
            level = tl.maximum(size_before - traded, 0)
            front = tl.minimum(queue, level.to(tl.float64))
            cancelled = level - size
            share = front / tl.maximum(level, 1).to(tl.float64)  # float64: IEEE-rounded
            p_ahead = share
            for _ in tl.static_range(POWER - 1):
                p_ahead = _mul(p_ahead, share, EXACT)
            moved = tl.maximum(front - _mul(p_ahead, cancelled.to(tl.float64), EXACT), 0.0)
            queue = tl.where(seen_before & seen & (cancelled > 0), moved, queue)
        queue = tl.where(seen, tl.minimum(queue, size.to(tl.float64)), queue)
        return filled, remaining - filled, queue

    @triton.jit
    def _book(lots, SIGN: tl.constexpr, price, position, cash, fees, reward, closes, wins,
              gross_ticks, closed_fees, flow_sum, fees_paid, filled_sum, turnover, maker_fees,
              fee_per_lot, fee_per_value_tick, tick_value, BPS_FEE: tl.constexpr,
              EXACT: tl.constexpr):
        """``lobsurf.sim.episode.book_fill`` of one side's fill at the maker fee."""
        held = tl.abs(position)
        close = (held + lots - tl.abs(position + SIGN * lots)) >> 1
        value = lots * price
        close_value = close * price
        fee = _mul(lots.to(tl.float64), fee_per_lot, EXACT)
        close_fee = _mul(close.to(tl.float64), fee_per_lot, EXACT)
        if BPS_FEE:
            fee = fee + _mul(value.to(tl.float64), fee_per_value_tick, EXACT)
            close_fee = close_fee + _mul(close_value.to(tl.float64), fee_per_value_tick, EXACT)
        flow = value * -SIGN
        close_flow = close_value * -SIGN
        closed = (close == held) & (close > 0)
        gross = cash + close_flow
        trade_fees = fees + close_fee
        net = _mul(gross.to(tl.float64), tick_value, EXACT) - trade_fees
        position = position + lots * SIGN
        cash = tl.where(closed, flow - close_flow, cash + flow)
        fees = tl.where(closed, fee - close_fee, fees + fee)
        reward = reward + tl.where(closed, net, 0.0)
        closes = closes + closed.to(tl.int64)
        wins = wins + (closed & (net > 0.0)).to(tl.int64)
        gross_ticks = gross_ticks + tl.where(closed, gross, 0)
        closed_fees = closed_fees + tl.where(closed, trade_fees, 0.0)
        return (position, cash, fees, reward, closes, wins, gross_ticks, closed_fees,
                flow_sum + flow, fees_paid + fee, filled_sum + lots * SIGN, turnover + lots,
                maker_fees + fee)

    @triton.jit
    def _read(book_px_ptr, book_sz_ptr, trade_px_ptr, trade_sz_ptr, row, price, active,
              SIDE: tl.constexpr, SIGN: tl.constexpr, LEVELS: tl.constexpr):
        """``lobsurf.sim.queue.read_rows`` of one side's orders at normalized ``price``
        [BLOCK] in every row of ``row`` (int64 [BLOCK, ROWS]) at once: int32 size, seen,
        fill-all event, int32 lots printed at the price. Only the lanes of ``active``
        [BLOCK, ROWS] read memory (the others read an empty row: nothing prints or
        crosses there), so that every row's loads are in flight together."""
        at = price[:, None]
        base = (row * 2 + SIDE) * LEVELS
        size = tl.zeros(row.shape, tl.int32)
        for level in tl.static_range(LEVELS):
            px = tl.load(book_px_ptr + base + level, mask=active, other=0)
            sz = tl.load(book_sz_ptr + base + level, mask=active, other=0)
            size += tl.where(px.to(tl.int64) * SIGN == at, sz, 0)
        deepest_px = tl.load(book_px_ptr + base + LEVELS - 1, mask=active, other=0)
        deepest_sz = tl.load(book_sz_ptr + base + LEVELS - 1, mask=active, other=0)
        seen = (at >= deepest_px.to(tl.int64) * SIGN) | (deepest_sz == 0)
        other_best = tl.load(book_px_ptr + (row * 2 + 1 - SIDE) * LEVELS, mask=active, other=0)
        trade_px = tl.load(trade_px_ptr + row * 2 + SIDE, mask=active, other=0).to(tl.int64)
        trade_sz = tl.load(trade_sz_ptr + row * 2 + SIDE, mask=active, other=0)
        through = ((trade_px < at) | (other_best.to(tl.int64) * SIGN <= at)) & active
        traded = tl.where((trade_px == at) & active, trade_sz, 0)
        return size, seen & active, through, traded

    @triton.jit
    def _column(x, index, k: tl.constexpr):
        """Column ``k`` of [BLOCK, ROWS] ``x`` (``index``: the column numbers [ROWS])."""
        return tl.sum(tl.where(index[None, :] == k, x, 0), axis=1)

    @triton.jit
    def _walk_kernel(ints_ptr, floats_ptr, rows_ptr, book_px_ptr, book_sz_ptr, trade_px_ptr,
                     trade_sz_ptr, fees_ptr, out_ints_ptr, out_floats_ptr, B, s_rows_b,
                     FIRST: tl.constexpr, R: tl.constexpr, INTS: tl.constexpr,
                     OUT_INTS: tl.constexpr, FLOATS: tl.constexpr, LEVELS: tl.constexpr,
                     ROWS_P2: tl.constexpr, PROBABILISTIC: tl.constexpr,
                     POWER: tl.constexpr, BPS_FEE: tl.constexpr, EXACT: tl.constexpr,
                     BLOCK: tl.constexpr):
        """Walk rows FIRST + 1 .. FIRST + R of the window for BLOCK envs, row FIRST read for
        the start: the packed state in (rows of INTS int64 and FLOATS float64), out in rows
        of OUT_INTS int64 and FLOATS float64 (``walk_rows_triton`` lists the columns)."""
        env = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        live = env < B
        ints = ints_ptr + env * INTS
        floats = floats_ptr + env * FLOATS
        rem_b = tl.load(ints + 0, mask=live, other=0)
        rem_a = tl.load(ints + 1, mask=live, other=0)
        join_b = tl.load(ints + 2, mask=live, other=0) != 0
        join_a = tl.load(ints + 3, mask=live, other=0) != 0
        got_b = tl.load(ints + 4, mask=live, other=0)
        got_a = tl.load(ints + 5, mask=live, other=0)
        position = tl.load(ints + 6, mask=live, other=0)
        cash = tl.load(ints + 7, mask=live, other=0)
        closes = tl.load(ints + 8, mask=live, other=0)
        wins = tl.load(ints + 9, mask=live, other=0)
        gross_ticks = tl.load(ints + 10, mask=live, other=0)
        flow = tl.load(ints + 11, mask=live, other=0)
        filled = tl.load(ints + 12, mask=live, other=0)
        turnover = tl.load(ints + 13, mask=live, other=0)
        price_b = tl.load(ints + 14, mask=live, other=0)
        price_a = tl.load(ints + 15, mask=live, other=0)
        queue_b = tl.load(floats + 0, mask=live, other=0.0)
        queue_a = tl.load(floats + 1, mask=live, other=0.0)
        fees = tl.load(floats + 2, mask=live, other=0.0)
        reward = tl.load(floats + 3, mask=live, other=0.0)
        closed_fees = tl.load(floats + 4, mask=live, other=0.0)
        fees_paid = tl.load(floats + 5, mask=live, other=0.0)
        maker_fees = tl.load(floats + 6, mask=live, other=0.0)
        fee_per_lot = tl.load(fees_ptr + 0)
        fee_per_value_tick = tl.load(fees_ptr + 1)
        tick_value = tl.load(fees_ptr + 2)
        # every row of the walk read at once (the prices stay over it), by the sides that
        # rest an order at its start: column 0 is row FIRST, the start
        column = tl.arange(0, ROWS_P2)
        in_walk = live[:, None] & (column[None, :] <= R)
        row = tl.load(rows_ptr + env[:, None] * s_rows_b + FIRST + column[None, :],
                      mask=in_walk, other=0)
        size2_b, seen2_b, through2_b, traded2_b = _read(
            book_px_ptr, book_sz_ptr, trade_px_ptr, trade_sz_ptr, row, price_b,
            in_walk & (rem_b > 0)[:, None], 0, 1, LEVELS)
        size2_a, seen2_a, through2_a, traded2_a = _read(
            book_px_ptr, book_sz_ptr, trade_px_ptr, trade_sz_ptr, row, -price_a,
            in_walk & (rem_a > 0)[:, None], 1, -1, LEVELS)
        # the start: each order's size there, and a joining order's queue behind it
        size_b = _column(size2_b, column, 0).to(tl.int64)
        size_a = _column(size2_a, column, 0).to(tl.int64)
        seen_b = _column(seen2_b.to(tl.int32), column, 0) != 0
        seen_a = _column(seen2_a.to(tl.int32), column, 0) != 0
        queue_b = tl.where(join_b, tl.where(seen_b, size_b.to(tl.float64), float("inf")),
                           queue_b)
        queue_a = tl.where(join_a, tl.where(seen_a, size_a.to(tl.float64), float("inf")),
                           queue_a)
        for k in tl.static_range(1, R + 1):
            sz_b = _column(size2_b, column, k).to(tl.int64)
            sz_a = _column(size2_a, column, k).to(tl.int64)
            sn_b = _column(seen2_b.to(tl.int32), column, k) != 0
            sn_a = _column(seen2_a.to(tl.int32), column, k) != 0
            th_b = _column(through2_b.to(tl.int32), column, k) != 0
            th_a = _column(through2_a.to(tl.int32), column, k) != 0
            tr_b = _column(traded2_b, column, k).to(tl.int64)
            tr_a = _column(traded2_a, column, k).to(tl.int64)
            lots_b, rem_b, queue_b = _fill(rem_b, queue_b, size_b, seen_b, sz_b, sn_b, th_b,
                                           tr_b, PROBABILISTIC, POWER, EXACT)
            lots_a, rem_a, queue_a = _fill(rem_a, queue_a, size_a, seen_a, sz_a, sn_a, th_a,
                                           tr_a, PROBABILISTIC, POWER, EXACT)
            size_b, seen_b, size_a, seen_a = sz_b, sn_b, sz_a, sn_a
            got_b += lots_b
            got_a += lots_a
            (position, cash, fees, reward, closes, wins, gross_ticks, closed_fees, flow,
             fees_paid, filled, turnover, maker_fees) = _book(
                lots_b, 1, price_b, position, cash, fees, reward, closes, wins, gross_ticks,
                closed_fees, flow, fees_paid, filled, turnover, maker_fees, fee_per_lot,
                fee_per_value_tick, tick_value, BPS_FEE, EXACT)
            (position, cash, fees, reward, closes, wins, gross_ticks, closed_fees, flow,
             fees_paid, filled, turnover, maker_fees) = _book(
                lots_a, -1, price_a, position, cash, fees, reward, closes, wins, gross_ticks,
                closed_fees, flow, fees_paid, filled, turnover, maker_fees, fee_per_lot,
                fee_per_value_tick, tick_value, BPS_FEE, EXACT)
        out = out_ints_ptr + env * OUT_INTS
        tl.store(out + 0, rem_b, mask=live)
        tl.store(out + 1, rem_a, mask=live)
        tl.store(out + 2, size_b, mask=live)
        tl.store(out + 3, size_a, mask=live)
        tl.store(out + 4, seen_b.to(tl.int64), mask=live)
        tl.store(out + 5, seen_a.to(tl.int64), mask=live)
        tl.store(out + 6, got_b, mask=live)
        tl.store(out + 7, got_a, mask=live)
        tl.store(out + 8, position, mask=live)
        tl.store(out + 9, cash, mask=live)
        tl.store(out + 10, closes, mask=live)
        tl.store(out + 11, wins, mask=live)
        tl.store(out + 12, gross_ticks, mask=live)
        tl.store(out + 13, flow, mask=live)
        tl.store(out + 14, filled, mask=live)
        tl.store(out + 15, turnover, mask=live)
        out_f = out_floats_ptr + env * FLOATS
        tl.store(out_f + 0, queue_b, mask=live)
        tl.store(out_f + 1, queue_a, mask=live)
        tl.store(out_f + 2, fees, mask=live)
        tl.store(out_f + 3, reward, mask=live)
        tl.store(out_f + 4, closed_fees, mask=live)
        tl.store(out_f + 5, fees_paid, mask=live)
        tl.store(out_f + 6, maker_fees, mask=live)


def walk_rows_triton(remaining: torch.Tensor, queue: torch.Tensor, joins: torch.Tensor,
                     filled: torch.Tensor, books: tuple[torch.Tensor, ...],
                     maker_fees: torch.Tensor, raw_price: torch.Tensor, rows: torch.Tensor,
                     first: int, count: int, pt: PassiveTables, tick_value: torch.Tensor,
                     model: str, power: int) -> Walked:
    """The walk of ``lobsurf.sim.passive`` over the window's rows ``first + 1 .. first +
    count`` (``rows`` [B, S + 1] the book rows of each env's window) as one kernel that reads
    the rows itself (``pt``: the ``PassiveTables``), row ``first`` giving the orders' start
    sizes and a joining order's queue (``joins`` [B, 2] bool). The orders [B, 2] (lots,
    queue, lots filled so far), ``books`` the 12 ``TradeBooks`` fields [B] in their order,
    ``raw_price`` [B, 2] their prices (as fills are booked), ``tick_value`` 0-d float64;
    returns ``Walked``. Only sides with lots read the rows: the size, seen flag and queue
    it returns for an empty side are not defined."""
    if model not in ("risk_averse", "probabilistic") or power < 1:
        raise ValueError(f"walk_rows_triton: unknown queue model {model!r} or power {power}")
    position, cash, fees, reward, closes, wins, gross, closed_fees, flow, paid, net_lots, \
        turnover = books
    num_envs, levels = remaining.shape[0], pt.book_px.shape[-1]
    # the state packed in rows of 16 int64 (remaining, joins, filled: 2 each; the books'
    # position, cash, closes, wins, gross_ticks, flow, filled, turnover; the raw prices: 2)
    # and 7 float64 (queue: 2; the books' fees, reward, closed_fees, fees_paid; maker fees).
    # Out: 16 int64 (remaining, the last row's size and seen, filled: 2 each; the books'
    # eight) and the same 7 float64
    ints = torch.cat((remaining, joins.long(), filled,
                      torch.stack((position, cash, closes, wins, gross, flow, net_lots,
                                   turnover), 1), raw_price), 1)
    floats = torch.cat((queue, torch.stack((fees, reward, closed_fees, paid, maker_fees), 1)),
                       1)
    no_bps = pt.maker_fee_per_value_tick is None
    constants = torch.stack((pt.maker_fee_per_lot, pt.maker_fee_per_lot if no_bps
                             else pt.maker_fee_per_value_tick, tick_value))
    out_ints, out_floats = ints.new_empty(num_envs, 16), torch.empty_like(floats)
    exact = remaining.is_cuda and EXACT_PRODUCTS
    _walk_kernel[(triton.cdiv(num_envs, WALK_BLOCK),)](
        ints, floats, rows, pt.book_px, pt.book_sz, pt.trade_px, pt.trade_sz, constants,
        out_ints, out_floats, num_envs, rows.stride(0), FIRST=first, R=count,
        INTS=ints.shape[1], OUT_INTS=out_ints.shape[1],
        FLOATS=floats.shape[1], LEVELS=levels,
        ROWS_P2=triton.next_power_of_2(count + 1), PROBABILISTIC=model == "probabilistic",
        POWER=power, BPS_FEE=not no_bps, EXACT=exact, BLOCK=WALK_BLOCK, num_warps=WALK_WARPS)
    i, f = out_ints.unbind(1), out_floats.unbind(1)
    books_out = (i[8], i[9], f[2], f[3], i[10], i[11], i[12], f[4], i[13], f[5], i[14], i[15])
    return Walked(remaining=out_ints[:, 0:2], queue=out_floats[:, 0:2], size=out_ints[:, 2:4],
                  seen=out_ints[:, 4:6] != 0, filled=out_ints[:, 6:8], books=books_out,
                  maker_fees=f[6])
