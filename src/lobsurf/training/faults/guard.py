"""Divergence guard: NaN or Inf in a loss, a gradient, a parameter or a controller, found on
the device without a host sync per step.

``check_`` runs after every step and is device ops only: it reduces each quantity to one
"all finite" flag and, the first time one is false, stores the step and the quantity's code
in two 0-d device tensors. The loop reads them (``read``: one small transfer) only where it
syncs anyway, at log intervals and before a checkpoint, and then rolls back (lobsurf.train.
loop). Codes are in causal order, so when a NaN loss has already spread to the gradients
and parameters within the same step, the loss is the one reported.

Inside the graphed step the check is a few kernels: one multi-tensor max |x| over the online
network's gradients and parameters together (two tensors: the flat buffers of
lobsurf.agent.flat), and the arithmetic (compiled by train.compile
into one kernel that also writes the guard's two tensors). The target network is checked
where the guard is read, not per step: it changes only by Polyak averaging of (or a copy
from) the online parameters, which keeps finite tensors finite, so a first bad step shows
in the online network. Its check at a read is the safety net for anything else that writes
it, named "parameter" at that read's step.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from lobsurf.agent.state import TrainState

#: what is checked, in causal order (a loss feeds the gradients, they the parameters)
QUANTITIES = ("loss", "gradient", "parameter", "controller")
#: the metric sums of the learner's losses (a non-finite loss makes its running sum so)
LOSS_SUMS = ("loss_q", "loss_pi", "loss_value", "loss_frd", "loss_aux")
_NONE = -1


def _max_abs(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    # max |x| per tensor is NaN or Inf exactly when the tensor holds one (no overflow)
    return list(torch._foreach_norm(tensors, math.inf)) if tensors else []


def guard_values(losses: list[torch.Tensor], grad_max: list[torch.Tensor],
                 param_max: list[torch.Tensor], controllers: list[torch.Tensor],
                 first_bad_step: torch.Tensor, code: torch.Tensor, step_count: torch.Tensor
                 ) -> None:
    """Update the guard's state (first bad step, its code) with one check, in place:
    ``train.compile`` makes it one kernel that writes both tensors itself
    (``lobsurf.training.speed.compile.compile_guard_``), where its ops inside the graphed step were
    some twenty small ones and a copy.

    Args:
        losses: the learner's 0-d loss sums. grad_max, param_max: max |x| of each gradient
            and parameter (empty: none, or not checked here). controllers: 0-d controllers.
        first_bad_step, code: the guard's state, updated. step_count: the step's.
    """
    everything_fine = torch.ones((), dtype=torch.bool, device=first_bad_step.device)
    ok = [torch.isfinite(torch.stack(values)).all() if values else everything_fine
          for values in (losses, grad_max, param_max, controllers)]
    bad = ~torch.stack(ok)
    new = bad.any() & (first_bad_step == _NONE)
    # argmax of a bool vector: the first True, i.e. the earliest quantity in causal order
    new_code = torch.where(new, bad.to(torch.int64).argmax(), code)
    first_bad_step.copy_(torch.where(new, step_count, first_bad_step))
    code.copy_(new_code)


class DivergenceGuard:
    """First non-finite step and quantity of a run segment, kept on the device."""

    def __init__(self, device: torch.device | str) -> None:
        self.first_bad_step = torch.full((), _NONE, dtype=torch.int64, device=device)
        self.code = torch.full((), _NONE, dtype=torch.int64, device=device)
        self.values: Callable[..., None] = guard_values
        """``guard_values`` or a compiled copy of it."""

    def check_(self, state: TrainState) -> None:
        """Record the first non-finite quantity of this step, if it is the first (device
        ops; the target network waits for ``read``, module docstring)."""
        flat = state.optimizer.flat  # the flat buffers hold every gradient and parameter
        grads, params = [flat.grad], [flat.data]
        maxes = _max_abs(grads + params)
        self.values([getattr(state.metrics, name) for name in LOSS_SUMS], maxes[:len(grads)],
                    maxes[len(grads):], list(state.controllers.as_dict().values()),
                    self.first_bad_step, self.code, state.step_count)

    def snapshot(self, state: TrainState | None = None) -> torch.Tensor:
        """[first bad step, its code, the target network all finite (1/0), the step count]
        as one float64 device tensor (device ops: a readout copies it with the metrics,
        lobsurf.training.run.readout; ``interpret`` reads the host copy). Without ``state`` the
        target network counts as finite."""
        fine = torch.ones((), dtype=torch.float64, device=self.code.device)
        if state is None:
            return torch.stack((self.first_bad_step.double(), self.code.double(), fine, -fine))
        finite = torch.isfinite(torch.stack(
            _max_abs([p.detach() for p in state.target.parameters()]))).all()
        return torch.stack((self.first_bad_step.double(), self.code.double(), finite.double(),
                            state.step_count.double()))

    @staticmethod
    def interpret(values: list[float]) -> tuple[int, str] | None:
        """(step, quantity) of the first non-finite value from a ``snapshot``'s host values,
        or None; a non-finite target network is a "parameter" at the snapshot's step."""
        first, code, target_finite, count = (int(v) for v in values)
        if first != _NONE:
            return first, QUANTITIES[code]
        return None if target_finite else (count, "parameter")

    def read(self, state: TrainState | None = None) -> tuple[int, str] | None:
        """(step, quantity) of the first non-finite value since the last reset, or None
        (a host sync: call it only at log intervals and checkpoints). With ``state``, its
        target network is checked too (module docstring)."""
        return self.interpret(self.snapshot(state).tolist())

    def reset_(self) -> None:
        self.first_bad_step.fill_(_NONE)
        self.code.fill_(_NONE)
