"""Rollback after divergence: back to the last good checkpoint with a lower learning rate.

When the divergence guard (lobsurf.training.faults.guard) reports a NaN/Inf, ``roll_back`` restores
the newest complete checkpoint (or, before the first one, a freshly built state), sets the
learning rate to the one in use when the fault was found times ``train.rollback_lr_factor``
(in place: ``TensorAdam.lr`` is a 0-d tensor), cuts metrics.jsonl back to the checkpoint
(keeping earlier rollback records) and writes a ``rollback`` record. Past
``train.max_rollbacks`` it writes ``diverged`` and stops the run with ``TrainingDiverged``.
The count travels in each checkpoint, so a resumed run keeps its budget.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lobsurf.agent.state import TrainState
from lobsurf.errors import UserError
from lobsurf.training.config import TrainConfig
from lobsurf.training.recovery.checkpoint import newest_valid_checkpoint, restore_state_
from lobsurf.training.recovery.run_folder import MetricsLog

#: copies a checkpoint (path, payload) into a state, in place
Restore = Callable[[TrainState, Path, dict], object]


class TrainingDiverged(UserError):
    """NaN/Inf came back after ``train.max_rollbacks`` rollbacks."""


@dataclass
class GoodPoint:
    """Where a rollback returned to: a checkpoint, or the fresh start (checkpoint None)."""

    step: int
    metrics_bytes: int
    checkpoint: Path | None


def _last_good(state: TrainState, run_dir: Path, fresh_bytes: int | None,
               rebuild: Callable[[], TrainState], restore: Restore
               ) -> tuple[TrainState, GoodPoint]:
    found = newest_valid_checkpoint(run_dir)
    if found is not None:
        path, payload = found
        restore(state, path, payload)
        return state, GoodPoint(int(payload["step"]), int(payload["metrics_bytes"]), path)
    if fresh_bytes is not None:
        return rebuild(), GoodPoint(0, fresh_bytes, None)
    raise UserError(f"{run_dir}: no complete checkpoint to roll back to")


def roll_back(state: TrainState, tc: TrainConfig, run_dir: Path, log: MetricsLog,
              kept_bytes: int, fresh_bytes: int | None, bad: tuple[int, str], rollbacks: int,
              rebuild: Callable[[], TrainState], restore: Restore | None = None
              ) -> tuple[TrainState, GoodPoint]:
    """Roll back after the ``rollbacks``-th NaN/Inf, or stop past the budget.

    Args:
        state: the diverged state (restored in place, or replaced by ``rebuild()``).
        tc: the run's train settings (max_rollbacks, rollback_lr_factor).
        log: the run's metrics log.
        kept_bytes: end of the newest rollback record (kept when cutting the log back).
        fresh_bytes: metrics.jsonl size after run_start (None for a resumed run).
        bad: (step, quantity) from ``DivergenceGuard.read``.
        rollbacks: rollbacks so far, this one included.
        rebuild: builds a fresh state, for a fault before the first checkpoint.
        restore: copies (state, checkpoint path, payload) in; default the whole payload
            (a rank of a multi-process run reads its shard: lobsurf.training.recovery.rank_shards).

    Returns:
        The good state with the lowered learning rate, and where it stands.
    """
    bad_step, quantity = bad
    lr = state.optimizer.lr.clone()
    if rollbacks > tc.max_rollbacks:
        log.write({"event": "diverged", "step": bad_step, "quantity": quantity,
                   "lr": float(lr), "rollbacks": rollbacks - 1})
        raise TrainingDiverged(
            f"training diverged: {quantity} not finite at step {bad_step} after "
            f"{rollbacks - 1} rollbacks (lr now {float(lr):.3g}, train.max_rollbacks "
            f"{tc.max_rollbacks}); lower learner.lr or check the data")
    state, good = _last_good(state, run_dir, fresh_bytes, rebuild,
                             restore or (lambda st, _path, payload: restore_state_(st, payload)))
    # the lr in use at the fault, not the checkpoint's: two rollbacks to one checkpoint
    # lower it twice
    state.optimizer.lr.copy_(lr).mul_(tc.rollback_lr_factor)
    new_lr = float(state.optimizer.lr)
    # cut the records of the abandoned steps, keep those of earlier rollbacks
    log.truncate(max(good.metrics_bytes, kept_bytes))
    log.write({"event": "rollback", "step": bad_step, "quantity": quantity,
               "to_step": good.step, "lr": new_lr, "rollback": rollbacks,
               "max_rollbacks": tc.max_rollbacks})
    print(f"warning: {quantity} not finite at step {bad_step}: rolled back to step "
          f"{good.step} with lr {new_lr:.3g} (rollback {rollbacks} of {tc.max_rollbacks})",
          file=sys.stderr)
    return state, good
