"""``lobsurf train --seeds N`` and ``lobsurf eval RUN`` on the seed group: the folders, the
verdict over seeds in the JSON, resume of unfinished seeds, refusals."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest
import tomli_w

from lobsurf.cli import main
from lobsurf.training.recovery.run_folder import is_run_folder, read_metrics
from lobsurf.training.run.seed_group import (
    SEEDS_NAME,
    _side_by_side,
    is_seed_group,
    seed_dir,
    without_own_flags,
)
from tests.agent.conftest import TINY
from tests.conftest import random_walk_books, write_store
from tests.training.test_train_command import train
from tests.training.test_validation import VALIDATED

BASELINES = {"hold", "random", "momentum", "imbalance", "oracle", "optimal"}


@pytest.fixture(scope="module")
def group(tmp_path_factory) -> tuple[Path, str, str]:
    """Two validated tiny seeds (3 and 4) on the tiny store, and what training said."""
    root = tmp_path_factory.mktemp("seeds")
    store = write_store(root / "store", [random_walk_books(2000, 1), random_walk_books(
        1500, 2, start_ns=1_700_100_000 * 10**9)])
    (root / "tiny.toml").write_text(tomli_w.dumps(TINY))
    run, out, err = root / "group", io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert train("--store", store.path, "--config", root / "tiny.toml", "--out", run,
                     "--seeds", 2, "--set", "train.seed=3", *VALIDATED) == 0
    return run, out.getvalue(), err.getvalue()


def test_seeds_train_one_complete_run_folder_each(group):
    run, out, err = group
    assert is_seed_group(run) and json.loads((run / SEEDS_NAME).read_text())["seeds"] == [3, 4]
    for seed in (3, 4):
        folder = seed_dir(run, seed)
        assert is_run_folder(folder) and (folder / "chosen.json").is_file()
        start = read_metrics(folder / "metrics.jsonl")[0]
        assert start["config"]["train"]["seed"] == seed
        assert read_metrics(folder / "metrics.jsonl")[-1]["event"] == "run_end"
        assert f"seed {seed}:" in out
    assert "seed 3 (1 of 2 to train, 2 in all): running" in err
    assert "seed 4: finished" in err and f"lobsurf eval {run}" in out
    # two seeds, two trajectories
    a, b = (read_metrics(seed_dir(run, s) / "metrics.jsonl")[1] for s in (3, 4))
    assert a["l_q"] != b["l_q"]


def test_eval_of_a_seed_group_gives_the_verdict(group, capsys):
    run, _, _ = group
    assert main(["eval", str(run), "--json", "--no-progress", "--envs", "16"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["policies"]) == BASELINES | {"seed_3", "seed_4"}
    assert [c["seed"] for c in result["chosen"]] == [3, 4]
    assert all(c["source"] == "chosen" for c in result["chosen"])
    v = result["seeds"]
    assert {"per_seed", "iqm", "iqm_ci", "mean", "mean_ci", "prob_improvement"} <= set(v)
    per_seed = v["per_seed"]
    assert [s["seed"] for s in per_seed] == [3, 4]
    nets = [s["net_pnl"] for s in per_seed]
    assert nets == [result["policies"][f"seed_{s}"]["net_pnl"] for s in (3, 4)]
    for key in ("iqm", "mean"):
        assert set(v[key]) == {"net_pnl", "capture", "capture_bayes"}
        assert v[key]["capture_bayes"] is None  # a random-walk store: no ceiling
        # two seeds: the IQM is their mean, and every interval lies between them
        assert v[key]["net_pnl"] == pytest.approx(sum(nets) / 2)
        lo, hi = v[f"{key}_ci"]["net_pnl"]
        assert min(nets) - 1e-9 <= lo <= v[key]["net_pnl"] <= hi <= max(nets) + 1e-9
    assert set(v["prob_improvement"]) == BASELINES
    for name, p in v["prob_improvement"].items():
        base = result["policies"][name]["net_pnl"]
        want = sum(1.0 if x > base else 0.5 if x == base else 0.0 for x in nets) / 2
        assert p["net_pnl"] == pytest.approx(want), name
        assert 0 <= p["net_pnl_ci"][0] <= p["net_pnl"] <= p["net_pnl_ci"][1] <= 1
    assert "coarse" in v["note"]
    assert main(["eval", str(run), "--no-progress", "--envs", "16"]) == 0
    text = capsys.readouterr().out
    assert "verdict over 2 seeds" in text and "P(agent > hold)" in text and "coarse" in text


def test_resume_of_a_group_trains_only_the_unfinished_seeds(group, capsys):
    run, _, _ = group
    want = (seed_dir(run, 4) / "chosen.json").read_text()
    shutil.rmtree(seed_dir(run, 4))  # never trained (or lost before its first checkpoint)
    assert train("--resume", run) == 0
    err = capsys.readouterr().err
    assert "seed 3: finished, skipped" in err and "seed 4 (1 of 1 to train" in err
    assert (seed_dir(run, 4) / "chosen.json").read_text() == want  # the same run again


def test_seed_refusals(tiny_store, tiny_toml, tmp_path, capsys):
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", tmp_path / "g",
                 "--seeds", 1) == 2
    assert "at least 2" in capsys.readouterr().err
    assert train("--store", tiny_store.path, "--out", tmp_path / "g", "--seeds", 2,
                 "--gpus", 2) == 2
    assert "cannot be combined" in capsys.readouterr().err
    foreign = tmp_path / "data"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    assert train("--store", tiny_store.path, "--out", foreign, "--seeds", 2) == 2
    assert "not a lobsurf training run" in capsys.readouterr().err
    assert (foreign / "keep.txt").read_text() == "mine"


def test_each_seed_sets_its_own_out_and_seed():
    argv = ["--store", "s", "--seeds", "3", "--out", "r", "--overwrite", "--seeds=3",
            "--out=r", "--set", "train.seed=1", "--steps", "9"]
    assert without_own_flags(argv) == ["--store", "s", "--set", "train.seed=1", "--steps", "9"]


@pytest.mark.slow
def test_side_by_side_processes(tiny_store, tiny_toml, tmp_path):
    # the launcher of CUDA runs, here with CPU processes: one process per seed, output in
    # RUN/logs, each a complete run
    run = tmp_path / "group"
    run.mkdir()
    base = ["train", "--device", "cpu", "--store", str(tiny_store.path), "--config",
            str(tiny_toml), "--steps", "5"]
    argvs = {s: [*base, "--out", str(seed_dir(run, s)), "--set", f"train.seed={s}"]
             for s in (0, 1)}
    assert _side_by_side(run, argvs) == {0: 0, 1: 0}
    for s in (0, 1):
        assert read_metrics(seed_dir(run, s) / "metrics.jsonl")[-1]["event"] == "run_end"
        assert (run / "logs" / f"seed_{s}.log").is_file()


def _hand_made_group_result(nets: list[float]) -> dict:
    """A group sweep's result as ``evaluate_seed_group`` has it before the verdict."""
    policies = {name: {"net_pnl": 20.0, "capture": 0.1, "trades": 9, "win_rate": 0.5,
                       "pnl_per_trade_ci": [1.0, 3.0]} for name in BASELINES}
    chosen = []
    for seed, net in enumerate(nets):
        policies[f"seed_{seed}"] = {"net_pnl": net, "capture": net / 200, "trades": 5,
                                    "win_rate": 0.6, "pnl_per_trade_ci": [749.8, 1273.7]}
        chosen.append({"seed": seed, "policy": "checkpoint", "step": 1000 * (seed + 1)})
    return {"policies": policies, "chosen": chosen, "split": {"rows": 12345},
            "settings": {"run": "RUN"}}


