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

import torch

from lobsurf.agent.step import TrainState

#: what is checked, in causal order (a loss feeds the gradients, they the parameters)
QUANTITIES = ("loss", "gradient", "parameter", "controller")
#: the metric sums of the learner's losses (a non-finite loss makes its running sum so)
LOSS_SUMS = ("loss_q", "loss_pi", "loss_value", "loss_frd", "loss_aux")
_NONE = -1


def _all_finite(tensors: list[torch.Tensor]) -> torch.Tensor:
    # max |x| per tensor is NaN or Inf exactly when the tensor holds one (no overflow)
    return torch.isfinite(torch.stack(torch._foreach_norm(tensors, math.inf))).all()


class DivergenceGuard:
    """First non-finite step and quantity of a run segment, kept on the device."""

    def __init__(self, device: torch.device | str) -> None:
        self.first_bad_step = torch.full((), _NONE, dtype=torch.int64, device=device)
        self.code = torch.full((), _NONE, dtype=torch.int64, device=device)

    def check_(self, state: TrainState) -> None:
        """Record the first non-finite quantity of this step, if it is the first (device ops)."""
        m = state.metrics
        losses = torch.stack([getattr(m, name) for name in LOSS_SUMS])
        params = [p.detach() for p in state.online.parameters()]
        params += [p.detach() for p in state.target.parameters()]
        grads = [p.grad for p in state.online.parameters() if p.grad is not None]
        ok = [torch.isfinite(losses).all(),
              _all_finite(grads) if grads else torch.ones_like(losses[0], dtype=torch.bool),
              _all_finite(params),
              torch.isfinite(torch.stack(list(state.controllers.as_dict().values()))).all()]
        bad = ~torch.stack(ok)
        new = bad.any() & (self.first_bad_step == _NONE)
        # argmax of a bool vector: the first True, i.e. the earliest quantity in causal order
        self.code.copy_(torch.where(new, bad.to(torch.int64).argmax(), self.code))
        self.first_bad_step.copy_(torch.where(new, state.step_count, self.first_bad_step))

    def read(self) -> tuple[int, str] | None:
        """(step, quantity) of the first non-finite value since the last reset, or None
        (a host sync: call it only at log intervals and checkpoints)."""
        step, code = torch.stack((self.first_bad_step, self.code)).tolist()
        return None if step == _NONE else (step, QUANTITIES[code])

    def reset_(self) -> None:
        self.first_bad_step.fill_(_NONE)
        self.code.fill_(_NONE)
