"""How the fitted baselines choose their parameters: a small grid of candidates, each
traded through a sample of the training rows in one deterministic sweep with the
evaluation's own simulator, the highest net PnL winning. Never a held-out row: the caller
gives the training rows, and the sample is drawn from them alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lobsurf.data.dataset import BookTensors
from lobsurf.backtest.policy import Policy
from lobsurf.sim.config import SimConfig


def contiguous_sample(rows: torch.Tensor, limit: int, blocks: int) -> torch.Tensor:
    """At most ``limit`` of ``rows`` ([n] int64, sorted): the first limit/blocks of each of
    ``blocks`` equal parts, so the sample keeps runs of consecutive rows (a policy holds
    positions across rows) and still spans the whole range."""
    if len(rows) <= limit:
        return rows
    part = len(rows) // blocks
    take = min(part, limit // blocks)
    starts = torch.arange(blocks, device=rows.device) * part
    index = (starts[:, None] + torch.arange(take, device=rows.device)).reshape(-1)
    return rows[index]


def training_net_pnl(book: BookTensors, rows: torch.Tensor, candidates: Sequence[Policy],
                     sim: SimConfig, num_envs: int) -> list[float]:
    """Net PnL (currency) of each candidate policy over one sweep of ``rows`` (training
    rows only) under ``sim``, in the candidates' order."""
    from lobsurf.backtest.sweep import SweepConfig, sweep

    policies = {str(i): policy for i, policy in enumerate(candidates)}
    records, _ = sweep(book, rows, policies, sim, SweepConfig(num_envs=num_envs))
    return [float(records[str(i)].trade_pnl.sum()) for i in range(len(candidates))]
