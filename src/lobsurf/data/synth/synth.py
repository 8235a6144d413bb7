"""Synthetic MBP-10 market data from a stochastic order-flow model with a known edge.

``docs/synth.md`` states the model with its equations and units. In short, per day (one
session on consecutive weekdays, separated by the overnight gap), event t = 0, 1, ...:

* clock: inter-event gaps are exponential with a mean that switches between a calm and a
  busy regime (a Markov-modulated Poisson process), so gaps cluster and are over-dispersed.
* top of book: latent x_t (AR(1), i.e. OU on the event clock) and log-depth (AR(1)) give
  the best-level sizes; the observable queue imbalance I_t = (b0 - a0) / (b0 + a0) is
  mean-reverting.
* deeper levels: lognormal (heavy-tailed) sizes that persist until an event refreshes the
  level, refreshed on the whole side when that side's best price changes.
* spread: runs of one tick alternating with shorter runs of two or three ticks.
* mid moves: a one-tick shift with probability ``move_prob``, or a half-tick move when
  the spread changes by one tick. **Predictable component**: each mid move is up with
  probability clip(0.5 + 0.5 * edge * I_{t-1}, 0, 1), I_{t-1} being the imbalance of the
  snapshot just before it. With edge = 0 moves are independent of everything observable.
* trades (``synth_trades``): a mid move that removes a best level is a trade of that
  level's size; partial trades at rate ``partial_trade_prob`` take the front of a best
  queue and leave the level standing. They come from streams of their own and never change
  the books: a book is the same with and without them.

Generation is vectorised with numpy in bounded chunks (``cfg.chunk_rows``), deterministic
by (seed, day). Every process draws from its own random stream, so the chunk size changes
memory use only, never the data; and the clock's streams are apart from the book's, so a
session's time range is known (a cheap pass over the clock) before a DBN header is written.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from lobsurf.data.readers.dbn_encode import EventFields, write_mbp10_dbn
from lobsurf.data.schema import SnapshotChunk
from lobsurf.data.store import Instrument, Store, StoreWriter
from lobsurf.data.store.generator import write_generator_record
from lobsurf.data.store.ingest import IngestConfig
from lobsurf.data.synth.config import SynthConfig
from lobsurf.data.synth.synth_book import BookCarry, BookStreams, book_chunk, initial_book
from lobsurf.data.synth.synth_processes import RunState, alternating_runs
from lobsurf.data.synth.synth_trades import PartialTrades, TopBefore, TradeStreams, chunk_trades
from lobsurf.data.trades import TradeChunk
from lobsurf.progress import step_progress

#: Random-stream ids mixed into the seed: (seed, day, stream).
BOOK_STREAM = 0
CLOCK_STREAM = 1
TRADE_STREAM = 2
#: Regime phases of the clock.
CALM, BUSY = 0, 1
#: Session-gap threshold of ``write_synth_store``, ns: far above any intra-session gap at
#: sensible densities, far below the overnight gap.
DEFAULT_STORE_GAP_NS = 30 * 60 * 10**9
#: Event times end at least this long before the next UTC midnight, so a day's file never
#: holds timestamps of the next date (receive latency is microseconds: far inside it).
DAY_END_MARGIN_NS = 10**9
DAY_NS = 86_400 * 10**9


def session_date(cfg: SynthConfig, day: int) -> dt.date:
    """Calendar date of day ``day``: the day-th weekday on or after ``first_day``."""
    date = np.busday_offset(np.datetime64(cfg.first_day, "D"), day, roll="forward")
    return dt.date.fromisoformat(str(date))


def session_open_ns(cfg: SynthConfig, day: int) -> int:
    date = session_date(cfg, day)
    midnight = dt.datetime(date.year, date.month, date.day, tzinfo=dt.UTC)
    return int(midnight.timestamp()) * 10**9 + cfg.session_open_s * 10**9


def _chunk_sizes(cfg: SynthConfig) -> Iterator[int]:
    done = 0
    while done < cfg.snapshots_per_day:
        n = min(cfg.chunk_rows, cfg.snapshots_per_day - done)
        yield n
        done += n


def clock_chunks(cfg: SynthConfig, day: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(ts_event_ns [n], ts_recv_ns [n]) per chunk: strictly increasing, recv >= event, all
    on the session's date.

    With few snapshots a day the random gaps can add up past midnight; times that would are
    held just before the day's end instead (1 ns apart), so the file's date is the data's.
    A day of sensible density (the default 200,000 snapshots) never comes near it.
    """
    # One generator per process (regime, gaps, latency): chunking does not change the draws.
    seeds = np.random.SeedSequence([cfg.seed, day, CLOCK_STREAM]).spawn(3)
    regime_rng, gap_rng, latency_rng = (np.random.default_rng(s) for s in seeds)
    mean_gap = np.asarray(cfg.mean_gap_ns)
    runs = cfg.mean_regime_ev
    state = RunState(CALM, CALM, int(regime_rng.geometric(1 / runs[CALM])))
    last_event = session_open_ns(cfg, day)
    # ts_recv_i = i + max_{k<=i}(event_k + latency_k - k): >= event_i + latency_i and
    # strictly increasing even when a later event has a shorter latency.
    recv_base = np.iinfo(np.int64).min
    row = 0
    # Latest allowed time of row i: day end minus the rows still to come (1 ns each), so
    # clamped rows stay strictly increasing; events keep the margin below receive times.
    day_end = session_open_ns(cfg, day) - cfg.session_open_s * 10**9 + DAY_NS - 1
    for n in _chunk_sizes(cfg):
        regime, _, state = alternating_runs(regime_rng, n, state, runs, lambda r, p: p.astype(np.int64))
        gaps = 1 + np.floor(gap_rng.exponential(size=n) * mean_gap[regime]).astype(np.int64)
        ts_event = last_event + np.cumsum(gaps)
        latency = cfg.recv_latency_min_ns + np.floor(
            latency_rng.exponential(cfg.recv_latency_mean_ns, n)).astype(np.int64)
        index = row + np.arange(n, dtype=np.int64)
        recv_limit = day_end - (cfg.snapshots_per_day - 1 - index)
        ts_event = np.minimum(ts_event, recv_limit - DAY_END_MARGIN_NS)
        base = np.maximum(np.maximum.accumulate(ts_event + latency - index), recv_base)
        yield ts_event, np.minimum(base + index, recv_limit)
        last_event, recv_base, row = int(ts_event[-1]), int(base[-1]), row + n


