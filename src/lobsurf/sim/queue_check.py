"""The simulator's queue models against the exact FIFO queue of an MBO file.

Role: the check behind the choice of ``SimConfig.queue_model`` (docs/sim_assumptions.md,
"Which queue model"; the figures: benchmarks/RESULTS.md). An MBO file is ingested into a
store as ``lobsurf ingest`` does; at every ``stride``-th row of each segment (a decision
row c) one resting order of ``lots`` is posted on each side at the best price of row c,
arriving ``latency_rows`` later (row a = c + latency), and held ``horizon`` rows
(a + 1 .. a + horizon) or until filled. The same orders go through

* the exact replay (``lobsurf.data.readers.mbo_queue``): their FIFO position from order
  ids, record by record;
* ``BatchedLobEnv`` with passive orders, the simulator users train with, under each queue
  model: a Post at row c, then Hold. The env steps one row at a time (stride 1) so that
  every row's queue and fill can be read; what an order meets row by row does not depend
  on the stride (an order rests through the rows of every step it spans).

``compare`` reduces both to the figures of ``format_table``: orders filled (completely)
within the horizon, rows to the fill and its error order by order, and the error of the
model's queue ahead against the exact one at every row where both still rest.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lobsurf.data.dataset import BookTensors, load_book_tensors
from lobsurf.data.readers.dbn_read import DbnReader
from lobsurf.data.readers.mbo_book import MboBookBuilder
from lobsurf.data.readers.mbo_queue import ASK, BID, QueueReplayStats, replay_queues
from lobsurf.data.store import Store
from lobsurf.data.store.ingest import IngestConfig, ingest
from lobsurf.errors import UserError
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv

#: the queue models compared by default: (queue_model, queue_power; risk_averse has none)
DEFAULT_MODELS: tuple[tuple[str, int], ...] = (("risk_averse", 1),) + tuple(
    ("probabilistic", n) for n in (1, 2, 3, 5, 10))


@dataclass(frozen=True)
class CheckSetup:
    """How the orders of the check are placed (module docstring)."""

    horizon: int = 500
    """rows an order rests after it arrives, unless filled"""
    stride: int = 10
    """rows between decision rows (``sim.stride``)"""
    latency_rows: int = 1
    """rows from a decision to its order's arrival (``sim.latency_rows``)"""
    lots: int = 1
    """lots of each order"""

    def __post_init__(self) -> None:
        for name in ("horizon", "stride", "lots"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1, got "
                                f"{getattr(self, name)}")
        if self.latency_rows < 0:
            raise UserError(f"--latency-rows must be >= 0, got {self.latency_rows}")


@dataclass
class Traces:
    """Every order's path, [n, horizon + 1] (column k: row a + k): ``queue`` lots ahead
    (-1: no longer resting), ``filled`` cumulative lots; ``refused`` [n] post-only refusals."""

    queue: np.ndarray
    filled: np.ndarray
    refused: np.ndarray


@dataclass
class Orders:
    """The check's orders: decision row, side (BID / ASK), fixed-point price, lots."""

    row: np.ndarray
    side: np.ndarray
    price: np.ndarray
    lots: int


def book_records(path: str | os.PathLike) -> np.ndarray:
    """All MBO records of the book ``lobsurf ingest`` keeps from ``path``: the first
    instrument seen, from the first publisher seen with it."""
    with DbnReader(path) as reader:
        if reader.header.schema != "mbo":
            raise UserError(f"{path}: schema {reader.header.schema!r}; the exact queue needs "
                            "order ids (an mbo file)")
        records = np.concatenate(list(reader.chunks(1 << 20)) or
                                 [np.zeros(0, reader.header.record_dtype)])
    if not len(records):
        raise UserError(f"{path}: no records")
    mine = records["instrument_id"] == records["instrument_id"][0]
    mine &= records["publisher_id"] == records["publisher_id"][mine][0]
    return records[mine]


def store_sources(records: np.ndarray, store: Store) -> np.ndarray:
    """[rows] the position in ``records`` of the record that emitted each store row.

    The store's rows are a subsequence of the snapshots the MBO book emits (validation
    skips some); each is matched in order by its capture time and both sides' levels."""
    fed = MboBookBuilder().feed_detailed(records)

    def keys(chunk) -> list[bytes]:
        table = np.concatenate([chunk.ts_recv_ns[:, None].astype(np.int64)]
                               + [getattr(chunk, f).astype(np.int64)
                                  for f in ("bid_px", "bid_sz", "ask_px", "ask_sz")], 1)
        return [row.tobytes() for row in table]

    emitted, wanted = keys(fed.chunk), keys(store.rows(0, len(store)))
    out = np.empty(len(wanted), np.int64)
    j = 0
    for r, key in enumerate(wanted):
        while j < len(emitted) and emitted[j] != key:
            j += 1
        if j == len(emitted):
            raise UserError(f"store row {r} is not a snapshot of this file's book")
        out[r] = fed.source[j]
        j += 1
    return out


