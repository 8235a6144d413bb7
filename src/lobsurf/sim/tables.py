"""The device constants a simulator step reads, made once by ``BatchedLobEnv``:
``EnvTables`` for every step and, inside it, ``PassiveTables`` for resting orders
(``lobsurf.sim.passive.passive_tables`` builds those)."""

from __future__ import annotations

from typing import NamedTuple

import torch


class PassiveTables(NamedTuple):
    """The resting orders' device constants, made once (``passive_tables``).

    book_px, book_sz: [N, 2, 10] int32 the bid and ask levels of each row (views of the
    env's interleaved sides); trade_px, trade_sz: [N, 2] int32 each row's extreme print
    against the bid (sellers' lowest price) and against the ask (buyers' highest, negated),
    normalized as ``lobsurf.sim.queue`` reads them (``TRADE_NONE_SELL`` where none);
    side_sign [2, 1] int32 (+1 bid, -1 ask); window [S + 1] int64 0..S, the rows a step
    reads after its cursor; post_lots [A, 2] int64; cancel [A, 2] bool; maker_fee_per_lot,
    maker_fee_per_value_tick (None without a bps maker fee) 0-d float64; last_row: N - 1;
    walk_kernel: the rows are read and walked by one kernel (``lobsurf.sim.passive_triton``:
    CUDA).
    """

    book_px: torch.Tensor
    book_sz: torch.Tensor
    trade_px: torch.Tensor
    trade_sz: torch.Tensor
    side_sign: torch.Tensor
    window: torch.Tensor
    post_lots: torch.Tensor
    cancel: torch.Tensor
    maker_fee_per_lot: torch.Tensor
    maker_fee_per_value_tick: torch.Tensor | None
    last_row: int
    walk_kernel: bool = False


class EnvTables(NamedTuple):
    """The env's device constants a step reads, made once (see ``BatchedLobEnv.__init__``).

    order_table [A] int64 signed lots per action; fill_px / fill_sz [2N - 2 latency, 10] the
    interleaved sides from the fill row on (2 row + buy); strictly_upper [10, 10] float64;
    mid2_ticks [N] int64 bid + ask; valid_end, valid_offset, segment_stop [S] int64 reset
    tables; fee_per_lot, fee_per_value_tick (None without a bps fee), tick_value,
    half_tick_value 0-d float64 (the taker fee's constants); passive: the resting orders'
    tables, None without passive orders.
    """

    order_table: torch.Tensor
    fill_px: torch.Tensor
    fill_sz: torch.Tensor
    strictly_upper: torch.Tensor
    mid2_ticks: torch.Tensor
    valid_end: torch.Tensor
    valid_offset: torch.Tensor
    segment_stop: torch.Tensor
    fee_per_lot: torch.Tensor
    fee_per_value_tick: torch.Tensor | None
    tick_value: torch.Tensor
    half_tick_value: torch.Tensor
    passive: PassiveTables | None = None
