"""The run folder: what a training run writes, and the rules for reusing a folder.

    RUN/
      run.json        marker: this folder is a lobsurf training run (format, created)
      config.toml     the resolved RunConfig (read back by --resume and lobsurf eval RUN)
      metrics.jsonl   one JSON object per line: run_start, then metrics records, resume
                      markers, run_end
      checkpoints/    step_NNNNNNNN.pt (lobsurf.train.checkpoint)

``prepare_run_folder`` refuses to write into a folder that holds anything but a run of its
own, and asks for ``--overwrite`` before replacing a run. ``MetricsLog`` appends whole lines
(one write each, flushed) and can cut the file back to a checkpoint's recorded size.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

from lobsurf.errors import UserError

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


def prepare_run_folder(path: Path, overwrite: bool) -> None:
    """Create a fresh run folder at ``path`` (see module doc for the refusal rules)."""
    if path.exists() and not path.is_dir():
        raise UserError(f"--out {path}: exists and is not a folder")
    if path.is_dir() and any(path.iterdir()):
        if not is_run_folder(path):
            raise UserError(f"--out {path}: folder is not empty and is not a lobsurf training "
                            "run; choose a new or empty folder")
        if not overwrite:
            raise UserError(f"--out {path}: a training run is already there; --resume {path} "
                            "continues it, --overwrite replaces it")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
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
    """Append-only JSONL writer of one run's metrics."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = open(path, "ab")

    def size(self) -> int:
        self._fh.flush()
        return self._fh.tell()

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(_finite(record), allow_nan=False) + "\n"
        self._fh.write(line.encode())
        self._fh.flush()

    def truncate(self, size: int) -> None:
        """Cut the file back to ``size`` bytes (the size a checkpoint recorded)."""
        self._fh.flush()
        self._fh.truncate(size)
        self._fh.seek(0, os.SEEK_END)

    def close(self) -> None:
        self._fh.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every record of a metrics.jsonl file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
