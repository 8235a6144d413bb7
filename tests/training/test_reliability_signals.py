"""Ctrl-C (SIGINT) and SIGTERM: a real ``lobsurf train`` subprocess stops after the current
step, writes a checkpoint there, prints how to resume, and the resumed run equals an
uninterrupted one."""

from __future__ import annotations

import signal

import pytest

from lobsurf.training.recovery.checkpoint import list_checkpoints
from lobsurf.training.recovery.run_folder import read_metrics
from tests.training.test_reliability_crash import (assert_same_run, one_cpu_thread,  # noqa: F401
                                                spawn, wait_paused)
from tests.training.test_train_command import train

STOP_AFTER_STEP = 7  # between the tiny run's checkpoints (10, 20) and off its log grid (5)


@pytest.mark.slow  # a training subprocess each
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_after_the_step_with_a_checkpoint_and_resumes_exactly(
        sig, tiny_store, tiny_toml, tmp_path):
    straight, run = tmp_path / "straight", tmp_path / "run"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", straight) == 0
    marker = tmp_path / "paused"
    proc = spawn(["--store", tiny_store.path, "--config", tiny_toml, "--out", run],
                 f"step:{STOP_AFTER_STEP}", marker)
    wait_paused(proc, marker)
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    assert f"stopped by {sig.name} at step {STOP_AFTER_STEP}" in err
    assert f"lobsurf train --resume {run} --steps 20" in err
    assert list_checkpoints(run)[-1].name == f"step_{STOP_AFTER_STEP:08d}.pt"
    records = read_metrics(run / "metrics.jsonl")
    assert records[-1] == {"event": "interrupted", "step": STOP_AFTER_STEP, "signal": sig.name}
    assert train("--resume", run, "--steps", 20) == 0
    assert_same_run(straight, run)
