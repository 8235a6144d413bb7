"""Divergence guard: NaN or Inf in a loss, a gradient, a parameter or a controller, found on
the device without a host sync per step.

``check_`` runs after every step and is device ops only: it reduces each quantity to one
"all finite" flag and, the first time one is false, stores the step and the quantity's code
in two 0-d device tensors. The loop reads them (``read``: one small transfer) only where it
syncs anyway, at log intervals and before a checkpoint, and then rolls back (lobsurf.train.
loop). Codes are in causal order, so when a NaN loss has already spread to the gradients
and parameters within the same step, the loss is the one reported.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from lobsurf.agent.step import TrainState
from lobsurf.writeback import copy_values_

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
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(first bad step, its code) after this step's check, pure: ``train.compile`` makes it
    one kernel (``lobsurf.train.compile.compile_guard_``), where its ops inside the graphed
    step were some twenty small ones.

    Args:
        losses: the learner's 0-d loss sums. grad_max, param_max: max |x| of each gradient
            and parameter (empty: none yet). controllers: every 0-d controller.
        first_bad_step, code: the guard's state before the step. step_count: the step's.
    """
    everything_fine = torch.ones((), dtype=torch.bool, device=first_bad_step.device)
    ok = [torch.isfinite(torch.stack(values)).all() if values else everything_fine
          for values in (losses, grad_max, param_max, controllers)]
    bad = ~torch.stack(ok)
    new = bad.any() & (first_bad_step == _NONE)
    # argmax of a bool vector: the first True, i.e. the earliest quantity in causal order
    return (torch.where(new, step_count, first_bad_step),
            torch.where(new, bad.to(torch.int64).argmax(), code))


class DivergenceGuard:
    """First non-finite step and quantity of a run segment, kept on the device."""

    def __init__(self, device: torch.device | str) -> None:
        self.first_bad_step = torch.full((), _NONE, dtype=torch.int64, device=device)
        self.code = torch.full((), _NONE, dtype=torch.int64, device=device)
        self.values: Callable[..., tuple[torch.Tensor, torch.Tensor]] = guard_values
        """``guard_values`` or a compiled copy of it."""

    def check_(self, state: TrainState) -> None:
        """Record the first non-finite quantity of this step, if it is the first (device ops)."""
        params = [p.detach() for p in state.online.parameters()]
        params += [p.detach() for p in state.target.parameters()]
        grads = [p.grad for p in state.online.parameters() if p.grad is not None]
        first, code = self.values(
            [getattr(state.metrics, name) for name in LOSS_SUMS], _max_abs(grads),
            _max_abs(params), list(state.controllers.as_dict().values()),
            self.first_bad_step, self.code, state.step_count)
        copy_values_([(self.first_bad_step, first), (self.code, code)])

    def read(self) -> tuple[int, str] | None:
        """(step, quantity) of the first non-finite value since the last reset, or None
        (a host sync: call it only at log intervals and checkpoints)."""
        step, code = torch.stack((self.first_bad_step, self.code)).tolist()
        return None if step == _NONE else (step, QUANTITIES[code])

    def reset_(self) -> None:
        self.first_bad_step.fill_(_NONE)
        self.code.fill_(_NONE)