def check_orders(store: Store, book: BookTensors, setup: CheckSetup) -> Orders:
    """One order a side at every ``stride``-th row of each segment whose order can rest
    the whole horizon inside the segment (the env's episode never ends under it)."""
    rows = []
    for start, stop in zip(book.segment_start.tolist(), book.segment_stop.tolist()):
        last = stop - setup.latency_rows - setup.horizon - 2
        rows.append(np.arange(start, max(start, last + 1), setup.stride))
    row = np.repeat(np.concatenate(rows), 2)
    side = np.tile([BID, ASK], len(row) // 2)
    best = np.stack((store.columns["bid_px"][:, 0], store.columns["ask_px"][:, 0]), 1)
    return Orders(row, side, best[row, side].astype(np.int64), setup.lots)


def exact_traces(records: np.ndarray, sources: np.ndarray, orders: Orders,
                 setup: CheckSetup) -> tuple[Traces, QueueReplayStats, np.ndarray]:
    """The exact replay of ``orders``; also each order's level size at every row."""
    out = replay_queues(records, sources, orders.side, orders.price,
                        np.full(len(orders.row), orders.lots),
                        orders.row + setup.latency_rows, setup.horizon)
    if out.cleared.any():
        raise UserError(f"a book clear (R) came while {int(out.cleared.sum())} orders "
                        "rested: the check needs one live session")
    return Traces(out.queue, out.filled, out.refused), out.stats, out.level


def simulated_traces(book: BookTensors, orders: Orders, setup: CheckSetup, model: str,
                     power: int) -> Traces:
    """The orders in ``BatchedLobEnv`` under one queue model: Post at row c, then Hold."""
    cfg = SimConfig(window=1, stride=1, latency_rows=setup.latency_rows,
                    order_sizes_lots=(orders.lots,), position_limit_lots=orders.lots,
                    max_episode_steps=setup.horizon + 8, passive_orders=True,
                    queue_model=model, queue_power=power, fee_per_lot=0.0, fee_bps=0.0,
                    maker_fee_per_lot=0.0, maker_fee_bps=0.0)
    n = len(orders.row)
    env = BatchedLobEnv(book, n, cfg)
    env.reset()
    env.state.cursor.copy_(torch.as_tensor(orders.row))
    env.state.stop.copy_(book.segment_stop[book.segment_of_row[torch.as_tensor(orders.row)]])
    names = cfg.action_names
    post = torch.tensor([names.index(f"post bid {orders.lots}"),
                         names.index(f"post ask {orders.lots}")])[torch.as_tensor(orders.side)]
    hold = torch.zeros(n, dtype=torch.int64)
    mine = torch.as_tensor(orders.side)[:, None]
    queue = np.empty((n, setup.horizon + 1))
    remaining = np.empty((n, setup.horizon + 1), np.int64)
    for k in range(setup.horizon + 1):
        env.step(post if k == 0 else hold)
        ps = env.passive_state
        queue[:, k] = ps.queue_ahead.gather(1, mine)[:, 0].numpy()
        remaining[:, k] = ps.remaining.gather(1, mine)[:, 0].numpy()
        if k == 0:
            refused = env.passive_stats.rejected_posts.numpy() > 0
    queue[remaining == 0] = -1
    filled = np.where(refused[:, None], 0, orders.lots - remaining)
    return Traces(queue, filled, refused)


@dataclass
class Row:
    """One line of the table: a model (or the exact replay) against the exact replay."""

    name: str
    filled: int
    fill_rate: float
    vs_exact: float
    both: int
    only_model: int
    only_exact: int
    time_median: float
    time_mean: float
    time_bias: float
    time_mae: float
    mae_lots: float
    mae_share: float
    bias_lots: float


def fill_columns(t: Traces, lots: int) -> np.ndarray:
    """[n] the column at which each order was filled completely (-1: not in the horizon)."""
    done = t.filled >= lots
    return np.where(done.any(1), done.argmax(1), -1)


def compare(name: str, model: Traces, exact: Traces, level: np.ndarray, lots: int) -> Row:
    """The figures of one model against the exact replay, over the orders posted in both."""
    posted = ~model.refused & ~exact.refused
    m_col, e_col = fill_columns(model, lots)[posted], fill_columns(exact, lots)[posted]
    m_fill, e_fill = m_col >= 0, e_col >= 0
    both = m_fill & e_fill
    resting = (model.queue >= 0) & (exact.queue >= 0)
    resting[:, 0] = False  # column 0: both join behind the same lots
    resting &= posted[:, None]
    diff = model.queue[resting] - exact.queue[resting]
    late = m_col[both] - e_col[both]  # rows the model fills after the exact replay
    seen = resting & (level > 0)
    share = np.abs(model.queue[seen] - exact.queue[seen]) / level[seen]

    def stat(f, x: np.ndarray) -> float:
        return float(f(x)) if len(x) else float("nan")

    return Row(name=name, filled=int(m_fill.sum()), fill_rate=stat(np.mean, m_fill),
               vs_exact=m_fill.sum() / max(int(e_fill.sum()), 1), both=int(both.sum()),
               only_model=int((m_fill & ~e_fill).sum()),
               only_exact=int((e_fill & ~m_fill).sum()),
               time_median=stat(np.median, m_col[m_fill]),
               time_mean=stat(np.mean, m_col[m_fill]),
               time_bias=stat(np.mean, late), time_mae=stat(np.mean, np.abs(late)),
               mae_lots=stat(np.mean, np.abs(diff)), mae_share=stat(np.mean, share),
               bias_lots=stat(np.mean, diff))


@dataclass
class CheckResult:
    """The table's rows with what they were measured on."""

    setup: CheckSetup
    rows: list[Row]
    orders: int
    posted: int
    refusals_differ: int
    replay: QueueReplayStats
    store_rows: int


def run_check(path: str | os.PathLike, setup: CheckSetup,
              models: tuple[tuple[str, int], ...] = DEFAULT_MODELS,
              progress=None) -> CheckResult:
    """Ingest ``path`` (an MBO DBN file) to a temporary store and compare (module docstring)."""
    say = progress or (lambda text: None)
    records = book_records(path)
    with tempfile.TemporaryDirectory() as folder:
        ingest([path], Path(folder) / "store", IngestConfig())
        store = Store.open(Path(folder) / "store")
        book = load_book_tensors(store)
        sources = store_sources(records, store)
        orders = check_orders(store, book, setup)
        if not len(orders.row):
            raise UserError(f"{path}: no segment is longer than the horizon "
                            f"({setup.horizon} rows) plus latency")
        say(f"exact replay of {len(records):,} records, {len(orders.row):,} orders")
        exact, replay, level = exact_traces(records, sources, orders, setup)
        rows, refusals_differ = [], 0
        for model, power in models:
            name = model if model == "risk_averse" else f"{model} n={power}"
            say(f"simulator, {name}")
            sim = simulated_traces(book, orders, setup, model, power)
            refusals_differ = max(refusals_differ, int((sim.refused != exact.refused).sum()))
            rows.append(compare(name, sim, exact, level, setup.lots))
        store_rows = len(store)
        del store, book  # the memory maps go before the folder does
    posted = int((~exact.refused).sum())
    rows.insert(0, compare("exact (MBO order ids)", exact, exact, level, setup.lots))
    return CheckResult(setup, rows, len(orders.row), posted, refusals_differ, replay,
                       store_rows)


def format_table(result: CheckResult) -> str:
    """The result as a Markdown table with a line on what it covers."""
    s = result.setup
    replay = result.replay
    kinds = {"prints at its price past the queue ahead (the queue model decides these)":
             replay.lots_at_price, "prints through its price": replay.lots_through,
             "the other side coming to its price": replay.lots_crossed}
    total = max(sum(kinds.values()), 1)
    shares = ", ".join(f"{lots / total:.1%} by {what}" for what, lots in kinds.items())
    head = (f"{result.orders:,} orders ({result.posted:,} posted, the rest refused post-only; "
            f"refusals differing from the exact replay: {result.refusals_differ}) of "
            f"{s.lots} lot(s), one a side every {s.stride} rows of {result.store_rows:,}, "
            f"latency {s.latency_rows} row(s), held {s.horizon} rows. Time: rows from "
            "arrival to the fill over the orders the row filled; time error: the model's "
            "minus the exact one's, over the orders both filled; queue error: the model's "
            "queue ahead minus the exact one, every row where both rest (share: of the "
            "level's lots)."
            f"\nExact replay's filled lots: {shares}.\nreplay: {replay.as_dict()}\n")
    lines = ["| model | filled | fill rate | fills / exact | both | model only | exact only "
             "| time median | time mean | time bias | time MAE | queue MAE lots "
             "| MAE share | bias lots |", "|" + "---|" * 14]
    for r in result.rows:
        lines.append(
            f"| {r.name} | {r.filled:,} | {r.fill_rate:.3f} | {r.vs_exact:.3f} | {r.both:,} "
            f"| {r.only_model:,} | {r.only_exact:,} | {r.time_median:.0f} | {r.time_mean:.1f} "
            f"| {r.time_bias:+.2f} | {r.time_mae:.2f} | {r.mae_lots:.2f} "
            f"| {r.mae_share:.3f} | {r.bias_lots:+.2f} |")
    return head + "\n".join(lines)
