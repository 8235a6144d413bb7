"""The run folder: what a training run writes, and the rules for reusing a folder.

    RUN/
      run.json        marker: this folder is a lobsurf training run (format, created)
      config.toml     the resolved RunConfig (read back by --resume and lobsurf eval RUN)
      metrics.jsonl   one JSON object per line: run_start, then metrics records, resume
                      markers, run_end
      checkpoints/    step_NNNNNNNN.pt (lobsurf.training.recovery.checkpoint)

``prepare_run_folder`` refuses to write into a folder that holds anything but a run of its
own, and asks for ``--overwrite`` before replacing a run. ``MetricsLog`` appends whole lines
(one write each, flushed) and can cut the file back to a checkpoint's recorded size: a line
torn by a crash, or written after the checkpoint a resume starts from, is cut away, so
metrics.jsonl never holds a torn or duplicated record. A failing write (disk full,
read-only folder) is a one-line ``UserError`` naming the file.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lobsurf.errors import UserError
from lobsurf.training.recovery import pause_points

RUN_MARKER = "run.json"
RUN_FORMAT = "lobsurf-train-run"
CONFIG_NAME = "config.toml"
METRICS_NAME = "metrics.jsonl"


def is_run_folder(path: Path) -> bool:
    marker = path / RUN_MARKER
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()).get("format") == RUN_FORMAT
    except (OSError, ValueError):
        return False


def fresh_folder(path: Path, overwrite: bool, ours: Callable[[Path], bool] = is_run_folder
                 ) -> None:
    """An empty folder at ``path``, made or emptied: never a folder that holds anything but
    what ``ours`` recognises (a lobsurf run), and an existing one only with ``overwrite``."""
    if path.exists() and not path.is_dir():
        raise UserError(f"--out {path}: exists and is not a folder")
    if path.is_dir() and any(path.iterdir()):
        if not ours(path):
            raise UserError(f"--out {path}: folder is not empty and is not a lobsurf training "
                            "run; choose a new or empty folder")
        if not overwrite:
            raise UserError(f"--out {path}: a training run is already there; --resume {path} "
                            "continues it, --overwrite replaces it")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)


def prepare_run_folder(path: Path, overwrite: bool) -> None:
    """Create a fresh run folder at ``path`` (see module doc for the refusal rules)."""
    fresh_folder(path, overwrite)
    (path / RUN_MARKER).write_text(json.dumps({"format": RUN_FORMAT,
                                               "created": time.strftime("%Y-%m-%dT%H:%M:%S")}))


def require_run_folder(path: Path) -> None:
    if not path.is_dir():
        raise UserError(f"{path}: no such run folder")
    if not is_run_folder(path):
        raise UserError(f"{path}: not a lobsurf training run (no {RUN_MARKER})")


def _finite(value: Any) -> Any:
    # JSON has no NaN/Inf: write null (an undefined metric, e.g. win rate with no trades).
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


class MetricsLog:
    """Append-only JSONL writer of one run's metrics.

    ``mirror`` (e.g. ``lobsurf.telemetry.tensorboard.TensorBoardLog``), when given, gets
    every record too, after it is on disk, and is closed with the log.
    """

    def __init__(self, path: Path, mirror: Any = None) -> None:
        self.path = path
        self.mirror = mirror
        try:
            self._fh = open(path, "ab")
        except OSError as exc:
            raise self._error(exc) from exc

    def _error(self, exc: OSError) -> UserError:
        return UserError(f"cannot write {self.path}: {exc.strerror or exc} (disk full or "
                         "read-only?)")

    def size(self) -> int:
        """Bytes written so far, flushed and synced to disk."""
        size = self.flushed_size()
        self.sync()
        return size

    def flushed_size(self) -> int:
        """Bytes written so far, handed to the OS but not yet synced (``sync``): a
        checkpoint records this and syncs on its writer's thread, before its own file."""
        try:
            self._fh.flush()
        except OSError as exc:
            raise self._error(exc) from exc
        return self._fh.tell()

    def sync(self) -> None:
        """Make every byte flushed so far durable (safe beside ``write`` on another
        thread: it syncs the file descriptor, not the buffer)."""
        try:
            os.fsync(self._fh.fileno())
        except OSError as exc:
            raise self._error(exc) from exc

    def write(self, record: dict[str, Any]) -> None:
        data = (json.dumps(_finite(record), allow_nan=False) + "\n").encode()
        half = len(data) // 2
        try:
            self._fh.write(data[:half])
            if pause_points.ENV_PAUSE in os.environ:  # a test's kill lands mid-line here
                self._fh.flush()
                pause_points.pause_point("metrics_flush")
            self._fh.write(data[half:])
            self._fh.flush()
        except OSError as exc:
            raise self._error(exc) from exc
        if self.mirror is not None:
            self.mirror.write(record)

    def truncate(self, size: int) -> None:
        """Cut the file back to ``size`` bytes (the size a checkpoint recorded)."""
        self._fh.flush()
        have = self._fh.seek(0, os.SEEK_END)
        if have < size:
            raise UserError(f"{self.path}: {have} bytes, shorter than the {size} its "
                            "checkpoint recorded (file replaced or cut?)")
        self._fh.truncate(size)
        self._fh.seek(0, os.SEEK_END)

    def close(self) -> None:
        if self.mirror is not None:
            self.mirror.close()
        try:
            self._fh.close()
        except OSError:
            pass  # the write that failed already raised; closing must not mask it


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every record of a metrics.jsonl file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class NullLog:
    """The metrics log of a rank other than 0 in a multi-process run: rank 0 alone writes
    metrics.jsonl (with the means over every rank), the others write nothing."""

    def size(self) -> int:
        return 0

    def flushed_size(self) -> int:
        return 0

    def sync(self) -> None:
        pass

    def write(self, record: dict[str, Any]) -> None:
        pass

    def truncate(self, size: int) -> None:
        pass

    def close(self) -> None:
        pass
