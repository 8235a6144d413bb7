"""``lobsurf eval RUN``: the agent beside every baseline on the run's held-out rows."""

from __future__ import annotations

import json

import pytest

from lobsurf.cli import main
from tests.training.test_train_command import train


@pytest.fixture
def tiny_run(tiny_store, tiny_toml, tmp_path):
    run = tmp_path / "run"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run) == 0
    return run


def evaluate(capsys, *args) -> dict:
    assert main(["eval", *map(str, args), "--json", "--no-progress", "--envs", "16"]) == 0
    return json.loads(capsys.readouterr().out)


def test_eval_run_json_has_the_agent_and_every_baseline(tiny_run, tiny_store, capsys):
    result = evaluate(capsys, tiny_run)
    assert set(result["policies"]) == {"agent", "hold", "random", "momentum", "imbalance",
                                       "oracle", "optimal"}
    # the exact optimum bounds every policy; capture is each one's share of it
    best = result["policies"]["optimal"]
    assert best["capture"] == 1.0
    assert all(m["net_pnl"] <= best["net_pnl"] + 1e-6 for m in result["policies"].values())
    agent = result["policies"]["agent"]
    for key in ("net_pnl", "gross_pnl", "fees", "trades", "win_rate", "pnl_per_trade",
                "max_drawdown", "hold_fraction", "turnover"):
        assert key in agent, key
    assert result["policies"]["hold"]["net_pnl"] == 0
    split = result["split"]
    # held-out rows only: every swept window starts at or after the cut, and the simulator
    # trained on rows before cut - max horizon (the tiny config's horizons go up to 8)
    assert split["mode"] == "heldout" and split["cut_row"] == 2000
    assert split["train_stop_row"] == 2000 - 8
    # window 8; held-out end rows keep their shortest label horizon (2) inside the segment
    assert split["rows"] == 1500 - 7 - 2
    assert result["settings"]["trained_steps"] == 20 and result["settings"]["own_store"]


def test_two_evaluations_agree_exactly(tiny_run, capsys):
    for policy in ("greedy", "thompson"):
        a = evaluate(capsys, tiny_run, "--policy", policy)
        b = evaluate(capsys, tiny_run, "--policy", policy)
        assert a["policies"] == b["policies"], policy


def test_eval_on_another_store_and_text_table(tiny_run, tiny_store, capsys):
    result = evaluate(capsys, tiny_run, "--store", tiny_store.path, "--split", "all")
    assert result["split"]["mode"] == "all" and not result["settings"]["own_store"]
    assert main(["eval", str(tiny_run), "--no-progress", "--envs", "16"]) == 0
    out = capsys.readouterr().out
    assert "agent" in out and "net_pnl" in out


def test_eval_of_a_folder_that_is_no_run(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    assert main(["eval", str(tmp_path / "x"), "--no-progress"]) == 2
    assert "not a lobsurf training run" in capsys.readouterr().err


def test_eval_skips_a_broken_newest_checkpoint(tiny_run, capsys):
    from lobsurf.training.recovery.checkpoint import list_checkpoints

    newest = list_checkpoints(tiny_run)[-1]
    newest.write_bytes(newest.read_bytes()[:100])  # torn
    result = evaluate(capsys, tiny_run)
    assert result["settings"]["checkpoint"] == list_checkpoints(tiny_run)[-2].name
    assert newest.exists()  # evaluation only reads the run


def test_eval_run_on_a_synthetic_store_shows_the_causal_ceiling(tiny_run, tmp_path, capsys,
                                                                monkeypatch):
    import lobsurf.baselines.bayes as bayes
    from lobsurf.baselines.bayes_model import law_model
    from lobsurf.data.synth import SynthConfig, write_synth_store

    # a smaller sample of the law than the default's, for the test's time
    monkeypatch.setattr(bayes, "law_model", lambda law, stride, latency, bins, rows, lots, pad:
                        law_model(law, stride, latency, bins, 20_000, lots, pad))
    store = write_synth_store(tmp_path / "syn", SynthConfig(snapshots_per_day=2000, days=2,
                                                            edge=1.0, move_prob=0.3))
    pol = evaluate(capsys, tiny_run, "--store", store.path, "--split", "all")["policies"]
    assert pol["bayes"]["capture_bayes"] == 1.0
    assert 0 < pol["bayes"]["net_pnl"] <= pol["optimal"]["net_pnl"]
    for name in ("agent", "hold", "optimal"):
        assert pol[name]["capture_bayes"] == pytest.approx(pol[name]["net_pnl"]
                                                           / pol["bayes"]["net_pnl"])


@pytest.mark.slow
def test_a_run_with_passive_orders_is_swept_beside_the_passive_baselines(tiny_toml, tmp_path,
                                                                        capsys):
    """The baselines beside the agent follow the run's simulator: with resting orders the
    passive baselines and their optimum join (fitted on the run's training rows), bayes
    stays out, and the output says what the ceilings cover."""
    from dataclasses import replace

    from lobsurf.data.synth import write_synth_store
    from lobsurf.presets import PRESETS

    store = write_synth_store(tmp_path / "syn", replace(PRESETS["tradeable"],
                                                        snapshots_per_day=2_000, days=2))
    run = tmp_path / "run"
    assert train("--store", store.path, "--config", tiny_toml, "--out", run,
                 "--set", "sim.passive_orders=true", "--set", "sim.maker_fee_per_lot=-0.5",
                 "--set", "sim.queue_model=risk_averse") == 0
    capsys.readouterr()
    result = evaluate(capsys, run)
    pol = result["policies"]
    assert set(pol) == {"agent", "hold", "random", "momentum", "imbalance", "oracle", "optimal",
                        "market_maker", "passive_imbalance", "optimal_passive"}
    assert "market_maker_fitted" in result["settings"]["baselines"]
    assert "optimal_passive" in result["settings"]["ceiling_note"]
    assert all("maker_lots" in m for m in pol.values())
    best = pol["optimal_passive"]["net_pnl"]
    assert all(m["net_pnl"] <= best + 1e-6 for m in pol.values())
    assert pol["optimal_passive"]["capture_passive"] == 1.0