@pytest.mark.parametrize("level", [0.5, 0.95])
def test_the_verdict_is_at_the_configured_level(level, tmp_path):
    from lobsurf.eval.aggregate import AggregateConfig
    from lobsurf.eval.seed_verdict import verdict
    from tests.eval.test_aggregate import SIX, assert_percentile_interval, exact_bootstrap

    v = verdict(_hand_made_group_result(list(SIX)), tmp_path, AggregateConfig(ci_level=level))
    assert v["ci_level"] == level
    means = exact_bootstrap(SIX, lambda rows: rows.mean(axis=1))
    assert_percentile_interval(v["mean_ci"]["net_pnl"], means, level)
    beats = exact_bootstrap(SIX, lambda rows: (rows > 20.0).mean(axis=1))
    assert_percentile_interval(v["prob_improvement"]["hold"]["net_pnl_ci"], beats, level)


def test_the_per_seed_table_gives_every_column_room(tmp_path, capsys):
    from lobsurf.eval.seed_verdict import print_verdict, verdict

    result = _hand_made_group_result([100.0, 2500.0, 37.5])
    result["seeds"] = verdict(result, tmp_path)
    print_verdict(result)
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["seed", "policy"])
    table = lines[head:head + 1 + 3 + len(BASELINES)]
    # a win rate and its neighbouring interval are apart, and the columns line up (right-
    # aligned: every line as long as the header, its cells GUTTER spaces or more apart)
    assert "0.600   [749.80, 1,273.70]" in table[1] and "0.600[" not in "".join(lines)
    assert len({len(line) for line in table}) == 1, table
    for line in table[:4]:
        assert len(re.split(r" {3,}", line.strip())) == 8, line
