"""Deterministic sweep: every held-out row traded through exactly once by every policy.

The held-out end rows (e.g. ``lobsurf.data.split.time_split(...).test_rows``, in time
order) are cut into contiguous runs (a gap in the held-out set or a segment change starts a
new run); with a decision stride k (``SimConfig.stride``) every k-th row of each run, from
its first, is a decision row, and the k - 1 rows after it are traded through by holding,
so every held-out snapshot lies in exactly one step. The decision rows are laid end to end
and cut into B equal pieces, one per environment: env j walks decisions[j*T : (j+1)*T], one
per step (T = ceil(R / B)); no random cursors. Where the next decision row of a piece is
not in the same run (or not ``stride`` rows on) and at the end of each piece, the step is
the episode's last (the position is closed at market), so each env's cursor can jump to
the next run. Envs whose piece is
shorter hold at a parked row for the remaining steps and are masked out of the records.

Every policy runs in the same loop on its own ``BatchedLobEnv`` over identical pieces, so
the policies see exactly the same rows; two sweeps give identical numbers. A policy with
memory (a recurrent agent) sees the start of a new run as ``env.state.episode_steps == 0``.

Recording stays on the device: each step writes [B] slices of preallocated [T, B] buffers
(no host sync per step); ``sweep`` reads them back once at the end and returns one
``BacktestRecord`` per policy (``lobsurf.backtest.metrics`` turns it into the summary).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from lobsurf.backtest.metrics import NS_PER_DAY, BacktestRecord
from lobsurf.backtest.policy import Policy
from lobsurf.data.dataset import BookTensors
from lobsurf.data.store.instrument import AROUND_THE_CLOCK
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv


@dataclass(frozen=True)
class SweepConfig:
    """How the held-out rows are spread over environments."""

    num_envs: int = 64
    """B: environments per policy; each walks one contiguous piece of the held-out rows."""

    def __post_init__(self) -> None:
        if self.num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {self.num_envs}")


@dataclass
class Tiling:
    """The rows of a sweep and how they are cut among the environments.

    Attributes:
        rows: [R] int64 decision rows in time order (each is one step of one env).
        continues: [R] bool the next decision row follows this one ``stride`` rows on in
            the same contiguous run (False: this step ends the episode).
        steps: T, steps of the sweep (the longest piece).
        num_envs: B.
        dropped: held-out rows left out because their fill row (row + latency_rows) lies
            past their segment's end (no order placed there could fill).
        stride: rows per step (SimConfig.stride).
        swept_rows: held-out rows traded through (kept rows; each in exactly one step).
    """

    rows: torch.Tensor
    continues: torch.Tensor
    steps: int
    num_envs: int
    dropped: int
    stride: int = 1
    swept_rows: int = 0

    @property
    def ranges(self) -> int:
        """Contiguous runs of decision rows in ``rows`` (host read; setup time)."""
        if len(self.rows) == 0:
            return 0
        return int((~self.continues[:-1]).sum()) + 1

    def flat_index(self, t: int) -> torch.Tensor:
        """[B] int64 index into ``rows`` of each env's step t (may be >= R: inactive)."""
        base = torch.arange(self.num_envs, device=self.rows.device) * self.steps
        return base + t


