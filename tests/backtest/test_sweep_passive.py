"""The sweep with passive orders: its records equal the plain reference simulator's
(``lobsurf.sim.reference_passive``) stepped through the same schedule, written here as
plain loops; the market-order baselines trade exactly as without passive orders."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from lobsurf.baselines.market_maker import MarketMakerParams, MarketMakerPolicy
from lobsurf.baselines.passive_imbalance import PassiveImbalancePolicy
from lobsurf.baselines.policies import BaselineConfig, make_baselines
from lobsurf.eval.evaluate import evaluate_policies
from lobsurf.backtest.metrics import compute_metrics
from lobsurf.backtest.sweep import SweepConfig, sweep
from lobsurf.sim import BatchedLobEnv, SimConfig
from lobsurf.sim.reference_passive import PassiveReferenceEnv
from tests.sim.passive_books import queue_market

SIM = SimConfig(window=4, stride=3, latency_rows=1, order_sizes_lots=(1, 2), position_limit_lots=3,
                max_episode_steps=15, passive_orders=True, fee_per_lot=1.0, fee_bps=0.0,
                maker_fee_per_lot=-0.3, maker_fee_bps=0.2)
BOOK = queue_market(1200, 11, segments=2)  # sessions [0, 600), [600, 1200)
ROWS = torch.cat([torch.arange(10, 150), torch.arange(170, 600), torch.arange(700, 900)])


class AnyAction:
    """Uniform over every action (posts and cancels too), from its own seeded generator."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def act(self, env: BatchedLobEnv) -> torch.Tensor:
        return torch.randint(0, env.cfg.num_actions, (env.num_envs,), generator=self.generator)


def pieces(rows: list[int], sim: SimConfig, envs: int) -> list[list[tuple[int, bool]]]:
    """Per env, its decision rows and whether the sweep ends the episode there (a plain
    reading of lobsurf.backtest.sweep's docstring)."""
    runs, decisions, stride = [], [], sim.stride
    for r in rows:
        if r + sim.latency_rows >= 600 * (1 + r // 600):
            continue  # its fill row lies past its session
        if runs and r == runs[-1][-1] + 1 and r // 600 == runs[-1][-1] // 600:
            runs[-1].append(r)
        else:
            runs.append([r])
    for run in runs:
        kept = run[::stride]
        decisions += [(row, i + 1 < len(kept)) for i, row in enumerate(kept)]
    steps = -(-len(decisions) // envs)
    out = []
    for j in range(envs):
        piece = decisions[j * steps:(j + 1) * steps]
        out.append([(row, not (goes_on and i + 1 < len(piece)))
                    for i, (row, goes_on) in enumerate(piece)])
    return out


def reference_records(actions: np.ndarray, sim: SimConfig, envs: int) -> list[dict]:
    """Step one plain reference env per piece through the recorded actions."""
    out = []
    steps = -(-len(actions) // envs)
    for j, piece in enumerate(pieces(ROWS.tolist(), sim, envs)):
        ref = PassiveReferenceEnv.from_book(BOOK, sim)
        ref.reset(0)
        rec = {"reward": [], "closed": [], "step_pnl": []}
        for t, (row, forced) in enumerate(piece):
            ref.cursor, session_stop = row, 600 * (1 + row // 600)
            ref.stop = row + sim.stride + sim.latency_rows if forced else session_stop
            before = ref.unrealized_pnl
            step = ref.step(int(actions[j * steps + t]), 0)
            rec["reward"].append(step.reward)
            rec["closed"].append(step.trade_closed)
            rec["step_pnl"].append(step.reward + ref.unrealized_pnl - before)
        rec["stats"], rec["passive"] = ref.stats, ref.passive_stats
        out.append(rec)
    return out


@pytest.mark.parametrize("queue_model", ["risk_averse", "probabilistic"])
def test_the_passive_sweep_equals_the_plain_reference(queue_model: str) -> None:
    sim = dataclasses.replace(SIM, queue_model=queue_model, queue_power=2)
    env = BatchedLobEnv(BOOK, 1, sim)
    base = BaselineConfig()
    policies = {"any": AnyAction(3),
                "market_maker": MarketMakerPolicy(MarketMakerParams(2, 0.6, 3.0), base, env),
                "passive_imbalance": PassiveImbalancePolicy(0.3, base, env)}
    envs = 5
    records, tiling = sweep(BOOK, ROWS, policies, sim, SweepConfig(num_envs=envs))
    assert len(tiling.rows) == sum(len(p) for p in pieces(ROWS.tolist(), sim, envs))
    for name, rec in records.items():
        refs = reference_records(rec.step_action, sim, envs)
        reward = [r for ref in refs for r in ref["reward"]]
        closed = [c for ref in refs for c in ref["closed"]]
        assert rec.trade_pnl.tolist() == [r for r, c in zip(reward, closed) if c], name
        assert rec.step_pnl.tolist() == [p for ref in refs for p in ref["step_pnl"]], name
        stats = [ref["stats"] for ref in refs]
        assert rec.turnover_lots == sum(s.turnover_lots for s in stats)
        assert rec.fees == pytest.approx(sum(s.fees for s in stats), rel=1e-12)
        assert rec.gross_pnl == sum(s.gross_pnl_ticks for s in stats) * 12.5
        p = rec.passive
        assert (p.posted_lots, p.maker_lots, p.rejected_posts) == tuple(
            sum(getattr(ref["passive"], k) for ref in refs)
            for k in ("posted_lots", "maker_lots", "rejected_posts")), name
        assert p.maker_fees == pytest.approx(sum(ref["passive"].maker_fees for ref in refs),
                                             rel=1e-12)
        assert p.maker_lots > 0 and len(rec.trade_pnl) > 5, name  # it exercised fills


def test_market_order_baselines_trade_the_same_with_passive_orders() -> None:
    market = dataclasses.replace(SIM, passive_orders=False, maker_fee_per_lot=None,
                                 maker_fee_bps=None, max_episode_steps=1000)
    passive = dataclasses.replace(market, passive_orders=True)
    names = ("hold", "random", "momentum", "imbalance", "oracle", "optimal")
    train = torch.arange(10, 400)
    rows = torch.arange(700, 1000)
    base = BaselineConfig(momentum_lookback_rows=3, imbalance_fit_envs=4,
                          imbalance_quantiles=(0.3, 0.6))
    results = [evaluate_policies(BOOK, rows, make_baselines(
        names, BatchedLobEnv(BOOK, 1, sim), base, train, rows, 6), sim, SweepConfig(6))
        for sim in (market, passive)]
    for name in names:
        without, with_ = results[0]["policies"][name], results[1]["policies"][name]
        assert {k: with_[k] for k in without} == without, name
        assert with_["posted_lots"] == with_["maker_lots"] == 0, name
    assert results[0]["policies"]["random"]["trades"] > 0
    assert results[1]["policies"]["optimal"]["net_pnl"] > 0


def test_no_passive_metrics_without_passive_orders() -> None:
    market = dataclasses.replace(SIM, passive_orders=False)
    records, _ = sweep(BOOK, ROWS, {"any": AnyAction(1)}, market, SweepConfig(4))
    assert records["any"].passive is None
    assert "maker_lots" not in compute_metrics(records["any"])
    assert math.isfinite(compute_metrics(records["any"])["net_pnl"])
