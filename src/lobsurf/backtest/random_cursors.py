"""Random-cursor backtest: a policy drives B envs for a fixed number of steps, then the totals.

(``lobsurf.backtest.sweep`` is the deterministic held-out evaluation; this runner is the quick
check on random cursors behind ``lobsurf eval --split random``.)

Cursors are drawn by the simulator's seeded generator over all the store's segments, so a
run is reproducible from (store, SimConfig, policy seed). On the last step every env's
position is closed at market, so every trade is counted and PnL is fully realized.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from lobsurf.backtest.policy import Policy
from lobsurf.data.dataset import BookTensors
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv
from lobsurf.sim.stats import summarize


@dataclass(frozen=True)
class BacktestConfig:
    """How long a backtest runs."""

    num_envs: int = 64
    """B: parallel environments."""
    steps: int = 2000
    """steps per environment (the last one closes every position)."""

    def __post_init__(self) -> None:
        if self.num_envs < 1 or self.steps < 1:
            raise ValueError("num_envs and steps must be >= 1")


def make_env(book: BookTensors, sim: SimConfig, run: BacktestConfig) -> BatchedLobEnv:
    env = BatchedLobEnv(book, run.num_envs, sim)
    env.reset()
    return env


def run_backtest(env: BatchedLobEnv, policy: Policy, run: BacktestConfig,
                 progress: Callable[[int], None] | None = None) -> dict[str, float | int]:
    """Run ``policy`` on ``env`` (freshly reset) and return ``lobsurf.sim.stats.summarize``.

    ``progress`` is called with 1 after every step (host only, no device read).
    """
    env.reset_stats()
    close_all = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
    for t in range(run.steps):
        env.step(policy.act(env), force_end=close_all if t == run.steps - 1 else None)
        if progress is not None:
            progress(1)
    summary = summarize(env.stats, env.tick_value)
    summary["envs"] = run.num_envs
    return summary
