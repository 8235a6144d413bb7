"""A full disk or a read-only run folder: one clear line naming the file, and the previous
checkpoint intact, loadable and resumable."""

from __future__ import annotations

import errno
import os

import pytest
import torch

import lobsurf.training.recovery.checkpoint as checkpoint
from lobsurf.errors import UserError
from lobsurf.training.recovery.checkpoint import list_checkpoints, load_payload
from lobsurf.training.recovery.run_folder import MetricsLog
from tests.training.test_reliability_crash import assert_same_run
from tests.training.test_train_command import train


def _fail_second_save(monkeypatch):
    """The second checkpoint's file takes half of its first write, then the disk is full."""
    real, files = checkpoint._HashingWriter.write, []

    def write(self, data):
        if not files or files[-1] is not self:
            files.append(self)  # a new checkpoint file (markers are written directly)
        if len(files) == 2:
            real(self, data[:len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, data)
    monkeypatch.setattr(checkpoint._HashingWriter, "write", write)
    return "step_00000020.pt"


class _FullDisk:
    """A file whose writes fail with ENOSPC (everything else passes through)."""

    def __init__(self, fh) -> None:
        self.fh = fh

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self.fh, name)


def _fail_metrics_after_first_checkpoint(monkeypatch):
    real_write, real_save, state = MetricsLog.write, checkpoint.save_checkpoint, {"full": False}

    def write(self, record):
        if state["full"] and not isinstance(self._fh, _FullDisk):
            self._fh = _FullDisk(self._fh)
        real_write(self, record)

    def save(*args, **kwargs):
        path = real_save(*args, **kwargs)
        state["full"] = True
        return path
    monkeypatch.setattr(MetricsLog, "write", write)
    monkeypatch.setattr("lobsurf.training.run.loop.save_checkpoint", save)
    return "metrics.jsonl"


def _read_only_open(monkeypatch):
    """The checkpoint folder turns read-only after the first checkpoint (EROFS)."""
    real, calls = open, {"n": 0}

    def fake_open(path, mode="r", *args, **kwargs):
        if "w" in mode:
            calls["n"] += 1
            if calls["n"] > 2:  # the first checkpoint and its marker went through
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, mode, *args, **kwargs)
    monkeypatch.setattr(checkpoint, "open", fake_open, raising=False)
    return "step_00000020.pt"


@pytest.mark.parametrize("fault", [_fail_second_save, _fail_metrics_after_first_checkpoint,
                                   _read_only_open], ids=["ENOSPC-checkpoint",
                                                          "ENOSPC-metrics", "EROFS-checkpoint"])
def test_a_failing_write_is_one_line_and_the_previous_checkpoint_survives(
        fault, tiny_store, tiny_toml, tmp_path, monkeypatch, capsys):
    straight, run = tmp_path / "straight", tmp_path / "run"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", straight) == 0
    with monkeypatch.context() as mp:
        named = fault(mp)
        capsys.readouterr()
        assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("lobsurf train: error: cannot write ")
    assert named in errors[0]
    assert [p.name for p in list_checkpoints(run)] == ["step_00000010.pt"]
    assert load_payload(list_checkpoints(run)[0])["step"] == 10
    assert not list(run.glob("checkpoints/.*.tmp"))  # no temporary file left behind
    assert train("--resume", run) == 0
    assert_same_run(straight, run)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_checkpoint_folder(tiny_store, tiny_toml, tmp_path, capsys):
    run = tmp_path / "run"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run,
                 "--steps", 10) == 0
    folder = run / "checkpoints"
    folder.chmod(0o555)
    try:
        capsys.readouterr()
        assert train("--resume", run, "--steps", 20) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "cannot write" in err and "step_00000020.pt" in err
    finally:
        folder.chmod(0o755)
    assert load_payload(list_checkpoints(run)[-1])["step"] == 10


def test_background_writer_returns_at_once_runs_one_write_at_a_time_and_raises_later():
    import threading
    import time

    from lobsurf.training.recovery.checkpoint import CheckpointWriter

    release, order = threading.Event(), []

    def slow(name):
        def write():
            release.wait(5)
            order.append(name)
        return write

    writer = CheckpointWriter()
    t0 = time.perf_counter()
    writer.submit(slow("first"))
    assert time.perf_counter() - t0 < 1.0 and order == []  # the loop did not wait
    writer.check()  # still running: no wait, no error
    release.set()
    writer.submit(slow("second"))  # waits for the first
    assert order[0] == "first"
    writer.wait()
    assert order == ["first", "second"]

    def failing():
        raise UserError("cannot write step_00000020.pt: No space left on device")

    writer.submit(failing)
    with pytest.raises(UserError, match="No space left"):
        writer.wait()
    writer.wait()  # raised once


def test_background_checkpoints_serialise_on_the_loops_thread(tiny_store, tiny_toml, tmp_path,
                                                              monkeypatch):
    # torch.save's pickler holds the GIL: on the writer thread it would stall the loop at
    # every graph launch (checkpoint.py's docstring). The loop pickles only the header (no
    # tensor in it: the tensors travel packed, raw); only the file work goes to the writer:
    # the metrics file's fsync first (the checkpoint records its size), then the checkpoint.
    import threading

    from lobsurf.training.recovery.checkpoint_file import map_tensors

    from lobsurf.training.recovery.run_folder import MetricsLog

    real_save, real_write = torch.save, checkpoint._HashingWriter.write
    real_sync, events = MetricsLog.sync, []

    def save(obj, *args, **kwargs):
        tensors = []
        map_tensors(obj, tensors.append)
        events.append(("save", threading.current_thread(), len(tensors)))
        return real_save(obj, *args, **kwargs)

    def write(self, data):
        if not events or events[-1][0] != "write":
            events.append(("write", threading.current_thread()))
        return real_write(self, data)

    def sync(self):
        events.append(("sync", threading.current_thread()))
        return real_sync(self)
    monkeypatch.setattr(checkpoint.torch, "save", save)
    monkeypatch.setattr(checkpoint._HashingWriter, "write", write)
    monkeypatch.setattr(MetricsLog, "sync", sync)
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", tmp_path / "r") == 0
    main = threading.main_thread()
    saves = [e for e in events if e[0] == "save"]
    assert saves and set(saves) == {("save", main, 0)}
    # every checkpoint file: a save on the loop's thread, then on the writer's thread the
    # metrics fsync, then the file
    files = [i for i, e in enumerate(events) if e[0] == "write"]
    assert files
    for i in files:
        assert events[i - 1][0] == "sync" and events[i - 1][1] is events[i][1] is not main
        assert events[i - 2] == ("save", main, 0)
