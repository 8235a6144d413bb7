"""Crash safety: ``lobsurf train`` killed with SIGKILL at seeded moments (inside a step's
loop, mid-way through a checkpoint file, mid-way through a metrics line) and resumed each
time ends bit for bit where an uninterrupted run ends; a torn or unmarked newest checkpoint
is skipped with a warning and the previous one used."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import tomli_w
import torch

from lobsurf.training.recovery import pause_points
from lobsurf.training.recovery.checkpoint import (list_checkpoints, load_payload, marker_path,
                                      verify_checkpoint)
from tests.agent.conftest import TINY
from tests.training.test_train_command import TIMING_KEYS, _tensors, train

#: seeds the kill schedule (which arrival at which point)
KILL_SEED = 12
#: longest wait for a subprocess to reach its pause point
REACH_S = 120.0
CRASH_TRAIN = {"steps": 30, "log_every": 3, "checkpoint_every": 6, "keep_checkpoints": 2}
CLI = [sys.executable, "-c", "import sys; from lobsurf.cli import main; sys.exit(main())"]


def crash_toml(tmp_path):
    values = {k: dict(v) for k, v in TINY.items()}
    values["train"].update(CRASH_TRAIN)
    path = tmp_path / "crash.toml"
    path.write_text(tomli_w.dumps(values))
    return path


@pytest.fixture(autouse=True)
def one_cpu_thread():
    """The subprocess runs here use one thread (OMP_NUM_THREADS=1), and CPU results are bit
    for bit only at a fixed thread count, so the in-process runs they are compared with use
    one thread too (CI's default is one per core)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def spawn(args, pause: str, marker) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env[pause_points.ENV_PAUSE], env[pause_points.ENV_PAUSE_FILE] = pause, str(marker)
    return subprocess.Popen([*CLI, "train", "--no-progress", "--device", "cpu", *map(str, args)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_paused(proc: subprocess.Popen, marker) -> None:
    deadline = time.monotonic() + REACH_S
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"process ended (rc {proc.returncode}) before its pause: {err[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("pause point not reached")
        time.sleep(pause_points.POLL_S)
    marker.unlink()


def kill_at(args, pause: str, marker) -> None:
    proc = spawn(args, pause, marker)
    wait_paused(proc, marker)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL


def metrics_records(run):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]  # a torn line would not parse


def assert_same_run(straight, resumed):
    a = load_payload(list_checkpoints(straight)[-1])
    b = load_payload(list_checkpoints(resumed)[-1])
    assert a["step"] == b["step"]
    ta, tb = dict(_tensors(a)), dict(_tensors(b))
    assert ta.keys() == tb.keys() and len(ta) > 50
    for key in ta:
        if not key.startswith((".config", ".meta")):
            assert torch.equal(ta[key], tb[key]), key

    def metrics(run):
        return [{k: v for k, v in r.items() if k not in TIMING_KEYS}
                for r in metrics_records(run) if r["event"] == "metrics"]
    assert metrics(straight) == metrics(resumed)


@pytest.mark.slow  # a subprocess per kill
def test_sigkill_anywhere_then_resume_equals_an_uninterrupted_run(tiny_store, tmp_path):
    toml = crash_toml(tmp_path)
    straight, run = tmp_path / "straight", tmp_path / "killed"
    assert train("--store", tiny_store.path, "--config", toml, "--out", straight) == 0
    marker = tmp_path / "paused"
    rng = random.Random(KILL_SEED)
    # each process counts its own arrivals; every kill lands after the first checkpoint
    schedule = [("step", rng.randint(7, 11)), ("checkpoint_write", rng.randint(1, 2)),
                ("metrics_flush", rng.randint(1, 3)), ("step", rng.randint(1, 5)),
                ("checkpoint_write", 1)]
    fresh = ["--store", tiny_store.path, "--config", toml, "--out", run]
    for i, (point, n) in enumerate(schedule):
        kill_at(fresh if i == 0 else ["--resume", run], f"{point}:{n}", marker)
        # never a half-written checkpoint: every step_*.pt on disk is complete and marked
        found = list_checkpoints(run)
        assert found, "the first kill must come after the first checkpoint"
        for path in found:
            verify_checkpoint(path)
        if point == "checkpoint_write":
            assert list(run.glob("checkpoints/.*.tmp")), "the kill did not land mid-file"
        if point == "metrics_flush":
            assert not (run / "metrics.jsonl").read_text().endswith("\n"), "no torn line"
    assert train("--resume", run) == 0
    records = metrics_records(run)
    steps = [r["step"] for r in records if r["event"] == "metrics"]
    assert steps == list(range(3, 31, 3))  # no duplicated, no missing record
    assert sum(r["event"] == "resume" for r in records) >= 1
    assert_same_run(straight, run)


def _flip_middle_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _drop_marker(path):
    marker_path(path).unlink()


@pytest.mark.parametrize("damage", [_flip_middle_byte, _truncate, _drop_marker],
                         ids=["bit-flip", "truncated", "no-marker"])
def test_a_broken_newest_checkpoint_is_skipped_for_the_previous(damage, tiny_store, tiny_toml,
                                                                 tmp_path, capsys):
    straight, run = tmp_path / "straight", tmp_path / "run"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", straight) == 0
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run) == 0
    newest = list_checkpoints(run)[-1]
    assert newest.name == "step_00000020.pt"
    damage(newest)
    capsys.readouterr()
    assert train("--resume", run) == 0
    err = capsys.readouterr().err
    assert "warning: skipping checkpoint step_00000020.pt" in err
    resumed = [r for r in metrics_records(run) if r["event"] == "resume"]
    assert resumed[-1]["checkpoint"] == "step_00000010.pt"
    assert_same_run(straight, run)
