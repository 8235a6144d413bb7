"""``baseline:passive_imbalance``: join the side the top-of-book imbalance favours with a
resting order instead of crossing the spread; threshold fitted on training rows.

Needs passive orders (``sim.passive_orders``). With I = (bid_sz0 - ask_sz0) /
(bid_sz0 + ask_sz0) at the row the policy sees, the signal is up where I > threshold,
down where I < -threshold, none between. Flat, it joins the favoured side: a bid of
``order_sizes_lots[size_index]`` lots at the best bid on an up signal, an ask on a down
signal, and cancels it when the signal goes away. Holding a position, it exits:

* **passively**, by quoting the other side at the touch (an ask of the position's lots
  when long), for as long as the signal does not turn against the position;
* **at market** (the largest order size <= |position|) once the signal points against the
  position: the move the imbalance predicts would run through the resting exit.

Each step, per env, the first rule that applies gives the action (one action a step):

1. exit at market (above);
2. cancel a resting order that is no longer wanted (an entry whose signal went away, or
   any order on the side the position does not exit by) or no longer at the best price
   of the row the policy sees (it is re-posted at the new best price on the next step);
   the bid first;
3. post the wanted order where none rests;
4. Hold.

Fit (``fit_passive_imbalance``): the candidates are ``BaselineConfig.imbalance_quantiles``
of |I| over the training rows; each trades a contiguous sample of the training rows
(``passive_fit_rows``) in one sweep with the evaluation's simulator; the highest net PnL
wins, and the threshold 1 (never joins) where none makes money. Held-out rows are never
read.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lobsurf.baselines.config import BaselineConfig
from lobsurf.baselines.fitting import contiguous_sample, training_net_pnl
from lobsurf.baselines.imbalance import NEVER_TRADES, abs_imbalance_quantiles, top_imbalance
from lobsurf.baselines.quotes import PassiveActions, first_rule, flatten_actions, quotes
from lobsurf.data.dataset import BookTensors
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv


def post_actions(cfg: SimConfig, first: int, device: torch.device) -> torch.Tensor:
    """[L + 1] int64: entry k is the post of the largest order size <= k lots on the side
    whose posts start at action ``first`` (Hold for k smaller than every size), L the
    position limit."""
    sizes = cfg.order_sizes_lots
    table = torch.zeros(cfg.position_limit_lots + 1, dtype=torch.int64)
    for k in range(1, cfg.position_limit_lots + 1):  # setup time: at most L + 1 entries
        fits = [i for i, s in enumerate(sizes) if s <= k]
        if fits:
            table[k] = first + max(fits, key=lambda i: sizes[i])
    return table.to(device)


class PassiveImbalancePolicy:
    """Joins the side the imbalance favours, exits passively or at market (module doc)."""

    def __init__(self, threshold: float, cfg: BaselineConfig, env: BatchedLobEnv) -> None:
        self.threshold = threshold
        self.actions = PassiveActions.of(env.cfg, cfg.size_index, "passive_imbalance")
        self.flatten = flatten_actions(env)
        n = len(env.cfg.order_sizes_lots)
        self.exit_bid = post_actions(env.cfg, 1 + 2 * n, env.device)
        self.exit_ask = post_actions(env.cfg, 1 + 3 * n, env.device)
        self.limit = env.cfg.position_limit_lots

    def act(self, env: BatchedLobEnv) -> torch.Tensor:
        a, position = self.actions, env.state.position
        imb = top_imbalance(env.book, env.state.cursor)
        up, down = imb > self.threshold, imb < -self.threshold
        flat, long, short = position == 0, position > 0, position < 0
        q = quotes(env)
        want_bid = (flat & up) | short
        want_ask = (flat & down) | long
        size = position.abs().clamp(max=self.limit)
        return first_rule([
            ((long & down) | (short & up), self.flatten[position + self.limit]),
            (q.bid & ~(want_bid & q.bid_at_touch), a.cancel_bid),
            (q.ask & ~(want_ask & q.ask_at_touch), a.cancel_ask),
            (want_bid & ~q.bid, torch.where(flat, a.post_bid, self.exit_bid[size])),
            (want_ask & ~q.ask, torch.where(flat, a.post_ask, self.exit_ask[size])),
        ], position)


@dataclass
class PassiveImbalanceFit:
    """Attributes:
    threshold: the chosen |I| threshold (NEVER_TRADES where no candidate made money).
    candidates: (threshold, training net PnL in currency) of every candidate.
    fit_rows: training rows the candidates were swept over.
    """

    threshold: float
    candidates: list[tuple[float, float]]
    fit_rows: int


def fit_passive_imbalance(book: BookTensors, train_rows: torch.Tensor, sim: SimConfig,
                          cfg: BaselineConfig = BaselineConfig()) -> PassiveImbalanceFit:
    """The candidate threshold with the best training net PnL in the simulator (module doc).

    Args:
        book: the device dataset.
        train_rows: [n] int64 sorted training end rows; no other row is read.
        sim: the evaluation's simulator settings (passive orders on).
        cfg: quantiles, sample size and envs of the fit.
    """
    rows = contiguous_sample(train_rows, cfg.passive_fit_rows, cfg.imbalance_fit_blocks)
    candidates = abs_imbalance_quantiles(book, rows, cfg.imbalance_quantiles)
    template = BatchedLobEnv(book, 1, sim)
    pnl = training_net_pnl(book, rows, [PassiveImbalancePolicy(thr, cfg, template)
                                        for thr in candidates], sim, cfg.imbalance_fit_envs)
    scored = list(zip(candidates, pnl))
    best, best_pnl = max(scored, key=lambda c: c[1])
    return PassiveImbalanceFit(threshold=best if best_pnl > 0 else NEVER_TRADES,
                               candidates=scored, fit_rows=len(rows))


def make_passive_imbalance(env: BatchedLobEnv, cfg: BaselineConfig,
                           train_rows: torch.Tensor | None) -> PassiveImbalancePolicy:
    """The rule with ``cfg.passive_imbalance_threshold``, or one fitted on ``train_rows``."""
    PassiveActions.of(env.cfg, cfg.size_index, "passive_imbalance")  # refuses before a fit
    threshold = cfg.passive_imbalance_threshold
    if threshold is None:
        if train_rows is None:
            raise ValueError("the passive_imbalance baseline needs training rows to fit its "
                             "threshold (or a fixed threshold)")
        threshold = fit_passive_imbalance(env.book, train_rows, env.cfg, cfg).threshold
    return PassiveImbalancePolicy(threshold, cfg, env)
