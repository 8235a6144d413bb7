"""Adam (Kingma & Ba 2015) as device-tensor arithmetic: the step counter, the learning rate
and the bias corrections are 0-d tensors on the parameters' device.

``torch.optim.Adam`` keeps its step counter on the host unless ``capturable=True``, which
only CUDA-like devices accept; its CPU path reads that counter with ``.item()`` every
step. This optimiser has one code path for CPU and GPU: no host read, capture-ready, and
the learning rate is a tensor that can be lowered in place (a float would be frozen into a
captured graph). Multi-tensor (``_foreach``) ops keep the kernel count per step small.

    m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
    p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
"""

from __future__ import annotations

import torch


class TensorAdam:
    """Adam over a fixed list of parameters; state lives in device tensors."""

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
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        """Zero the gradients in place (allocated on first use, then reused)."""
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        params = [p for p in self.params if p.grad is not None]
        if not params:
            return
        index = {id(p): i for i, p in enumerate(self.params)}
        m = [self.exp_avg[index[id(p)]] for p in params]
        v = [self.exp_avg_sq[index[id(p)]] for p in params]
        grads = [p.grad for p in params]
        self.step_count.add_(1.0)
        torch._foreach_lerp_(m, grads, 1.0 - self.beta1)
        torch._foreach_mul_(v, self.beta2)
        torch._foreach_addcmul_(v, grads, grads, value=1.0 - self.beta2)
        bias1 = 1.0 - torch.pow(self.beta1, self.step_count)
        bias2_sqrt = torch.sqrt(1.0 - torch.pow(self.beta2, self.step_count))
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, bias2_sqrt)
        torch._foreach_add_(denom, self.eps)
        update = torch._foreach_div(m, denom)
        torch._foreach_mul_(update, self.lr / bias1)
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