def tile_rows(book: BookTensors, rows: torch.Tensor, sim: SimConfig, num_envs: int) -> Tiling:
    """Keep the rows an env can trade at and cut them into ``num_envs`` pieces.

    Args:
        book: the device dataset.
        rows: [R0] int64 end rows (sorted ascending), e.g. a time split's test_rows; each
            must have ``sim.window - 1`` rows of its segment before it.
        sim: simulator settings; ``sim.stride`` rows per step.
        num_envs: B.

    Raises:
        ValueError: rows are unsorted, lack their window, or none remain.
    """
    rows = rows.to(book.device, torch.int64)
    if len(rows) and bool((rows.diff() <= 0).any()):  # setup-time host read
        raise ValueError("sweep rows must be strictly increasing")
    seg = book.segment_of_row[rows]
    if bool((rows - (sim.window - 1) < book.segment_start[seg]).any()):
        raise ValueError(f"sweep rows need {sim.window - 1} rows of their segment before them "
                         "(the observation window)")
    tradeable = rows + sim.latency_rows < book.segment_stop[seg]
    kept = rows[tradeable]
    if len(kept) == 0:
        raise ValueError("no row to sweep: every row's fill row lies past its segment's end")
    decisions, continues = _decision_rows(kept, book.segment_of_row[kept], sim.stride)
    steps = -(-len(decisions) // num_envs)  # ceil
    return Tiling(rows=decisions, continues=continues, steps=steps, num_envs=num_envs,
                  dropped=len(rows) - len(kept), stride=sim.stride, swept_rows=len(kept))


def _decision_rows(rows: torch.Tensor, segment: torch.Tensor, stride: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Every ``stride``-th row of each contiguous run of ``rows`` (from the run's first) and
    whether each one's successor is ``stride`` rows on in the same run."""
    n = len(rows)
    index = torch.arange(n, device=rows.device)
    starts = torch.ones(n, dtype=torch.bool, device=rows.device)
    starts[1:] = (rows.diff() != 1) | (segment.diff() != 0)
    run_start = torch.cummax(torch.where(starts, index, 0), 0).values
    keep = (index - run_start) % stride == 0
    decisions, run = rows[keep], run_start[keep]
    continues = torch.zeros(len(decisions), dtype=torch.bool, device=rows.device)
    continues[:-1] = (run[1:] == run[:-1]) & (decisions[1:] == decisions[:-1] + stride)
    return decisions, continues


@dataclass
class _Buffers:
    """One policy's per-step records, each [T, B] on the device."""

    step_pnl: torch.Tensor
    reward: torch.Tensor
    closed: torch.Tensor
    holding: torch.Tensor
    hold: torch.Tensor
    action: torch.Tensor
    position: torch.Tensor
    filled: torch.Tensor

    @staticmethod
    def empty(steps: int, num_envs: int, device: torch.device) -> _Buffers:
        def e(dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(steps, num_envs, dtype=dtype, device=device)

        return _Buffers(step_pnl=e(torch.float64), reward=e(torch.float64), closed=e(torch.bool),
                        holding=e(torch.int64), hold=e(torch.bool), action=e(torch.int64),
                        position=e(torch.int64), filled=e(torch.int64))


def schedule(tiling: Tiling, book: BookTensors, t: int
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Step t of every env → (active [B] bool, cursor [B], stop [B], force_end [B] bool).

    Public so a planner (``lobsurf.baselines.optimal``) can follow the sweep's exact steps.
    """
    r = len(tiling.rows)
    f = tiling.flat_index(t)
    active = f < r
    cursor = tiling.rows[f.clamp(max=r - 1)]
    nxt = f + 1
    # the piece continues only to the next decision row of the same run, inside this piece
    continues = (nxt < r) & (t + 1 < tiling.steps)
    continues &= tiling.continues[f.clamp(max=r - 1)]
    stop = book.segment_stop[book.segment_of_row[cursor]]
    return active, cursor, stop, ~continues


def _step(env: BatchedLobEnv, policy: Policy, buf: _Buffers, t: int, active: torch.Tensor,
          force_end: torch.Tensor) -> None:
    s = env.state
    marked_before = s.unrealized_pnl.clone()
    in_trade_before = s.time_in_trade.clone()
    action = policy.act(env)
    buf.hold[t] = action == 0
    buf.action[t] = action
    action = torch.where(active, action, 0)  # parked envs never trade
    res = env.step(action, force_end=force_end)
    # equity change: the realized reward plus the change of the open trade's mark
    buf.step_pnl[t] = res.reward + s.unrealized_pnl - marked_before
    buf.reward[t] = res.reward
    buf.closed[t] = res.trade_closed
    buf.holding[t] = torch.where(res.trade_closed, in_trade_before, 0)
    buf.position[t] = s.position
    buf.filled[t] = res.filled_lots


def _record(env: BatchedLobEnv, buf: _Buffers, tiling: Tiling, days: torch.Tensor,
            around_the_clock: bool) -> BacktestRecord:
    # [T, B] → env-major [B*T]: env j's piece is rows[j*T:(j+1)*T], so this is time order.
    r = len(tiling.rows)

    def flat(x: torch.Tensor) -> torch.Tensor:
        return x.t().reshape(-1)[:r]

    closed = flat(buf.closed)
    stats = env.stats
    return BacktestRecord(
        trade_pnl=flat(buf.reward)[closed].cpu().numpy(),
        trade_holding_steps=flat(buf.holding)[closed].cpu().numpy(),
        step_pnl=flat(buf.step_pnl).cpu().numpy(),
        step_day=days,
        step_hold=flat(buf.hold).cpu().numpy(),
        step_action=flat(buf.action).cpu().numpy(),
        step_position=flat(buf.position).cpu().numpy(),
        step_filled_lots=flat(buf.filled).cpu().numpy(),
        trade_step=torch.nonzero(closed).squeeze(1).cpu().numpy(),
        gross_pnl=float(stats.gross_pnl_ticks.sum()) * env.tick_value,
        fees=float(stats.fees.sum()),
        turnover_lots=int(stats.turnover_lots.sum()),
        unfilled_lots=int(stats.unfilled_lots.sum()),
        around_the_clock=around_the_clock,
    )


def sweep(book: BookTensors, rows: torch.Tensor, policies: dict[str, Policy], sim: SimConfig,
          cfg: SweepConfig = SweepConfig(),
          progress: Callable[[int], None] | None = None) -> tuple[dict[str, BacktestRecord], Tiling]:
    """Run every policy once over ``rows`` (see the module docstring).

    Args:
        book: the device dataset.
        rows: [R0] int64 sorted decision rows (e.g. held-out end rows).
        policies: name → Policy (``act(env) -> [B] int64``); each gets its own env.
        sim: simulator settings (``stride`` rows per step); ``sim.seed`` does not matter (no
            random cursors).
        cfg: number of environments.
        progress: called with 1 after every step (host only, no device read).

    Returns:
        (name → BacktestRecord, the Tiling used).
    """
    tiling = tile_rows(book, rows, sim, cfg.num_envs)
    envs = {name: BatchedLobEnv(book, cfg.num_envs, sim) for name in policies}
    bufs = {name: _Buffers.empty(tiling.steps, cfg.num_envs, book.device) for name in policies}
    for env in envs.values():
        env.reset()
        env.reset_stats()
    for t in range(tiling.steps):
        active, cursor, stop, force_end = schedule(tiling, book, t)
        for name, policy in policies.items():
            env = envs[name]
            env.state.cursor.copy_(cursor)  # same row as the env's own advance, or a jump
            env.state.stop.copy_(stop)
            _step(env, policy, bufs[name], t, active, force_end)
        if progress is not None:
            progress(1)
    days = (book.ts_ns[tiling.rows] // NS_PER_DAY).cpu().numpy()
    all_days = book.market_hours == AROUND_THE_CLOCK
    records = {name: _record(envs[name], bufs[name], tiling, days, all_days) for name in policies}
    return records, tiling
