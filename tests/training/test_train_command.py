"""``lobsurf train`` through the real CLI: the run folder, refusals, and exact resume."""

from __future__ import annotations

import json

import pytest
import torch

from lobsurf.cli import main
from lobsurf.training.recovery.checkpoint import list_checkpoints, load_payload
from lobsurf.training.recovery.run_folder import read_metrics

TIMING_KEYS = {"wall_s", "steps_per_s", "env_steps_per_s"}


def train(*args) -> int:
    return main(["train", "--no-progress", "--device", "cpu", *map(str, args)])


def test_train_writes_a_complete_run_folder(tiny_store, tiny_toml, tmp_path, capsys):
    run = tmp_path / "run"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run) == 0
    out = capsys.readouterr().out
    assert f"lobsurf eval {run}" in out and "run saved in" in out
    assert {p.name for p in run.iterdir()} == {"run.json", "config.toml", "metrics.jsonl",
                                                "checkpoints"}
    records = read_metrics(run / "metrics.jsonl")
    first = records[0]
    assert first["event"] == "run_start"
    assert first["config"]["train"]["steps"] == 20
    assert {c["name"] for c in first["controllers"]} >= {"v_min", "v_max", "reward_scale"}
    assert {"torch", "lobsurf"} <= set(first["versions"]) and first["device"].startswith("cpu")
    metrics = [r for r in records if r["event"] == "metrics"]
    assert [r["step"] for r in metrics] == [5, 10, 15, 20]
    required = {"step", "wall_s", "steps_per_s", "env_steps_per_s", "l_q", "win_rate",
                "hold_fraction", "action_entropy", "v_min", "v_max", "reward_scale",
                "mean_abs_position", "net_pnl", "trades_closed"}
    assert required <= set(metrics[-1])
    assert records[-1]["event"] == "run_end"
    assert [p.name for p in list_checkpoints(run)] == ["step_00000010.pt", "step_00000020.pt"]


def test_out_refuses_foreign_folders_and_asks_for_overwrite(tiny_store, tiny_toml, tmp_path, capsys):
    foreign = tmp_path / "data"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", foreign) == 2
    assert "not a lobsurf training run" in capsys.readouterr().err
    assert (foreign / "keep.txt").read_text() == "mine"
    run = tmp_path / "run"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run) == 0
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run) == 2
    assert "--overwrite replaces it" in capsys.readouterr().err
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run,
                 "--overwrite") == 0


def test_bad_set_is_a_one_line_error(tiny_store, tmp_path, capsys):
    assert train("--store", tiny_store.path, "--set", "learner.lrr=1", "--out", tmp_path / "r") == 2
    assert "unknown key learner.lrr" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def _tensors(tree, prefix=""):
    if isinstance(tree, torch.Tensor):
        yield prefix, tree
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from _tensors(v, f"{prefix}.{k}")
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _tensors(v, f"{prefix}[{i}]")


@pytest.mark.parametrize("options", [(), ("--set", "train.reference=true")])
def test_resume_is_bit_exact(tiny_store, tiny_toml, tmp_path, options):
    # the production step's checkpoint keeps the draw made for the next step (the replay's
    # generator has moved past it); the readable reference step (train.reference) draws on
    # the spot, and resumes exactly too
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", straight,
                 *options) == 0
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", split,
                 "--steps", 10, *options) == 0
    assert train("--resume", split, "--steps", 20) == 0
    a = load_payload(list_checkpoints(straight)[-1])
    b = load_payload(list_checkpoints(split)[-1])
    assert a["step"] == b["step"] == 20
    ta, tb = dict(_tensors(a)), dict(_tensors(b))
    assert ta.keys() == tb.keys() and len(ta) > 50
    assert (".replay.ahead.index" in ta) == (not options)
    for key in ta:
        if key.startswith(".config") or key.startswith(".meta"):
            continue
        assert torch.equal(ta[key], tb[key]), key
    # metrics: no duplicated or torn lines; equal to the uninterrupted run's but for timing
    def metrics(run):
        lines = (run / "metrics.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]  # a torn line would not parse
        return [{k: v for k, v in r.items() if k not in TIMING_KEYS}
                for r in records if r["event"] == "metrics"]
    ma, mb = metrics(straight), metrics(split)
    assert [r["step"] for r in mb] == [5, 10, 15, 20]
    assert ma == mb


def test_resume_refuses_config_changes(tiny_store, tiny_toml, tmp_path, capsys):
    run = tmp_path / "run"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run, "--steps", 5) == 0
    assert train("--resume", run, "--set", "learner.lr=1") == 2
    assert "keeps its config" in capsys.readouterr().err
