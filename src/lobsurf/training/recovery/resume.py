"""``lobsurf train --resume RUN``: a run continued from its newest complete checkpoint,
however the earlier part ended (SIGKILL included).

The run rebuilds the same state from its config (lobsurf.training.run.state), then
``resume_from_checkpoint`` copies the newest checkpoint that verifies into it (a torn or
unmarked newer one is skipped with a warning: lobsurf.training.recovery.checkpoint; each
rank its own part: lobsurf.training.recovery.rank_shards), hands the model choice it holds
to the caller, cuts metrics.jsonl back to the size it had when that checkpoint was taken
(a line torn by the crash, or written after the checkpoint, goes) and writes a ``resume``
record. On CPU, N steps + resume + M steps equal N + M uninterrupted steps bit for bit.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lobsurf.agent.state import TrainState
from lobsurf.errors import UserError
from lobsurf.training.recovery.checkpoint import newest_valid_checkpoint
from lobsurf.training.recovery.rank_shards import restore_rank_
from lobsurf.training.recovery.run_folder import MetricsLog, NullLog


@dataclass(frozen=True)
class Resumed:
    """The checkpoint a run resumed from: its file, its step and the rollbacks so far."""

    checkpoint: Path
    step: int
    rollbacks: int


def resume_from_checkpoint(state: TrainState, run_dir: Path, log: MetricsLog | NullLog,
                           steps: int, rank: int,
                           restore_choice: Callable[[dict[str, Any]], None] | None = None
                           ) -> Resumed:
    """Copy the newest complete checkpoint into ``state`` (its model choice into
    ``restore_choice``) and cut metrics.jsonl back to it (module doc); ``steps``: the run's
    train.steps, recorded with the resume."""
    found = newest_valid_checkpoint(run_dir)
    if found is None:
        raise UserError(f"{run_dir}: no complete checkpoint to resume from; start it again "
                        "with --overwrite")
    path, payload = found
    source = restore_rank_(state, path, payload, rank)
    if source == "fresh":
        print(f"train: rank {rank} is new to {path.name}: a copy of rank 0's replay, a "
              "fresh simulator", file=sys.stderr)
    start = int(payload["step"])
    if restore_choice is not None:
        restore_choice(payload)
    log.truncate(int(payload["metrics_bytes"]))
    log.write({"event": "resume", "step": start, "checkpoint": path.name, "steps": steps})
    return Resumed(path, start, int(payload.get("rollbacks", 0)))
