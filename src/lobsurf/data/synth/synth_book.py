"""The book side of the synthetic market: one chunk of 10-level books and their events.

Used by ``lobsurf.data.synth`` (which owns the config, the clock and the files); the model
is written out in ``docs/synth.md``. Everything is vectorised over the chunk's rows; the
``BookCarry`` holds what the next chunk continues from. Prices are kept as integer ticks
until the end, so every price is exactly on the grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lobsurf.data.readers.dbn_encode import EventFields
from lobsurf.data.schema import LEVELS
from lobsurf.data.synth.synth_processes import (
    RunState,
    SpawnedStreams,
    alternating_runs,
    ar1_filter,
    forward_fill,
    refresh_source,
)

if TYPE_CHECKING:
    from lobsurf.data.synth.config import SynthConfig

#: Spread phases: a run of one tick, or a wide run of two or three ticks.
TIGHT, WIDE = 0, 1
DEEP = LEVELS - 1  # levels below the top whose sizes follow the refresh model


@dataclass
class BookStreams(SpawnedStreams):
    """One random generator per process of the book, so that each stream is consumed in
    order whatever the chunk sizes: a day's books do not depend on ``chunk_rows``."""

    opening: np.random.Generator
    imbalance: np.random.Generator
    depth: np.random.Generator
    spread: np.random.Generator
    direction: np.random.Generator
    shift: np.random.Generator
    refresh_bid: np.random.Generator
    refresh_ask: np.random.Generator
    deep_bid: np.random.Generator
    deep_ask: np.random.Generator


@dataclass
class BookCarry:
    """State between chunks (all prices in ticks).

    Attributes:
        x: imbalance latent (I ~ tanh x) after the last row.
        log_depth: deviation of the log top depth from its mean after the last row.
        mid_sum: best bid + best ask, ticks (twice the mid).
        spread: spread regime; ``spread.value`` is the last row's spread in ticks.
        bid_ticks, ask_ticks: last row's best prices.
        bid_sz, ask_sz: [10] last row's level sizes, lots.
        bid_ct, ask_ct: [10] last row's order counts.
    """

    x: float
    log_depth: float
    mid_sum: int
    spread: RunState
    bid_ticks: int
    ask_ticks: int
    bid_sz: np.ndarray
    ask_sz: np.ndarray
    bid_ct: np.ndarray
    ask_ct: np.ndarray

    @property
    def imbalance(self) -> float:
        return float(self.bid_sz[0] - self.ask_sz[0]) / float(self.bid_sz[0] + self.ask_sz[0])


