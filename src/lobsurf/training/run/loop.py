"""``train(cfg, run_dir, data, device)``: a training run's story, in the order a reader would
tell it; each part lives in the room it belongs to.

1. prepare (lobsurf.training.run.prepare): fees, state (lobsurf.training.run.state), guard,
   checkpoint writer, validation and model choice, metrics log;
2. resume (``--resume``: lobsurf.training.recovery.resume): the newest complete checkpoint
   copied into the fresh state, metrics.jsonl cut back to it; on CPU, N steps + resume + M
   steps equal N + M uninterrupted steps bit for bit, however the first part ended (SIGKILL
   included);
3. loop, each step (lobsurf.training.run.step: one CUDA graph replayed where it can)
   followed by what is due (``due_at``):
   - log: the readouts (lobsurf.training.run.readout: the guard's state, metric sums and
     controllers in one device-to-host copy, a log step's finished a step later in one
     process); a NaN/Inf rolls the run back to its last good checkpoint with a lower
     learning rate (lobsurf.training.faults.rollback), at most ``train.max_rollbacks`` times;
   - validate, with a validation slice (``data.validation_fraction``): sweep the greedy
     agent and keep the best checkpoint or hold (lobsurf.training.selection);
     ``train.patience`` ends the run early, with a final checkpoint;
   - checkpoint (lobsurf.training.recovery.checkpoint; the metrics file's size and the
     unlogged metric sums go with it, so the resumed metrics equal an uninterrupted run's);
   SIGINT and SIGTERM stop the run after the current step with a final checkpoint
   (lobsurf.training.faults.interrupts);
4. finish: the ``run_end`` record and the ``RunResult``.

Several processes (torchrun, ``lobsurf train --gpus N``; docs/distributed.md): each rank
builds its own state with rank-offset seeds, ``Collective`` averages gradients and
controllers inside the step, rank 0 writes metrics.jsonl and the main checkpoint, every
other rank its shard (lobsurf.training.recovery.rank_shards).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lobsurf.progress import step_progress
from lobsurf.training.config import RunConfig
from lobsurf.training.data import TrainingData
from lobsurf.training.distributed.collective import Collective, check_identical
from lobsurf.training.faults.interrupts import StopOnSignal
from lobsurf.training.recovery import pause_points
from lobsurf.training.recovery.checkpoint import save_checkpoint
from lobsurf.training.recovery.rank_shards import save_all_ranks
from lobsurf.training.run.prepare import Position, TrainingRun, prepare_run, starting_point
from lobsurf.training.run.readout import Due, MetricsRecords, read_out
from lobsurf.training.run.step import take_step


@dataclass
class RunResult:
    """What ``train`` returns: the run folder, the last metrics record, the step reached,
    the newest checkpoint, the signal that stopped the run early (None: it finished), the
    chosen policy (RUN/chosen.json's content; None without validation) and why training
    ended before train.steps (None: it did not)."""

    run_dir: Path
    last_metrics: dict[str, Any] | None
    step: int
    checkpoint: Path
    interrupted: str | None = None
    chosen: dict[str, Any] | None = None
    stopped_early: str | None = None


def train(cfg: RunConfig, run_dir: Path, data: TrainingData, device: torch.device | str,
          resume: bool = False, pretrained: dict[str, torch.Tensor] | None = None,
          progress: bool = True, init_note: str = "", collective: Collective | None = None
          ) -> RunResult:
    """Run (or continue) training in ``run_dir`` up to ``cfg.train.steps`` total steps
    (``collective``: this process's rank of a multi-process run; None: one process)."""
    run = prepare_run(cfg, run_dir, data, device, pretrained, init_note,
                      collective or Collective.local(), resume)
    try:
        at = starting_point(run, resume)
        records, stopping = MetricsRecords(at.start), False
        with (StopOnSignal() as stop,
              step_progress(at.total, "train", progress and run.coll.is_main) as advance):
            advance(at.start)
            while at.step < at.total:
                take_step(run, at.step)
                at.step += 1
                pause_points.pause_point("step")
                due = due_at(run, at, stop)
                stopping = due.stopping
                if not read_out(run, at, due, records, advance):  # rolled back
                    if stopping:
                        break
                    continue
                if due.validate:
                    at.ended_early = validate(run, at.step, records, advance)
                if stopping:
                    run.log.write({"event": "interrupted", "step": at.step,
                                   "signal": stop.requested.name})
                if due.save or at.ended_early:
                    checkpoint(run, at)
                advance(1)
                if stopping or at.ended_early:
                    break
            interrupted = stop.requested.name if stopping else None
        return finish(run, at, records, interrupted)
    finally:
        run.close()


def due_at(run: TrainingRun, at: Position, stop: StopOnSignal) -> Due:
    """What follows step ``at.step``; before a checkpoint of several processes, the check
    that the ranks hold one model (docs/distributed.md)."""
    tc, step, total = run.cfg.train, at.step, at.total
    # a signal during the last step changes nothing: the run ends normally
    stopping = run.coll.any_(stop.requested is not None, run.device) and step < total
    save = step % tc.checkpoint_every == 0 or step == total or stopping
    if run.sync is not None and save:
        check_identical(run.coll, list(run.state.online.parameters()), run.state.controllers,
                        step)
    return Due(log=step % tc.log_every == 0 or step == total, save=save,
               validate=run.selection is not None and run.selection.due(step, total),
               stopping=stopping)


def validate(run: TrainingRun, step: int, records: MetricsRecords, advance) -> bool:
    """Sweep the greedy agent, keep the best checkpoint or hold (lobsurf.training.selection);
    returns whether train.patience ran out (on rank 0: every rank shares its verdict)."""
    ended = run.coll.any_(run.selection.validate(run.state, step, run.log), run.device)
    records.bar.update(run.selection.bar_fields())
    advance(0, **records.bar)
    return ended


def checkpoint(run: TrainingRun, at: Position) -> None:
    """Step ``at.step``'s checkpoint, every rank's part (the metrics file's size, the
    rollbacks and the model choice go with it)."""
    extra = {"rollbacks": at.rollbacks, "world_size": run.coll.world_size}
    if run.selection is not None:
        extra["model_choice"] = run.selection.state_dict()
    at.checkpoint = save_all_ranks(run.run_dir, run.state, at.step, run.coll, functools.partial(
        save_checkpoint, run.run_dir, run.state, at.step, run.config_dict,
        run.log.flushed_size(), run.meta, run.cfg.train.keep_checkpoints, extra=extra,
        writer=run.writer, before_write=run.log.sync))


def finish(run: TrainingRun, at: Position, records: MetricsRecords,
           interrupted: str | None) -> RunResult:
    """The last checkpoint on disk, the ``run_end`` record (unless a signal stopped the run,
    or it had nothing left to do) and the run's result."""
    run.writer.wait()
    choice = run.selection.choice if run.selection is not None else None
    chosen = choice.info() if choice is not None else None
    early = choice.stop_reason() if choice is not None and choice.stopped else None
    if interrupted is None and (at.start < at.total or at.ended_early):
        run.log.write({"event": "run_end", "step": at.step,
                       "wall_s": round(time.perf_counter() - records.t0, 3),
                       "stopped": "patience" if at.ended_early else "steps",
                       **({"reason": early} if at.ended_early else {}),
                       **({"chosen": chosen} if chosen is not None else {})})
    return RunResult(run_dir=run.run_dir, last_metrics=records.last,
                     step=max(at.step, at.start), checkpoint=at.checkpoint,
                     interrupted=interrupted, chosen=chosen, stopped_early=early)
