"""What the training loop reads from the device at a log step or a checkpoint, in one
transfer: the divergence guard's snapshot (lobsurf.training.faults.guard), and at a log step the
metric sums (then zeroed) and every controller; and what the loop does with it
(``read_out``): a NaN/Inf rolls the run back (lobsurf.training.faults.rollback), metrics
become a ``metrics`` record of metrics.jsonl and the progress bar's fields.

``Readout(...)`` only queues device ops: the values are stacked into one tensor and, on
CUDA, copied into pinned host memory without blocking, behind an event. ``finish`` waits
for that copy alone and turns the values into the guard's verdict, the logged means and the
controllers. The loop (one process) finishes a log step's readout after it has launched
the next step, so the GPU runs that step while the host checks the guard and writes the
record: a log step does not drain the GPU (benchmarks/RESULTS.md, Defaults decided by
measurement). A checkpoint's or a validation's readout is finished at once: the guard must
have passed before its state is written or swept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from lobsurf.agent.metrics import MetricSums
from lobsurf.agent.state import TrainState
from lobsurf.devices import HostCopy
from lobsurf.training.faults.guard import DivergenceGuard
from lobsurf.training.faults.rollback import roll_back
from lobsurf.training.run.prepare import Position, TrainingRun

#: entries of the guard's snapshot at the start of the stacked values
_GUARD_VALUES = 4


class Readout:
    """One step's device values on their way to the host (module docstring)."""

    def __init__(self, state: TrainState, guard: DivergenceGuard, step: int,
                 with_metrics: bool) -> None:
        self.step = step
        """The loop's step the values belong to."""
        self.controller_names = list(state.controllers.as_dict()) if with_metrics else []
        parts = [guard.snapshot(state)]
        if with_metrics:
            parts += [state.metrics.take_(),
                      torch.stack(list(state.controllers.as_dict().values()))]
        self._copy = HostCopy(torch.cat(parts))
        self.bad: tuple[int, str] | None = None
        """After ``finish``: (step, quantity) of the guard's first non-finite value, or None."""
        self.means: dict[str, float] | None = None
        """After ``finish``, with metrics: the logged means (MetricSums.means)."""
        self.controllers: dict[str, float] | None = None
        """After ``finish``, with metrics: every controller's value."""

    def finish(self) -> Readout:
        """Wait for the copy (only it: later work on the device goes on) and read it."""
        values = self._copy.wait().tolist()
        self.bad = DivergenceGuard.interpret(values[:_GUARD_VALUES])
        if self.controller_names:
            n = len(self.controller_names)
            self.means = MetricSums.means(values[_GUARD_VALUES:-n])
            self.controllers = dict(zip(self.controller_names, values[-n:]))
        return self

    def record(self, wall_s: float, interval_s: float, interval_steps: int, envs: int
               ) -> dict[str, Any]:
        """The metrics record of a finished readout with metrics (docs/training.md)."""
        ctl = self.controllers
        steps_per_s = interval_steps / interval_s if interval_s > 0 else float("nan")
        return {"event": "metrics", "step": self.step, "wall_s": round(wall_s, 3),
                "steps_per_s": steps_per_s, "env_steps_per_s": steps_per_s * envs,
                **self.means,
                "action_entropy": ctl["action_entropy"], "v_min": ctl["v_min"],
                "v_max": ctl["v_max"], "reward_scale": ctl["reward_scale"],
                "alpha": ctl["sac_alpha"], "tau": ctl["distill_tau"], "beta": ctl["kl_beta"],
                "gate_threshold": ctl["gate_threshold"], "controllers": ctl}


@dataclass
class Due:
    """What a step is followed by (lobsurf.training.run.loop.due_at)."""

    log: bool
    """a metrics record (every train.log_every steps, and the last)."""
    save: bool
    """a checkpoint (every train.checkpoint_every steps, the last, and a stop)."""
    validate: bool
    """a validation (every train.validate_every steps with a validation slice, the last)."""
    stopping: bool
    """SIGINT or SIGTERM arrived (on any rank) before the last step: stop after this one."""


@dataclass
class MetricsRecords:
    """The metrics records' bookkeeping: the log step's readout finished a step late, the
    interval each record measures, the newest record and the progress bar's fields."""

    start: int
    """the step the loop started from."""
    t0: float = field(default_factory=time.perf_counter)
    """when the loop started (the records' ``wall_s``)."""
    t_log: float = field(init=False)
    s_log: int = field(init=False)
    """the time and the step the next record's interval starts from."""
    pending: Readout | None = None
    last: dict[str, Any] | None = None
    bar: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.t_log, self.s_log = self.t0, self.start

    def restart(self, step: int) -> None:
        """After a rollback: nothing pending, the next interval starts at ``step``."""
        self.pending = None
        self.t_log, self.s_log = time.perf_counter(), step

    def write(self, readout: Readout, log, envs: int) -> None:
        """The record of a finished readout with metrics, written and shown on the bar."""
        now = time.perf_counter()
        self.last = readout.record(now - self.t0, now - self.t_log, readout.step - self.s_log,
                                   envs)
        log.write(self.last)
        self.t_log, self.s_log = now, readout.step
        self.bar.update(_bar_fields(self.last))


def read_out(run: TrainingRun, at: Position, due: Due, records: MetricsRecords,
             advance) -> bool:
    """The readouts due after step ``at.step``: the previous log step's (taken without a
    sync, finished now that this step is launched), then this step's; each one's guard
    verdict, then its metrics record. Returns False when a NaN/Inf rolled the run back."""
    ready = [] if records.pending is None else [records.pending]
    records.pending = None
    if due.log or due.save or due.validate:
        run.writer.check()  # a failed background write stops the run here
        if due.log:
            run.coll.metric_sums_(run.state.metrics)  # rank 0 logs every rank's steps
        taken = Readout(run.state, run.guard, at.step, with_metrics=due.log)
        if due.log and not (due.save or due.validate) and not run.coll.active:
            records.pending = taken
        else:
            ready.append(taken)  # a checkpoint or a validation needs the guard's verdict first
    for readout in ready:
        bad = readout.finish().bad
        if run.coll.any_(bad is not None, run.device) and bad is None:
            bad = (readout.step, "value on another rank")
        if bad is not None:
            _roll_back(run, at, bad)
            records.restart(at.step)
            return False
        if readout.means is not None:
            records.write(readout, run.log, run.cfg.train.envs * run.coll.world_size)
            advance(0, **records.bar)
    return True


def _roll_back(run: TrainingRun, at: Position, bad: tuple[int, str]) -> None:
    """Back to the newest good checkpoint (lobsurf.training.faults.rollback), or stop past
    train.max_rollbacks."""
    run.writer.wait()  # the newest checkpoint complete on disk first
    at.rollbacks += 1
    run.state, good = roll_back(run.state, run.cfg.train, run.run_dir, run.log, at.kept_bytes,
                                at.fresh_bytes, bad, at.rollbacks, rebuild=run.rebuild,
                                restore=run.restore)
    at.kept_bytes = run.log.size()
    run.guard.reset_()
    run.graphed = None  # a rebuilt state: capture again
    at.step, at.checkpoint = good.step, good.checkpoint or at.checkpoint


def _bar_fields(record: dict[str, Any]) -> dict[str, str]:
    def fmt(v: Any, spec: str) -> str:
        return "-" if v is None or v != v else format(v, spec)

    return {"steps/s": fmt(record["steps_per_s"], ".1f"), "win": fmt(record["win_rate"], ".2f"),
            "hold": fmt(record["hold_fraction"], ".2f"), "pnl": fmt(record["net_pnl"], ",.0f")}