def session_range_ns(cfg: SynthConfig, day: int) -> tuple[int, int]:
    """(session open, last ts_recv + 1) of a day, in UNIX ns: the DBN [start, end)."""
    last = 0
    for _, ts_recv in clock_chunks(cfg, day):
        last = int(ts_recv[-1])
    return session_open_ns(cfg, day), last + 1


def generate_day_with_events(cfg: SynthConfig, day: int
                             ) -> Iterator[tuple[SnapshotChunk, EventFields, TradeChunk]]:
    """Like ``generate_day`` but yields (SnapshotChunk, EventFields, TradeChunk) for the DBN
    writer: each row's book event and the trades of each row's interval."""
    streams = BookStreams.spawn(np.random.SeedSequence([cfg.seed, day, BOOK_STREAM]))
    trade_streams = TradeStreams.spawn(np.random.SeedSequence([cfg.seed, day, TRADE_STREAM]))
    partial = PartialTrades(cfg.partial_trade_prob, cfg.partial_trade_mean_lots,
                            cfg.partial_trade_lean, cfg.tick_size_fixed)
    carry: BookCarry = initial_book(streams, cfg)
    for ts_event, ts_recv in clock_chunks(cfg, day):
        before = TopBefore(carry.bid_ticks, carry.ask_ticks, int(carry.bid_sz[0]),
                           int(carry.ask_sz[0]))
        book, events, carry = book_chunk(streams, cfg, carry, len(ts_event))
        chunk = SnapshotChunk(
            ts_event_ns=ts_event, ts_recv_ns=ts_recv,
            instrument_id=np.full(len(ts_event), cfg.instrument_id, np.int64), **book)
        events.ts_in_delta = np.minimum(ts_recv - ts_event, np.iinfo(np.int32).max)
        yield chunk, events, chunk_trades(trade_streams, partial, before, book)


def generate_day_with_trades(cfg: SynthConfig, day: int
                             ) -> Iterator[tuple[SnapshotChunk, TradeChunk]]:
    """Like ``generate_day`` but yields each chunk with its trades (``row``: the chunk's rows)."""
    for chunk, _, trades in generate_day_with_events(cfg, day):
        yield chunk, trades


