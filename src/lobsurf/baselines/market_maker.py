"""``baseline:market_maker``: quote both sides at the touch, pull a quote by inventory and
by top-of-book imbalance, flatten at a stop; parameters fitted on training rows.

Needs passive orders (``sim.passive_orders``). Each step, per env, the first rule that
applies gives the action (one action a step: a bid and an ask are posted on two steps, a
quote is moved by a cancel and a post on the next step):

1. **stop**: holding a position whose open trade has lost at least ``stop_ticks`` ticks
   per lot (``SimState.unrealized_pnl``: marked at the mid, net of the fees paid) ->
   the market order that brings the position towards 0 (the largest size <= |position|);
2. **pull or re-quote**: a resting quote that is not wanted (below) or no longer at the
   best price of the row the policy sees -> cancel it. Where both must go, the bid first
   when the imbalance points down (it is the one about to be hit), else the ask;
3. **quote**: a wanted side that rests nothing -> post the quoted size at its best price.
   Where both are missing, the side that brings the position towards 0 first (flat: the
   bid when I >= 0, else the ask);
4. Hold.

A bid is wanted while position + quoted lots <= ``inventory_limit`` (a long position
beyond the limit is worked off by the ask alone) and I >= -``pull_threshold`` (sellers are
about to push the price through it); an ask while position - quoted lots >= -limit and
I <= ``pull_threshold``. I = (bid_sz0 - ask_sz0) / (bid_sz0 + ask_sz0) at the row the
policy sees. The quoted size is ``order_sizes_lots[size_index]`` (1 lot by default).

Fit (``fit_market_maker``): every combination of ``BaselineConfig.market_maker_inventory_limits``,
the pull thresholds (``market_maker_pull_quantiles`` of |I| on the training rows, and 1:
never pull) and ``market_maker_stops_ticks`` trades a contiguous sample of the training
rows (``passive_fit_rows``) in one sweep with the evaluation's simulator (queue model,
fees, latency, stride); the highest net PnL wins. Where none makes money it does not quote
(``NEVER_QUOTES``): on training data the honest choice is then to stay out. Held-out rows
are never read.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass

import torch

from lobsurf.baselines.config import BaselineConfig
from lobsurf.baselines.fitting import contiguous_sample, training_net_pnl
from lobsurf.baselines.imbalance import NEVER_TRADES, abs_imbalance_quantiles, top_imbalance
from lobsurf.baselines.quotes import PassiveActions, first_rule, flatten_actions, quotes
from lobsurf.data.dataset import BookTensors
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv


@dataclass(frozen=True)
class MarketMakerParams:
    """The market maker's parameters (module docstring)."""

    inventory_limit: int
    """lots: a quote that could take |position| past it is pulled (0: never quotes)."""
    pull_threshold: float
    """|I| beyond which the quote on the side the price moves towards is pulled (1: never)."""
    stop_ticks: float
    """ticks per lot the open trade may lose before it is closed at market (inf: no stop)."""


#: the parameters of a market maker that never quotes (no candidate made money)
NEVER_QUOTES = MarketMakerParams(inventory_limit=0, pull_threshold=NEVER_TRADES,
                                 stop_ticks=math.inf)


