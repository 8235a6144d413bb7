"""Adam (Kingma & Ba 2015) over flat parameter buffers, as device-tensor arithmetic.

``torch.optim.Adam`` keeps its step counter on the host unless ``capturable=True``, which
only CUDA-like devices accept; its CPU path reads that counter with ``.item()`` every
step. This optimiser has one code path for CPU and GPU: the step counter, the learning
rate and the bias corrections are 0-d tensors on the parameters' device, so there is no
host read, the step is capture-ready, and the learning rate can be lowered in place (a
float would be frozen into a captured graph).

    m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
    p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

The parameters, their gradients and both moments are laid out as one buffer each
(lobsurf.agent.flat), and the update is one element-wise function over them,
``flat_adam_``: the gradient clip's divisor, Adam, and the Polyak step of a target network
laid out the same way, which torch.compile makes one kernel (benchmarks/RESULTS.md,
Defaults decided by measurement). It mutates its 1-d inputs in place: the write-back rule
of the step's other kernels (lobsurf.writeback) is for 0-d inputs, whose in-place writes
torch 2.13's CPU Inductor drops; the new step count, 0-d, is returned and copied.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from lobsurf.agent.flat import FlatParameters, flatten_parameters_
from lobsurf.writeback import copy_values_


class AdamScalars(NamedTuple):
    """One step's 0-d scalars: the new step count t, sqrt(1 - b2^t) and lr / (1 - b1^t)."""

    step_count: torch.Tensor
    bias2_sqrt: torch.Tensor
    step_size: torch.Tensor


def adam_scalars(step_count: torch.Tensor, lr: torch.Tensor, beta1: float, beta2: float
                 ) -> AdamScalars:
    """The scalars of the next step from the step count before it (pure)."""
    t = step_count + 1.0
    bias1 = 1.0 - torch.pow(beta1, t)
    return AdamScalars(step_count=t, bias2_sqrt=torch.sqrt(1.0 - torch.pow(beta2, t)),
                       step_size=lr / bias1)


def flat_adam_(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor,
               exp_avg_sq: torch.Tensor, step_count: torch.Tensor, lr: torch.Tensor,
               grad_divisor: torch.Tensor | None, target: torch.Tensor | None,
               beta1: float, beta2: float, eps: float, tau: float) -> torch.Tensor:
    """One Adam step of flat buffers, in place, and the new step count (returned, not
    written: module docstring).

    ``grad`` is divided by ``grad_divisor`` first (left divided, as the other paths leave
    it); with ``target`` (the target network's flat parameters, the same layout) the
    Polyak step target <- target + tau (new param - target) follows. The gaps between
    segments stay 0.
    """
    k = adam_scalars(step_count, lr, beta1, beta2)
    if grad_divisor is not None:
        grad.div_(grad_divisor)
    exp_avg.lerp_(grad, 1.0 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
    denom = (exp_avg_sq.sqrt() / k.bias2_sqrt).add_(eps)
    param.sub_(exp_avg / denom * k.step_size)
    if target is not None:
        target.lerp_(param, tau)
    return k.step_count


class TensorAdam:
    """Adam over a fixed list of parameters laid out in one flat buffer; state lives in
    device tensors."""

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("no trainable parameters")
        device = self.params[0].device
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.lr = torch.tensor(float(lr), dtype=torch.float32, device=device)
        self.step_count = torch.zeros((), dtype=torch.float32, device=device)
        self.flat: FlatParameters = flatten_parameters_(self.params, with_grads=True)
        """The parameters and gradients as one buffer each (the moments' buffers below share
        its layout; ``exp_avg`` and ``exp_avg_sq`` are their per-parameter views)."""
        self.exp_avg_flat = torch.zeros_like(self.flat.data)
        self.exp_avg_sq_flat = torch.zeros_like(self.flat.data)
        self.exp_avg = self.flat.views(self.exp_avg_flat)
        self.exp_avg_sq = self.flat.views(self.exp_avg_sq_flat)

    def zero_grad(self) -> None:
        """Zero the gradients in place (one fill of the flat gradient buffer)."""
        self.flat.grad.zero_()

    @torch.no_grad()
    def step(self, update: Callable[..., torch.Tensor] = flat_adam_,
                  grad_divisor: torch.Tensor | None = None,
                  polyak: tuple[FlatParameters, float] | None = None) -> None:
        """The step: ``update`` (``flat_adam_`` or a compiled copy) over every parameter at
        once; with ``polyak`` = (a target network's flat parameters, tau) the target follows
        in the same pass. Zero gradients (parameters the loss does not reach) leave a
        parameter whose moments are zero unchanged, as skipping it would."""
        target, tau = (None, 0.0) if polyak is None else (polyak[0].data, polyak[1])
        if polyak is not None and not self.flat.same_layout(polyak[0]):
            raise ValueError("the Polyak target's flat layout differs from the parameters'")
        self.flat.check()
        count = update(self.flat.data, self.flat.grad, self.exp_avg_flat, self.exp_avg_sq_flat,
                       self.step_count, self.lr, grad_divisor, target, self.beta1, self.beta2,
                       self.eps, tau)
        copy_values_([(self.step_count, count)])

    def state_dict(self) -> dict[str, object]:
        return {"lr": self.lr, "step_count": self.step_count, "exp_avg": self.exp_avg,
                "exp_avg_sq": self.exp_avg_sq, "betas": [self.beta1, self.beta2],
                "eps": self.eps}

    def load_state_dict(self, state: dict[str, object]) -> None:
        if len(state["exp_avg"]) != len(self.params):
            raise ValueError("optimizer state holds a different number of parameters")
        self.lr.copy_(state["lr"])
        self.step_count.copy_(state["step_count"])
        for dst, src in zip(self.exp_avg + self.exp_avg_sq, state["exp_avg"] + state["exp_avg_sq"]):
            dst.copy_(src)
        # the state dict holds the segments: the gaps (NaN after a diverged step) and the
        # gradients (the next step overwrites them) are zeroed
        for buffer in (self.exp_avg_flat, self.exp_avg_sq_flat, self.flat.data):
            self.flat.zero_gaps_(buffer)
        self.flat.grad.zero_()
