"""A run folder saved by an earlier lobsurf still evaluates and resumes as the flat
training package did.

``saved_run/run`` is the tiny run (validation on, ``train.min_validation_trades`` 15, every
validated checkpoint a candidate, so RUN/chosen.pt holds a network; one checkpoint kept, at
step 20) written by lobsurf 0.1.0 as it stood before ``lobsurf.training`` was split into
sub-packages (commit 3399470), on ``tests.conftest.random_walk_books`` seeds 1 and 2 in a
store folder named ``store`` beside it. ``saved_run/expected.json`` holds what lobsurf
printed for ``lobsurf eval run --json --envs 16`` and the metrics.jsonl records after
``lobsurf train --resume run --steps 30``, with the flat package as it stood last (commit
9478fb9: its validations after the resume follow the model-choice rule of that commit).
Nothing in the folder names a module: the checkpoints are plain names, numbers and tensors
(``weights_only`` headers), config.toml is settings, so the files load whatever the code's
layout; this test holds that to the numbers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lobsurf.cli import main
from lobsurf.training.recovery.run_folder import read_metrics
from tests.conftest import random_walk_books, write_store
from tests.training.test_train_command import TIMING_KEYS, train

SAVED = Path(__file__).parent / "saved_run"


def same(got, want, where: str = "") -> None:
    """Equal, floats within 1e-6 relative (another CPU may sum in another order); a dict may
    hold keys beyond the expected ones (settings added since)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(want) <= set(got), (where, set(want) - set(got))
        for key in want:
            same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for k, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{where}[{k}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-6, abs=1e-9), where
    else:
        assert got == want, where


@pytest.fixture
def saved_run(tmp_path, monkeypatch) -> Path:
    """The saved run and its store, in the working folder the run names its store from."""
    shutil.copytree(SAVED / "run", tmp_path / "run")
    write_store(tmp_path / "store", [random_walk_books(2000, 1), random_walk_books(
        1500, 2, start_ns=1_700_100_000 * 10**9)])
    monkeypatch.chdir(tmp_path)
    return Path("run")


def test_a_saved_run_evaluates_its_chosen_policy_as_before(saved_run, capsys):
    assert main(["eval", str(saved_run), "--json", "--no-progress", "--envs", "16"]) == 0
    result = json.loads(capsys.readouterr().out)
    want = json.loads((SAVED / "expected.json").read_text())["eval"]
    assert result["chosen"]["policy"] == "checkpoint" and result["chosen"]["source"] == "chosen"
    same(result, want)


def test_a_saved_run_resumes_to_the_same_records(saved_run, capsys):
    assert train("--resume", saved_run, "--steps", 30) == 0
    want = json.loads((SAVED / "expected.json").read_text())["metrics"]
    got = read_metrics(saved_run / "metrics.jsonl")
    assert [(r["event"], r.get("step")) for r in got] == [(r["event"], r.get("step"))
                                                           for r in want]
    for g, w in zip(got, want):
        same({k: v for k, v in g.items() if k not in TIMING_KEYS},
             {k: v for k, v in w.items() if k not in TIMING_KEYS}, f"{g['event']} {g.get('step')}")
