"""Proof of learning, on CPU in CI: ``lobsurf train`` then ``lobsurf eval RUN``, as a user
runs them, on the bundled ``tradeable`` preset and on its edge-0 null.

* Learning: the greedy agent's held-out net PnL (one deterministic sweep of the held-out
  session, fee 1.0 per lot) beats ``hold``, ``random`` and ``momentum`` and reaches at
  least half of ``imbalance``'s.
* Null: on the same market with edge 0 the same budget does not beat ``hold`` beyond the
  bootstrap confidence interval of its PnL per trade; a profit there means leakage (the
  agent sees rows it trades against) or a simulator bug.
* Behaviour of the learning run: hold fraction strictly between 0 and 1 (training and
  held-out), post-gate action entropy above a floor, win rate reported.

A small network (d_model 64, one layer, K 32) at learning rate 5e-4 keeps each run near
three minutes on one CPU thread. The runs use one thread: float reductions, hence a seeded
run's trajectory, depend on the thread count. Seeds 0, 1, 2, 3 of this budget made
+271,457, +274,338, +293,870 and +156,972 on the held-out session against momentum's
+89,271 and imbalance's +53,167. At the default 1e-3 this network peaks near 3,000 steps
and then degrades on some seeds (seed 0: +220,478 at 3,000, +28,038 at 4,500), one seed in
four fails at 3,000 (docs/log.md); at 5e-4 every seed tried rises to 6,000. Turning the
mark-to-market shaping off (``reward.mark_to_market=false``) fails the learning test, and
a planted look-ahead (windows ending 10 rows in the future) fails the null test.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import torch

from lobsurf.cli import main
from lobsurf.train.run_folder import read_metrics

SMALL = ["encoder.d_model=64", "encoder.n_layers=1", "encoder.d_state=16",
         "encoder.headdim=16", "sim.window=32", "network.q_hidden=128", "learner.lr=5e-4"]
STEPS = 6000
ENVS = 64
SEED = 0
IMBALANCE_FRACTION = 0.5
ENTROPY_FLOOR = 0.3
"""nats; ln(11) = 2.40 is uniform over the 11 actions, 0 a single action."""


def _store(root: Path, name: str) -> Path:
    from lobsurf.data.store.ingest import ingest
    from lobsurf.data.synth import synth_ingest_config, write_synth
    from lobsurf.presets import preset

    cfg = preset(name)
    paths = write_synth(root / f"{name}-dbn", cfg)
    ingest(paths, root / f"{name}-store", synth_ingest_config(cfg), overwrite=True)
    return root / f"{name}-store"


def _train_and_eval(store: Path, run: Path) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        sets = [a for s in SMALL + [f"train.seed={SEED}", f"sim.seed={SEED}"] for a in ("--set", s)]
        assert main(["train", "--store", str(store), "--out", str(run), "--steps", str(STEPS),
                     "--envs", str(ENVS), "--device", "cpu", "--no-progress", *sets]) == 0
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["eval", str(run), "--json", "--no-progress", "--device", "cpu"]) == 0
    finally:
        torch.set_num_threads(threads)
    return json.loads(out.getvalue())


def _table(result: dict) -> str:
    return "\n".join(f"{name:10s} net {m['net_pnl']:>12,.1f} trades {m['trades']:>6} "
                     f"hold {m['hold_fraction']:.3f} CI {m.get('pnl_per_trade_ci')}"
                     for name, m in result["policies"].items())


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    root = tmp_path_factory.mktemp("learning")
    out = {}
    for name in ("tradeable", "tradeable-null"):
        run = root / f"run-{name}"
        out[name] = (run, _train_and_eval(_store(root, name), run))
    return out


def test_the_agent_learns_a_held_out_edge_net_of_costs(runs) -> None:
    run, result = runs["tradeable"]
    print(_table(result))
    pol = result["policies"]
    agent = pol["agent"]["net_pnl"]
    for base in ("hold", "random", "momentum"):
        assert agent > pol[base]["net_pnl"], (base, _table(result))
    assert agent >= IMBALANCE_FRACTION * pol["imbalance"]["net_pnl"] > 0, _table(result)
    # behaviour: it trades when it expects a move and holds otherwise
    assert 0 < pol["agent"]["hold_fraction"] < 1 and pol["agent"]["win_rate"] is not None
    last = [r for r in read_metrics(run / "metrics.jsonl") if r.get("event") == "metrics"][-1]
    assert 0 < last["hold_fraction"] < 1, last
    assert last["action_entropy"] > ENTROPY_FLOOR, last
    assert last["win_rate"] is not None and 0 <= last["win_rate"] <= 1, last


def test_no_profit_beyond_chance_on_the_edge_zero_null(runs) -> None:
    _, result = runs["tradeable-null"]
    print(_table(result))
    agent = result["policies"]["agent"]
    ci = agent["pnl_per_trade_ci"]
    profitable_beyond_ci = agent["net_pnl"] > 0 and ci is not None and ci[0] > 0
    assert not profitable_beyond_ci, _table(result)
    assert result["policies"]["imbalance"]["net_pnl"] <= 0  # no baseline edge either
