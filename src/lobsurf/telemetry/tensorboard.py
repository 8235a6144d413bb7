"""TensorBoard mirror of metrics.jsonl: each metrics record becomes scalars under namespaced
tags (CleanRL style: ``train/l_q``, ``control/alpha``, ``time/steps_per_s``, ``eval/...``),
the run_start config and the resume/rollback/run_end events become text.

metrics.jsonl stays the record of a run (docs/metrics.md defines every key); this is a
view of it for ``tensorboard --logdir RUN/tb``. TensorBoard is an optional dependency
(``pip install 'lobsurf[tensorboard]'``); without it ``TensorBoardLog`` raises a UserError
that says so.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

from lobsurf.errors import UserError

#: the folder of a run that holds its TensorBoard event files
TB_DIR = "tb"
#: metrics keys that measure time and speed → time/
TIME_KEYS = frozenset({"wall_s", "steps_per_s", "env_steps_per_s"})
#: controller values (lobsurf.agent.controllers) → control/
CONTROL_KEYS = frozenset({"alpha", "tau", "beta", "gate_threshold", "v_min", "v_max",
                          "reward_scale", "action_entropy"})
#: keys that are the record's coordinates, not values
SKIPPED_KEYS = frozenset({"event", "step"})
#: record events mirrored as scalars, and the tag namespace of their other keys
SCALAR_EVENTS = {"metrics": "train", "eval": "eval", "validation": "validation"}
INSTALL_HINT = "pip install 'lobsurf[tensorboard]' (or pip install tensorboard)"


def tag_for(key: str, namespace: str = "train") -> str:
    """The TensorBoard tag of a metrics.jsonl key (a key already namespaced is kept)."""
    if "/" in key:
        return key
    if key in TIME_KEYS:
        return f"time/{key}"
    if key in CONTROL_KEYS and namespace == "train":
        return f"control/{key}"
    return f"{namespace}/{key}"


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """tag → value of a record's numeric fields (nested dicts, text, null and bool skipped;
    the nested ``controllers`` dict repeats the top-level controller values)."""
    namespace = SCALAR_EVENTS.get(record.get("event", "metrics"), "train")
    out = {}
    for key, value in record.items():
        if key in SKIPPED_KEYS or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        out[tag_for(key, namespace)] = float(value)
    return out


def _summary_writer(log_dir: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:  # torch's own module raises ImportError without tensorboard
        raise UserError(f"TensorBoard logging needs the tensorboard package: {INSTALL_HINT}") from exc
    return SummaryWriter(log_dir=str(log_dir))


class TensorBoardLog:
    """Writes metrics records (the dicts MetricsLog writes) to TensorBoard event files.

    Args:
        log_dir: folder of the event files (a run's ``RUN/tb``).
    """

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = Path(log_dir)
        self._writer = _summary_writer(self.log_dir)
        self._events = 0

    def write(self, record: dict[str, Any]) -> None:
        """Mirror one record: scalars at its step, or the config / an event as text."""
        event = record.get("event", "metrics")
        if event in SCALAR_EVENTS:
            step = int(record["step"])
            for tag, value in scalars(record).items():
                if math.isfinite(value):  # an undefined metric (null in JSON) is left out
                    self._writer.add_scalar(tag, value, step)
        elif event == "run_start":
            config = json.dumps(record.get("config", {}), indent=1)
            self._writer.add_text("run/config", f"```\n{config}\n```", 0)
            facts = {k: record.get(k) for k in ("device", "versions", "data", "init")}
            self._writer.add_text("run/start", f"```\n{json.dumps(facts, indent=1)}\n```", 0)
        else:  # resume, rollback, run_end, ...: one text entry each, in order
            self._writer.add_text("run/events", f"`{json.dumps(record)}`", self._events)
            self._events += 1

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def mirror_metrics_file(run_dir: Path) -> Path:
    """Convert RUN/metrics.jsonl into fresh event files in RUN/tb (replacing what was there).

    Returns:
        The RUN/tb folder (``tensorboard --logdir`` it).
    """
    from lobsurf.training.recovery.run_folder import METRICS_NAME, require_run_folder

    run_dir = Path(run_dir)
    require_run_folder(run_dir)
    metrics = run_dir / METRICS_NAME
    if not metrics.is_file():
        raise UserError(f"{run_dir}: no {METRICS_NAME} yet")
    out = run_dir / TB_DIR
    # written beside the old files first: a missing package or a bad line deletes nothing
    log = TensorBoardLog(out / "_new")
    try:
        for line in metrics.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line still being written by a training run
            log.write(record)
    finally:
        log.close()
    for old in out.iterdir():  # a re-mirror replaces the old event files, never adds to them
        if old.name != "_new":
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    for f in (out / "_new").iterdir():
        f.rename(out / f.name)
    (out / "_new").rmdir()
    return out
