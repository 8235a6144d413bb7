"""Adam (Kingma & Ba 2015) as device-tensor arithmetic: the step counter, the learning rate
and the bias corrections are 0-d tensors on the parameters' device.

``torch.optim.Adam`` keeps its step counter on the host unless ``capturable=True``, which
only CUDA-like devices accept; its CPU path reads that counter with ``.item()`` every
step. This optimiser has one code path for CPU and GPU: no host read, capture-ready, and
the learning rate is a tensor that can be lowered in place (a float would be frozen into a
captured graph). Multi-tensor (``_foreach``) ops keep the kernel count per step small.

    m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
    p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

The step's scalars (t + 1, the bias corrections, the step size) are a pure function,
``adam_scalars``, which the training step may pass in compiled (a handful of 0-d kernels
become one; lobsurf.agent.step.StepKernels).

``fused=True`` runs the update as one multi-tensor kernel, ``torch._fused_adam_`` (the
kernel behind ``torch.optim.Adam(fused=True, capturable=True)``, reading the step count
and learning rate from device tensors), where the multi-tensor path launches nine; the
training step takes it on CUDA (``train.fused_adam``). Same formula, its own rounding: the
multi-tensor path stays the reference, and tests check both against a float64 numpy Adam.

``flat=True`` lays the parameters, their gradients and both moments out as one buffer each
(lobsurf.agent.flat) and runs the update as one element-wise function over them,
``flat_adam_``: the gradient's clip divisor, Adam, and optionally the Polyak step of a
target network laid out the same way, which torch.compile makes one kernel (the training
step's default on every device: ``train.flat_parameters``). It mutates its 1-d inputs in
place: the write-back rule of the step's other kernels (lobsurf.writeback) is for 0-d
inputs, whose in-place writes torch 2.13's CPU Inductor drops; the new step count, 0-d, is
returned and copied as they are.
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
    Polyak step target <- target + tau (new param - target) follows. The operations and
    their order are the multi-tensor path's, so eager results agree with it to rounding.
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
    """Adam over a fixed list of parameters; state lives in device tensors."""

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, fused: bool = False, flat: bool = False) -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("no trainable parameters")
        device = self.params[0].device
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.fused = fused  # one torch._fused_adam_ kernel per step instead of nine ops
        self.lr = torch.tensor(float(lr), dtype=torch.float32, device=device)
        self.step_count = torch.zeros((), dtype=torch.float32, device=device)
        self.flat: FlatParameters | None = None
        """With ``flat``: the parameters and gradients as one buffer each (the moments'
        buffers below share its layout; ``exp_avg`` and ``exp_avg_sq`` are their views)."""
        if flat:
            self.flat = flatten_parameters_(self.params, with_grads=True)
            self.exp_avg_flat = torch.zeros_like(self.flat.data)
            self.exp_avg_sq_flat = torch.zeros_like(self.flat.data)
            self.exp_avg = self.flat.views(self.exp_avg_flat)
            self.exp_avg_sq = self.flat.views(self.exp_avg_sq_flat)
        else:
            self.exp_avg = [torch.zeros_like(p) for p in self.params]
            self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        """Zero the gradients in place (allocated on first use, then reused), in one
        multi-tensor op (flat: one fill) rather than a kernel per parameter."""
        if self.flat is not None:
            self.flat.grad.zero_()
            return
        grads = [p.grad for p in self.params if p.grad is not None]
        if grads:
            torch._foreach_zero_(grads)

    @torch.no_grad()
    def step_flat(self, update: Callable[..., torch.Tensor] = flat_adam_,
                  grad_divisor: torch.Tensor | None = None,
                  polyak: tuple[FlatParameters, float] | None = None) -> None:
        """The flat step: ``update`` (``flat_adam_`` or a compiled copy) over every
        parameter at once; with ``polyak`` = (a target network's flat parameters, tau) the
        target follows in the same pass. Zero gradients (parameters the loss does not
        reach) leave a parameter whose moments are zero unchanged, as skipping it would."""
        if self.flat is None:
            raise RuntimeError("step_flat needs TensorAdam(flat=True)")
        target, tau = (None, 0.0) if polyak is None else (polyak[0].data, polyak[1])
        if polyak is not None and not self.flat.same_layout(polyak[0]):
            raise ValueError("the Polyak target's flat layout differs from the parameters'")
        self.flat.check()
        count = update(self.flat.data, self.flat.grad, self.exp_avg_flat, self.exp_avg_sq_flat,
                       self.step_count, self.lr, grad_divisor, target, self.beta1, self.beta2,
                       self.eps, tau)
        copy_values_([(self.step_count, count)])

    @torch.no_grad()
    def step(self, scalars: Callable[..., AdamScalars] = adam_scalars,
             grad_divisor: torch.Tensor | None = None) -> None:
        """One Adam step of every parameter with a gradient (``scalars``: ``adam_scalars``
        or a compiled copy of it). ``grad_divisor`` (0-d, on the parameters' device): the
        gradients are divided by it first (a gradient clip's factor; the fused kernel does
        it in the same pass as its grad_scale, and leaves the divided gradients in place,
        as the multi-tensor path does)."""
        if self.flat is not None:
            self.step_flat(grad_divisor=grad_divisor)
            return
        params = [p for p in self.params if p.grad is not None]
        if not params:
            return
        index = {id(p): i for i, p in enumerate(self.params)}
        m = [self.exp_avg[index[id(p)]] for p in params]
        v = [self.exp_avg_sq[index[id(p)]] for p in params]
        grads = [p.grad for p in params]
        k = scalars(self.step_count, self.lr, self.beta1, self.beta2)
        copy_values_([(self.step_count, k.step_count)])
        if self.fused:
            # the bias corrections come from the (already advanced) shared step count
            torch._fused_adam_(params, grads, m, v, [], [self.step_count] * len(params),
                               lr=self.lr, beta1=self.beta1, beta2=self.beta2,
                               weight_decay=0.0, eps=self.eps, amsgrad=False, maximize=False,
                               grad_scale=grad_divisor)
            return
        if grad_divisor is not None:
            torch._foreach_div_(grads, grad_divisor)
        torch._foreach_lerp_(m, grads, 1.0 - self.beta1)
        torch._foreach_mul_(v, self.beta2)
        torch._foreach_addcmul_(v, grads, grads, value=1.0 - self.beta2)
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, k.bias2_sqrt)
        torch._foreach_add_(denom, self.eps)
        update = torch._foreach_div(m, denom)
        torch._foreach_mul_(update, k.step_size)
        torch._foreach_sub_(params, update)

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
        if self.flat is not None:
            # the state dict holds the segments: the gaps (NaN after a diverged step) and
            # the gradients (the next step overwrites them) are zeroed
            for buffer in (self.exp_avg_flat, self.exp_avg_sq_flat, self.flat.data):
                self.flat.zero_gaps_(buffer)
            self.flat.grad.zero_()
