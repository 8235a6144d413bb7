"""The top-of-book imbalance baseline and the fit of its threshold on training rows.

Signal: I = (bid_sz0 - ask_sz0) / (bid_sz0 + ask_sz0) ∈ (-1, 1) at the decision row, the
classic queue-imbalance predictor of the next mid move. Rule: target a long position of
``order_sizes_lots[size_index]`` lots when I > +threshold, the same short when
I < -threshold, and keep the position otherwise (Hold).

Fit: the candidates are quantiles (``BaselineConfig.imbalance_quantiles``) of |I| over the
training rows; each candidate trades a contiguous sample of the training rows in one
deterministic sweep (``lobsurf.backtest.sweep``) with the simulator's own costs, and the one
with the highest net PnL wins. When none makes money the threshold is 1, which never
trades (|I| < 1 always): on training data the honest choice is then to stay out.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lobsurf.baselines.actions import buy_sell_actions
from lobsurf.baselines.config import BaselineConfig
from lobsurf.data.dataset import BookTensors
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv

#: the threshold that never trades: |I| < 1 on every two-sided book.
NEVER_TRADES = 1.0


def top_imbalance(book: BookTensors, rows: torch.Tensor) -> torch.Tensor:
    """[N] float64 (bid_sz0 - ask_sz0) / (bid_sz0 + ask_sz0) at each row ([N] int64)."""
    b = book.bid_sz[rows, 0].double()
    a = book.ask_sz[rows, 0].double()
    return (b - a) / (b + a).clamp(min=1)  # level 0 is always real; clamp guards a 0/0


def order_actions(sizes: tuple[int, ...], max_order: int, device: torch.device) -> torch.Tensor:
    """[2*max_order + 1] int64: entry max_order + k is the action for a signed order of k lots.

    The largest order size <= |k| (a Buy for k > 0, a Sell for k < 0); Hold for k = 0 and
    for orders smaller than every size.
    """
    n = len(sizes)
    table = torch.zeros(2 * max_order + 1, dtype=torch.int64)
    for k in range(1, max_order + 1):  # setup time: a table of at most 2*max_order entries
        fits = [i for i, s in enumerate(sizes) if s <= k]
        if fits:
            best = max(fits, key=lambda i: sizes[i])
            table[max_order + k] = 1 + best
            table[max_order - k] = 1 + n + best
    return table.to(device)


class ImbalancePolicy:
    """Target +lots when I > threshold, -lots when I < -threshold, else keep the position."""

    def __init__(self, threshold: float, cfg: BaselineConfig, env: BatchedLobEnv) -> None:
        buy_sell_actions(env, cfg.size_index)  # checks the size index
        self.threshold = threshold
        self.lots = env.cfg.order_sizes_lots[cfg.size_index]
        self.limit = env.cfg.position_limit_lots
        # orders of up to 2*limit lots (a full reversal) map to the largest fitting size
        self.actions = order_actions(env.cfg.order_sizes_lots, 2 * self.limit, env.device)

    def act(self, env: BatchedLobEnv) -> torch.Tensor:
        imb = top_imbalance(env.book, env.state.cursor)
        direction = (imb > self.threshold).long() - (imb < -self.threshold).long()
        position = env.state.position
        target = torch.where(direction != 0, direction * self.lots, position)
        order = (target - position).clamp(-2 * self.limit, 2 * self.limit)
        return self.actions[order + 2 * self.limit]


@dataclass
class ImbalanceFit:
    """Attributes:
    threshold: the chosen |I| threshold (NEVER_TRADES when no candidate made money).
    candidates: (threshold, training net PnL in currency) of every candidate.
    fit_rows: training rows the candidates were swept over.
    """

    threshold: float
    candidates: list[tuple[float, float]]
    fit_rows: int


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


def fit_imbalance_threshold(book: BookTensors, train_rows: torch.Tensor, sim: SimConfig,
                            cfg: BaselineConfig = BaselineConfig()) -> ImbalanceFit:
    """The candidate threshold with the best training net PnL in the simulator (module doc).

    Args:
        book: the device dataset.
        train_rows: [n] int64 sorted training end rows (e.g. ``time_split(...).train_rows``).
        sim: simulator settings of the evaluation (costs, latency, sizes).
        cfg: quantiles, sample size and envs of the fit.
    """
    from lobsurf.backtest.sweep import SweepConfig, sweep

    rows = contiguous_sample(train_rows, cfg.imbalance_fit_rows, cfg.imbalance_fit_blocks)
    q = torch.tensor(cfg.imbalance_quantiles, dtype=torch.float64, device=book.device)
    levels = torch.quantile(top_imbalance(book, rows).abs(), q).tolist()  # setup-time read
    candidates = sorted(set(levels))
    template = BatchedLobEnv(book, 1, sim)
    policies = {str(i): ImbalancePolicy(thr, cfg, template) for i, thr in enumerate(candidates)}
    records, _ = sweep(book, rows, policies, sim, SweepConfig(num_envs=cfg.imbalance_fit_envs))
    scored = [(thr, float(records[str(i)].trade_pnl.sum())) for i, thr in enumerate(candidates)]
    best_thr, best_pnl = max(scored, key=lambda c: c[1])
    return ImbalanceFit(threshold=best_thr if best_pnl > 0 else NEVER_TRADES,
                        candidates=scored, fit_rows=len(rows))


def make_imbalance(env: BatchedLobEnv, cfg: BaselineConfig,
                   train_rows: torch.Tensor | None) -> ImbalancePolicy:
    """The imbalance policy with ``cfg.imbalance_threshold``, or one fitted on ``train_rows``."""
    threshold = cfg.imbalance_threshold
    if threshold is None:
        if train_rows is None:
            raise ValueError("the imbalance baseline needs training rows to fit its threshold "
                             "(or a fixed threshold)")
        threshold = fit_imbalance_threshold(env.book, train_rows, env.cfg, cfg).threshold
    return ImbalancePolicy(threshold, cfg, env)
