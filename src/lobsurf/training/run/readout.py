"""What the training loop reads from the device at a log step or a checkpoint, in one
transfer: the divergence guard's snapshot (lobsurf.training.faults.guard), and at a log step the
metric sums (then zeroed) and every controller.

``Readout(...)`` only queues device ops: the values are stacked into one tensor and, on
CUDA, copied into pinned host memory without blocking, behind an event. ``finish`` waits
for that copy alone and turns the values into the guard's verdict, the logged means and the
controllers. The loop (one process) finishes a log step's readout after it has launched
the next step, so the GPU runs that step while the host checks the guard and writes the
record: a log step does not drain the GPU (benchmarks/RESULTS.md, Defaults decided by measurement). A checkpoint's readout is finished at once: the guard must have passed
before its state is written.
"""

from __future__ import annotations

from typing import Any

import torch

from lobsurf.agent.metrics import MetricSums
from lobsurf.agent.state import TrainState
from lobsurf.devices import HostCopy
from lobsurf.training.faults.guard import DivergenceGuard

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