def _top_sizes(cfg: SynthConfig, x: np.ndarray, log_depth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # Total top depth D >= 2 split by the latent imbalance; each side keeps >= 1 lot.
    depth = 2 + np.minimum(np.floor(np.exp(cfg.top_depth_log_mean + log_depth)), cfg.size_cap_lots)
    bid = np.clip(np.rint(depth * (1 + np.tanh(x)) / 2), 1, depth - 1)
    return bid.astype(np.int64), (depth - bid).astype(np.int64)


def _deep_draw(cfg: SynthConfig, rng: np.random.Generator, deep_level: np.ndarray) -> np.ndarray:
    # Lognormal sizes for levels 1 + deep_level (0..8); the mean log size grows with depth.
    mu = cfg.deep_log_mean + cfg.deep_log_slope * deep_level
    size = np.exp(mu + cfg.deep_log_sd * rng.standard_normal(deep_level.shape))
    return 1 + np.minimum(np.floor(size), cfg.size_cap_lots).astype(np.int64)


def _order_counts(cfg: SynthConfig, size: np.ndarray) -> np.ndarray:
    # Bigger queues hold bigger orders on average: orders grow sublinearly with size.
    return np.maximum(1, np.rint(size ** cfg.order_count_exponent)).astype(np.int64)


def _deep_levels(cfg: SynthConfig, rng: np.random.Generator, refresh: np.ndarray,
                 size_before: np.ndarray, count_before: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # [n, 9] sizes and counts of levels 1..9: new draws only where refreshed, else carried.
    rows, deep_level = np.nonzero(refresh)
    size = np.zeros(refresh.shape, np.int64)
    count = np.zeros(refresh.shape, np.int64)
    size[rows, deep_level] = drawn = _deep_draw(cfg, rng, deep_level)
    count[rows, deep_level] = _order_counts(cfg, drawn)
    source = refresh_source(refresh)
    return forward_fill(size_before, size, source), forward_fill(count_before, count, source)


def initial_book(streams: BookStreams, cfg: SynthConfig) -> BookCarry:
    """The opening book of a session (drawn from the stationary distributions)."""
    rng = streams.opening
    x = float(rng.normal(0, cfg.imbalance_sd))
    log_depth = float(rng.normal(0, cfg.top_depth_log_sd))
    bid0, ask0 = _top_sizes(cfg, np.array([x]), np.array([log_depth]))
    opening_offset = int(np.rint(rng.normal(0, cfg.overnight_sd_ticks)))
    bid = cfg.start_price_fixed // cfg.tick_size_fixed + opening_offset
    spread = RunState(TIGHT, 1, int(rng.geometric(1 / cfg.tight_run_ev)))
    bid_sz = np.concatenate([bid0, _deep_draw(cfg, rng, np.arange(DEEP))])
    ask_sz = np.concatenate([ask0, _deep_draw(cfg, rng, np.arange(DEEP))])
    return BookCarry(
        x=x, log_depth=log_depth, mid_sum=2 * bid + 1, spread=spread, bid_ticks=bid, ask_ticks=bid + 1,
        bid_sz=bid_sz, ask_sz=ask_sz,
        bid_ct=_order_counts(cfg, bid_sz), ask_ct=_order_counts(cfg, ask_sz))


def _spread_values(cfg: SynthConfig):
    def sample(rng: np.random.Generator, phases: np.ndarray) -> np.ndarray:
        wide = np.where(rng.random(phases.shape[0]) < cfg.three_tick_prob, 3, 2)
        return np.where(phases == TIGHT, 1, wide).astype(np.int64)

    return sample


def _best_prices(streams: BookStreams, cfg: SynthConfig, carry: BookCarry, imbalance: np.ndarray,
                 ) -> tuple[np.ndarray, np.ndarray, RunState]:
    # Best bid/ask in ticks. Every mid move has direction d with P(d = +1) =
    # 0.5 + 0.5 * edge * I_{t-1}: the predictable component (docs/synth.md).
    n = imbalance.shape[0]
    _, spread, spread_state = alternating_runs(
        streams.spread, n, carry.spread, (cfg.tight_run_ev, cfg.wide_run_ev), _spread_values(cfg))
    spread_change = np.diff(spread, prepend=carry.spread.value)
    imbalance_before = np.concatenate([[carry.imbalance], imbalance[:-1]])
    p_up = np.clip(0.5 + 0.5 * cfg.edge * imbalance_before, 0.0, 1.0)
    direction = np.where(streams.direction.random(n) < p_up, 1, -1)
    shift = (spread_change == 0) & (streams.shift.random(n) < cfg.move_prob)
    # A one-tick spread change moves the mid by half a tick (one side moves); a two-tick
    # change moves both sides symmetrically; a shift moves both sides one tick.
    mid_step = np.where(spread_change % 2 != 0, direction, 0) + np.where(shift, 2 * direction, 0)
    mid_sum = carry.mid_sum + np.cumsum(mid_step)
    bid, ask = (mid_sum - spread) // 2, (mid_sum + spread) // 2
    if n and int(bid.min()) < LEVELS:
        raise ValueError("synthetic price walked to zero; raise start_price_fixed")
    return bid, ask, spread_state


def _events(cfg: SynthConfig, carry: BookCarry, bid: np.ndarray, ask: np.ndarray,
            bid_sz: np.ndarray, ask_sz: np.ndarray) -> EventFields:
    # The book change behind each snapshot, read off the change from the previous one: the
    # level removed ('C' on its side) when a best price retreats (the trade that took it, if
    # any, is a record of its own: synth_trades), an add when one improves, else the largest
    # size change (add, cancel; 'M' if nothing changed).
    tick = cfg.tick_size_fixed
    bid_prev = np.concatenate([[carry.bid_ticks], bid[:-1]])
    ask_prev = np.concatenate([[carry.ask_ticks], ask[:-1]])
    bid_sz_prev = np.concatenate([carry.bid_sz[None], bid_sz[:-1]])
    ask_sz_prev = np.concatenate([carry.ask_sz[None], ask_sz[:-1]])
    change = np.concatenate([bid_sz - bid_sz_prev, ask_sz - ask_sz_prev], axis=1)  # [n, 20]
    column = np.argmax(np.abs(change), axis=1)
    delta = change[np.arange(len(column)), column]
    on_ask, level = column >= LEVELS, column % LEVELS
    quote_price = np.where(on_ask, ask + level, bid - level) * tick
    quote_action = np.where(delta > 0, ord("A"), np.where(delta < 0, ord("C"), ord("M")))
    cases = [ask > ask_prev, bid < bid_prev, bid > bid_prev, ask < ask_prev]
    action = np.select(cases, [ord("C"), ord("C"), ord("A"), ord("A")], quote_action)
    quote_side = np.where(on_ask, ord("A"), ord("B"))
    side = np.select(cases, [ord("A"), ord("B"), ord("B"), ord("A")], quote_side)
    price = np.select(cases, [ask_prev * tick, bid_prev * tick, bid * tick, ask * tick], quote_price)
    size = np.select(cases, [ask_sz_prev[:, 0], bid_sz_prev[:, 0], bid_sz[:, 0], ask_sz[:, 0]],
                     np.abs(delta))
    depth = np.select(cases, [0, 0, 0, 0], level)
    return EventFields(
        action=action.astype(np.uint8).view("S1"), side=side.astype(np.uint8).view("S1"),
        price=price, size=size, depth=depth, ts_in_delta=np.zeros(len(bid), np.int64))


def book_chunk(streams: BookStreams, cfg: SynthConfig, carry: BookCarry, n: int
               ) -> tuple[dict[str, np.ndarray], EventFields, BookCarry]:
    """n books after ``carry``: SnapshotChunk book fields (store units), events, new carry."""
    # Top of book: OU-like imbalance latent and log depth on the event clock.
    # Innovation sd sigma * sqrt(1 - phi^2) keeps the stationary sd at sigma.
    x_step_sd = cfg.imbalance_sd * np.sqrt(1 - cfg.imbalance_phi**2)
    depth_step_sd = cfg.top_depth_log_sd * np.sqrt(1 - cfg.top_depth_phi**2)
    x = ar1_filter(streams.imbalance.normal(0, x_step_sd, n), cfg.imbalance_phi, carry.x)
    log_depth = ar1_filter(streams.depth.normal(0, depth_step_sd, n), cfg.top_depth_phi,
                           carry.log_depth)
    bid0, ask0 = _top_sizes(cfg, x, log_depth)
    imbalance = (bid0 - ask0) / (bid0 + ask0)
    bid, ask, spread_state = _best_prices(streams, cfg, carry, imbalance)
    # Deeper levels persist until refreshed: at random, or all of a side when its best moves.
    bid_moved = np.diff(bid, prepend=carry.bid_ticks) != 0
    ask_moved = np.diff(ask, prepend=carry.ask_ticks) != 0
    p_refresh = cfg.deep_refresh_prob
    refresh_bid = (streams.refresh_bid.random((n, DEEP)) < p_refresh) | bid_moved[:, None]
    refresh_ask = (streams.refresh_ask.random((n, DEEP)) < p_refresh) | ask_moved[:, None]
    bid_deep, bid_deep_ct = _deep_levels(cfg, streams.deep_bid, refresh_bid, carry.bid_sz[1:],
                                         carry.bid_ct[1:])
    ask_deep, ask_deep_ct = _deep_levels(cfg, streams.deep_ask, refresh_ask, carry.ask_sz[1:],
                                         carry.ask_ct[1:])
    bid_sz = np.concatenate([bid0[:, None], bid_deep], axis=1)
    ask_sz = np.concatenate([ask0[:, None], ask_deep], axis=1)
    levels = np.arange(LEVELS, dtype=np.int64)
    book = {
        "bid_px": (bid[:, None] - levels) * cfg.tick_size_fixed,
        "ask_px": (ask[:, None] + levels) * cfg.tick_size_fixed,
        "bid_sz": bid_sz, "ask_sz": ask_sz,
        "bid_ct": np.concatenate([_order_counts(cfg, bid0)[:, None], bid_deep_ct], axis=1),
        "ask_ct": np.concatenate([_order_counts(cfg, ask0)[:, None], ask_deep_ct], axis=1),
    }
    events = _events(cfg, carry, bid, ask, bid_sz, ask_sz)
    new_carry = BookCarry(
        x=float(x[-1]), log_depth=float(log_depth[-1]), mid_sum=int(bid[-1] + ask[-1]),
        spread=spread_state, bid_ticks=int(bid[-1]), ask_ticks=int(ask[-1]),
        bid_sz=bid_sz[-1].copy(), ask_sz=ask_sz[-1].copy(),
        bid_ct=book["bid_ct"][-1].copy(), ask_ct=book["ask_ct"][-1].copy(),
    )
    return book, events, new_carry