def generate_day(cfg: SynthConfig, day: int) -> Iterator[SnapshotChunk]:
    """The snapshots of day ``day`` in chunks of at most ``cfg.chunk_rows`` rows (store units).

    Every book is two-sided with 10 levels on the tick grid, best bid < best ask, sizes
    and counts >= 1. Deterministic by (cfg.seed, day) and the model parameters; the same
    whatever ``cfg.chunk_rows``.
    """
    for chunk, _, _ in generate_day_with_events(cfg, day):
        yield chunk


def mid_ticks(chunk: SnapshotChunk, tick_size_fixed: int) -> np.ndarray:
    """[N] float64 mid price in ticks (x.5 when the spread is odd)."""
    return (chunk.bid_px[:, 0] + chunk.ask_px[:, 0]) / (2.0 * tick_size_fixed)


def top_imbalance(chunk: SnapshotChunk) -> np.ndarray:
    """[N] float64 I = (bid_sz0 - ask_sz0) / (bid_sz0 + ask_sz0), in [-1, 1]."""
    bid, ask = chunk.bid_sz[:, 0].astype(np.float64), chunk.ask_sz[:, 0].astype(np.float64)
    return (bid - ask) / (bid + ask)



def day_file_name(cfg: SynthConfig, day: int) -> str:
    """``SYN-20240102.mbp-10.dbn.zst`` for the symbol and the day's date."""
    return f"{cfg.symbol}-{session_date(cfg, day):%Y%m%d}.mbp-10.dbn.zst"


def write_synth(out_dir: str | os.PathLike, cfg: SynthConfig, progress: bool = False) -> list[Path]:
    """Write one genuine DBN v3 MBP-10 file (zstd) per day into ``out_dir``; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    with step_progress(cfg.days * cfg.snapshots_per_day, "synth", progress) as advance:
        for day in range(cfg.days):
            start_ns, end_ns = session_range_ns(cfg, day)
            path = out / day_file_name(cfg, day)
            write_mbp10_dbn(
                path, _counted(generate_day_with_events(cfg, day), advance),
                dataset=cfg.dataset, symbol=cfg.symbol, instrument_id=cfg.instrument_id,
                start_ns=start_ns, end_ns=end_ns, publisher_id=cfg.publisher_id)
            paths.append(path)
    # the law beside its files: ingest records it in the store (baseline:bayes reads it)
    write_generator_record(out, asdict(cfg), paths)
    return paths


def synth_instrument(cfg: SynthConfig) -> Instrument:
    # The synthetic market is modelled on a US dollar future (E-mini-like multiplier and fee).
    return Instrument(cfg.instrument_id, cfg.symbol, cfg.tick_size_fixed, multiplier=cfg.multiplier,
                      currency="USD", fee_per_lot=cfg.fee_per_lot, fee_bps=cfg.fee_bps)


def synth_ingest_config(cfg: SynthConfig, **settings: Any) -> IngestConfig:
    """The IngestConfig that records ``cfg``'s contract terms (multiplier, currency, fees),
    which its DBN files cannot carry, in the store; ``settings``: other IngestConfig fields."""
    return IngestConfig(**{"multiplier": cfg.multiplier, "currency": "USD",
                           "fee_per_lot": cfg.fee_per_lot, "fee_bps": cfg.fee_bps, **settings})


def write_synth_store(path: str | os.PathLike, cfg: SynthConfig,
                      gap_threshold_ns: int = DEFAULT_STORE_GAP_NS) -> Store:
    """Build a snapshot store of ``cfg``'s days directly (no DBN), trades included; one
    segment per day. The same store as ``write_synth`` and ``lobsurf ingest`` of the files."""
    with StoreWriter(path, gap_threshold_ns=gap_threshold_ns) as writer:
        writer.add_instrument(synth_instrument(cfg))
        writer.synth = asdict(cfg)
        for day in range(cfg.days):
            writer.begin_source(f"synth:{day_file_name(cfg, day)}")
            for chunk, trades in generate_day_with_trades(cfg, day):
                writer.append(chunk, trades=trades)
        writer.close()
    return Store.open(path)


def _counted(items, advance):
    for item in items:
        yield item
        advance(len(item[0]))
