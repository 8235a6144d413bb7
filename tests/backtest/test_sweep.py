"""The deterministic held-out sweep: every row traded through once, identical reruns,
hold exactly zero, and the evaluate_policies shape."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lobsurf.backtest.sweep import SweepConfig, sweep, tile_rows
from lobsurf.baselines.policies import BaselineConfig, HoldPolicy, make_baseline
from lobsurf.data.split import time_split
from lobsurf.eval.evaluate import evaluate_policies
from lobsurf.sim import SimConfig
from lobsurf.sim.books import random_walk_book
from lobsurf.sim.env import BatchedLobEnv

SIM = SimConfig(window=17, fee_per_lot=1.0, max_episode_steps=50)
BOOK = random_walk_book(3000, 2, seed=3)  # segments [0, 1500), [1500, 3000)
# three runs with gaps; the last one ends at the segment's end (its final row cannot fill)
ROWS = torch.cat([torch.arange(100, 400), torch.arange(420, 1500), torch.arange(2000, 3000)])


class Recorder:
    """Holds, and keeps every cursor it was asked to act at."""

    def __init__(self) -> None:
        self.cursors: list[torch.Tensor] = []

    def act(self, env: BatchedLobEnv) -> torch.Tensor:
        self.cursors.append(env.state.cursor.clone())
        return HoldPolicy().act(env)


def baselines(book, names=("hold", "random", "momentum", "oracle")) -> dict:
    env = BatchedLobEnv(book, 1, SIM)
    return {n: make_baseline(n, env, BaselineConfig(seed=1)) for n in names}


@pytest.mark.parametrize("num_envs", [1, 7, 64])
def test_every_row_is_traded_through_exactly_once(num_envs: int) -> None:
    rec = Recorder()
    _, tiling = sweep(BOOK, ROWS, {"rec": rec}, SIM, SweepConfig(num_envs=num_envs))
    # fill rows past a segment's end are dropped: 1499 (latency 1) and 2999
    expected = ROWS[(ROWS != 1499) & (ROWS != 2999)]
    assert torch.equal(tiling.rows, expected) and tiling.dropped == 2 and tiling.ranges == 3
    seen = torch.stack(rec.cursors)  # [T, B]
    flat = torch.arange(num_envs) * tiling.steps + torch.arange(tiling.steps)[:, None]
    visited = seen[flat < len(expected)]
    assert torch.equal(visited.sort().values, expected)  # each row once, no other row


def test_two_sweeps_are_identical_and_flat_at_the_end() -> None:
    runs = [sweep(BOOK, ROWS, baselines(BOOK), SIM, SweepConfig(num_envs=7))[0] for _ in range(2)]
    for name, a in runs[0].items():
        b = runs[1][name]
        for field in ("trade_pnl", "trade_holding_steps", "step_pnl", "step_hold"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), (name, field)
        assert (a.gross_pnl, a.fees, a.turnover_lots) == (b.gross_pnl, b.fees, b.turnover_lots)
        # every position is closed: the equity changes add up to the realized net PnL
        assert a.step_pnl.sum() == pytest.approx(a.trade_pnl.sum(), abs=1e-6)
        assert a.trade_pnl.sum() == pytest.approx(a.gross_pnl - a.fees, abs=1e-6)
    assert len(runs[0]["random"].trade_pnl) > 0 and len(runs[0]["oracle"].trade_pnl) > 0


def test_hold_is_zero_and_the_result_shape() -> None:
    split = time_split(BOOK, SIM.window, 10, 200, 0.8, at_segment=False)
    out = evaluate_policies(BOOK, split.test_rows, baselines(BOOK, ("hold", "oracle")), SIM,
                            SweepConfig(num_envs=5), split_info={"mode": "heldout"},
                            settings={"store": "mem"})
    hold = out["policies"]["hold"]
    assert (hold["net_pnl"], hold["gross_pnl"], hold["fees"], hold["trades"]) == (0.0, 0.0, 0.0, 0)
    assert hold["hold_fraction"] == 1.0 and hold["max_drawdown"] == 0.0
    assert out["policies"]["oracle"]["net_pnl"] > 0
    assert out["split"]["mode"] == "heldout" and out["split"]["rows"] == hold["steps"]
    assert out["settings"]["store"] == "mem" and out["settings"]["sim"]["window"] == SIM.window
    assert out["settings"]["num_envs"] == 5


@pytest.mark.parametrize("stride", [2, 5])
def test_a_strided_sweep_steps_through_every_row_once(stride: int) -> None:
    """Decision rows are every stride-th row of each contiguous run (a plain loop decides
    which); the rows a step holds through partition the held-out rows."""
    sim = SimConfig(window=17, fee_per_lot=1.0, max_episode_steps=50, stride=stride)
    rec = Recorder()
    _, tiling = sweep(BOOK, ROWS, {"rec": rec}, sim, SweepConfig(num_envs=7))
    kept = [int(r) for r in ROWS if int(r) not in (1499, 2999)]
    expected, run_start = [], None
    for i, r in enumerate(kept):
        if i == 0 or r != kept[i - 1] + 1 or (r >= 1500) != (kept[i - 1] >= 1500):
            run_start = r
        if (r - run_start) % stride == 0:
            expected.append(r)
    assert tiling.rows.tolist() == expected and tiling.ranges == 3
    seen = torch.stack(rec.cursors)
    flat = torch.arange(7) * tiling.steps + torch.arange(tiling.steps)[:, None]
    assert seen[flat < len(expected)].sort().values.tolist() == expected
    covered = sorted(r for d in expected for r in range(d, d + stride) if r in set(kept))
    assert covered == kept  # every kept row lies in exactly one step
    # a step continues its episode only to the next decision row of the same run
    nxt = tiling.continues.nonzero()[:, 0]
    assert torch.equal(tiling.rows[nxt + 1] - tiling.rows[nxt], torch.full_like(nxt, stride))
    assert int((~tiling.continues).sum()) == 3


def test_a_strided_sweep_closes_every_position() -> None:
    sim = SimConfig(window=17, fee_per_lot=1.0, max_episode_steps=50, stride=4)
    records, _ = sweep(BOOK, ROWS, baselines(BOOK), sim, SweepConfig(num_envs=5))
    for name, rec in records.items():
        assert rec.step_pnl.sum() == pytest.approx(rec.trade_pnl.sum(), abs=1e-6), name
    assert len(records["oracle"].trade_pnl) > 0


def test_tile_rows_refuses_what_it_cannot_sweep() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        tile_rows(BOOK, ROWS.flip(0), SIM, 4)
    with pytest.raises(ValueError, match="rows of their segment before them"):
        tile_rows(BOOK, torch.arange(1500, 1600), SIM, 4)


def test_baselines_and_an_agent_share_one_sweep() -> None:
    from lobsurf.baselines.policies import make_baselines
    from lobsurf.eval.evaluate import eval_split

    split = eval_split(BOOK, SIM.window, "heldout", (10, 200), 0.8)
    assert split.info["cut_row"] == 1500 and len(split.train_rows) > 0
    env = BatchedLobEnv(BOOK, 1, SIM)
    policies = {**make_baselines(("hold", "imbalance"), env, BaselineConfig(), split.train_rows),
                "agent": Recorder()}
    out = evaluate_policies(BOOK, split.rows, policies, SIM, SweepConfig(num_envs=4))
    assert list(out["policies"]) == ["hold", "imbalance", "agent"]
    assert out["policies"]["agent"] == out["policies"]["hold"]  # the recorder only holds
    every = eval_split(BOOK, SIM.window, "all")
    assert len(every.rows) == 3000 - 2 * (SIM.window - 1) and every.info["fitted_in_sample"]
