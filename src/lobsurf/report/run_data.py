"""What a run folder holds right now, read without training anything: its config, the
metrics records written so far (training and validation), its chosen policy, its
checkpoints and walk-forward folds.

A run may still be training: the reader takes every complete line of metrics.jsonl (a line
being written is skipped) and says what is missing (no metrics yet, no checkpoint yet) in
``notes``, so the report shows what there is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lobsurf.eval.walk_forward import SUMMARY_NAME, WALK_FORWARD_DIR
from lobsurf.training.recovery.checkpoint import list_checkpoints
from lobsurf.training.recovery.run_folder import CONFIG_NAME, METRICS_NAME, require_run_folder
from lobsurf.training.selection.choice import read_choice


@dataclass
class RunData:
    """A run folder's contents for the report.

    Attributes:
        run_dir: the run folder.
        config_text: config.toml as written (empty when not yet written).
        start: the run_start record (config, data summary, versions, device), or None.
        metrics: the metrics records in step order (the latest of a step after a resume).
        events: the other records (resume, rollback, run_end, ...), in file order.
        checkpoints: checkpoint paths, oldest first.
        walk_forward: the walk-forward summary (lobsurf eval RUN --walk-forward), or None.
        notes: what is missing, one sentence each.
        validations: the validation records in step order (the latest of a step).
        chosen: RUN/chosen.json (lobsurf.training.selection.choice), or None (no validation yet).
    """

    run_dir: Path
    config_text: str
    start: dict[str, Any] | None
    metrics: list[dict[str, Any]]
    events: list[dict[str, Any]]
    checkpoints: list[Path]
    walk_forward: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    validations: list[dict[str, Any]] = field(default_factory=list)
    chosen: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return any(e.get("event") == "run_end" for e in self.events)

    def series(self, key: str, records: list[dict[str, Any]] | None = None
               ) -> tuple[list[int], list[float]]:
        """(steps, values) of one metric of ``records`` (default: the metrics records);
        records without it (or with null) are left out."""
        pairs = [(r["step"], r[key]) for r in (self.metrics if records is None else records)
                 if isinstance(r.get(key), (int, float)) and r.get("step") is not None]
        return [p[0] for p in pairs], [float(p[1]) for p in pairs]


def _read_lines(path: Path) -> list[dict[str, Any]]:
    # a run still training may be mid-line: keep every line that parses
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def load_run_data(run_dir: Path) -> RunData:
    """Read ``run_dir`` (a lobsurf training run) as it is now (see module doc)."""
    require_run_folder(run_dir)
    notes = []
    config_path = run_dir / CONFIG_NAME
    config_text = config_path.read_text() if config_path.is_file() else ""
    metrics_path = run_dir / METRICS_NAME
    records = _read_lines(metrics_path) if metrics_path.is_file() else []
    start = next((r for r in records if r.get("event") == "run_start"), None)
    by_step: dict[str, dict[int, dict[str, Any]]] = {"metrics": {}, "validation": {}}
    for r in records:
        if r.get("event") in by_step:
            # a resume rewrites steps after its checkpoint: keep the last
            by_step[r["event"]][r["step"]] = r
    metrics, validations = ([kind[s] for s in sorted(kind)] for kind in by_step.values())
    events = [r for r in records if r.get("event") not in ("metrics", "validation", "run_start")]
    checkpoints = list_checkpoints(run_dir)
    if not metrics:
        notes.append("no metrics record yet: the run has not reached its first log interval")
    if not checkpoints:
        notes.append("no checkpoint yet: training curves only (no held-out evaluation)")
    if not any(e.get("event") == "run_end" for e in events):
        notes.append("the run has not finished (no run_end record): the report shows it so far")
    wf_path = run_dir / WALK_FORWARD_DIR / SUMMARY_NAME
    walk_forward = json.loads(wf_path.read_text()) if wf_path.is_file() else None
    return RunData(run_dir=run_dir, config_text=config_text, start=start, metrics=metrics,
                   events=events, checkpoints=checkpoints, walk_forward=walk_forward,
                   notes=notes, validations=validations, chosen=read_choice(run_dir))