class MarketMakerPolicy:
    """Quotes the touch on both sides with ``MarketMakerParams`` (module docstring)."""

    def __init__(self, params: MarketMakerParams, cfg: BaselineConfig, env: BatchedLobEnv,
                 fit: MarketMakerFit | None = None) -> None:
        self.params, self.fit = params, fit
        self.actions = PassiveActions.of(env.cfg, cfg.size_index, "market_maker")
        self.flatten = flatten_actions(env)
        self.limit = env.cfg.position_limit_lots
        tick_value = env.book.tick_size * env.book.multiplier
        self.stop_money = params.stop_ticks * tick_value  # inf: never

    @property
    def fitted(self) -> dict:
        """The parameters, as the evaluation's settings report them, with the fit's best
        training net PnL and its rows (where it was fitted); no stop is None (JSON has no
        infinity)."""
        out = asdict(self.params)
        out["stop_ticks"] = out["stop_ticks"] if math.isfinite(out["stop_ticks"]) else None
        if self.fit is not None:
            out |= {"best_training_net_pnl": max(pnl for _, pnl in self.fit.candidates),
                    "fit_rows": self.fit.fit_rows}
        return out

    def act(self, env: BatchedLobEnv) -> torch.Tensor:
        a, p, s = self.actions, self.params, env.state
        position, lots = s.position, a.lots
        imb = top_imbalance(env.book, s.cursor)
        q = quotes(env)
        stop = (position != 0) & (s.unrealized_pnl <= -self.stop_money * position.abs())
        want_bid = (position + lots <= p.inventory_limit) & (imb >= -p.pull_threshold)
        want_ask = (position - lots >= -p.inventory_limit) & (imb <= p.pull_threshold)
        drop_bid = q.bid & ~(want_bid & q.bid_at_touch)
        drop_ask = q.ask & ~(want_ask & q.ask_at_touch)
        down = imb < 0
        ask_first = (position > 0) | ((position == 0) & down)
        return first_rule([
            (stop, self.flatten[position + self.limit]),
            (drop_bid & (down | ~drop_ask), a.cancel_bid),
            (drop_ask, a.cancel_ask),
            (want_ask & ~q.ask & (ask_first | ~want_bid | q.bid), a.post_ask),
            (want_bid & ~q.bid, a.post_bid),
        ], position)


@dataclass
class MarketMakerFit:
    """Attributes:
    params: the chosen parameters (``NEVER_QUOTES`` where no candidate made money).
    candidates: (parameters, training net PnL in currency) of every candidate.
    fit_rows: training rows the candidates were swept over.
    """

    params: MarketMakerParams
    candidates: list[tuple[MarketMakerParams, float]]
    fit_rows: int


def market_maker_grid(book: BookTensors, rows: torch.Tensor, cfg: BaselineConfig
                      ) -> list[MarketMakerParams]:
    """The fit's candidates: every inventory limit x pull threshold (quantiles of |I| over
    ``rows``, and never) x stop of ``cfg``."""
    pulls = abs_imbalance_quantiles(book, rows, cfg.market_maker_pull_quantiles)
    pulls = sorted(set(pulls) | {NEVER_TRADES})
    return [MarketMakerParams(limit, pull, stop) for limit, pull, stop in itertools.product(
        cfg.market_maker_inventory_limits, pulls, cfg.market_maker_stops_ticks)]


def fit_market_maker(book: BookTensors, train_rows: torch.Tensor, sim: SimConfig,
                     cfg: BaselineConfig = BaselineConfig()) -> MarketMakerFit:
    """The candidate with the best training net PnL in the simulator (module docstring).

    Args:
        book: the device dataset.
        train_rows: [n] int64 sorted training end rows; no other row is read.
        sim: the evaluation's simulator settings (passive orders on).
        cfg: the grid, the sample size and the envs of the fit.
    """
    rows = contiguous_sample(train_rows, cfg.passive_fit_rows, cfg.imbalance_fit_blocks)
    grid = market_maker_grid(book, rows, cfg)
    template = BatchedLobEnv(book, 1, sim)
    pnl = training_net_pnl(book, rows, [MarketMakerPolicy(p, cfg, template) for p in grid],
                           sim, cfg.imbalance_fit_envs)
    scored = list(zip(grid, pnl))
    best, best_pnl = max(scored, key=lambda c: c[1])
    return MarketMakerFit(params=best if best_pnl > 0 else NEVER_QUOTES, candidates=scored,
                          fit_rows=len(rows))


def make_market_maker(env: BatchedLobEnv, cfg: BaselineConfig,
                      train_rows: torch.Tensor | None) -> MarketMakerPolicy:
    """The market maker fitted on ``train_rows`` for ``env``'s simulator."""
    PassiveActions.of(env.cfg, cfg.size_index, "market_maker")  # refuses before a fit
    if train_rows is None:
        raise ValueError("the market_maker baseline needs training rows to fit its parameters")
    fit = fit_market_maker(env.book, train_rows, env.cfg, cfg)
    return MarketMakerPolicy(fit.params, cfg, env, fit)
