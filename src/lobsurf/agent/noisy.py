"""Noisy linear layer with factorised Gaussian noise (Fortunato et al. 2018, "Noisy Networks
for Exploration", sec. 3.2).

    y = (mu_w + sigma_w * (f(eps_out) f(eps_in)^T)) x + mu_b + sigma_b * f(eps_out),
    f(e) = sign(e) sqrt(|e|)

The noise vectors are buffers resampled in place by ``resample_(generator)``: one seeded
generator per run draws them (reproducible, checkpointed), and the buffers keep stable
addresses so a captured graph reads the fresh noise. Nothing is drawn inside ``forward``.
``resample_noise_`` resamples every noisy layer of several modules at once: one draw per
buffer, in layer order as ``resample_`` would, then f over all of them in four multi-tensor
ops (eight small kernels per layer otherwise: the step resamples two networks each step).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn


def _scale_noise_(buffers: list[torch.Tensor]) -> None:
    """e <- f(e) = sign(e) sqrt(|e|) in place over every buffer (sqrt(|e|) sign(e): the same
    product, as multiplication commutes exactly)."""
    sign = torch._foreach_sign(buffers)
    torch._foreach_abs_(buffers)
    torch._foreach_sqrt_(buffers)
    torch._foreach_mul_(buffers, sign)


class NoisyLinear(nn.Module):
    """Linear layer [..., in] -> [..., out] with learnable factorised noise scales."""

    def __init__(self, in_features: int, out_features: int, sigma0: float) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        sigma = sigma0 / math.sqrt(in_features)
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma))
        self.register_buffer("eps_in", torch.zeros(in_features))
        self.register_buffer("eps_out", torch.zeros(out_features))

    def resample_(self, generator: torch.Generator) -> None:
        """Draw fresh noise into the buffers, in place."""
        resample_noise_(self, generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight_mu + self.weight_sigma * torch.outer(self.eps_out, self.eps_in)
        bias = self.bias_mu + self.bias_sigma * self.eps_out
        return nn.functional.linear(x, weight, bias)


@torch.no_grad()
def resample_noise_(modules: nn.Module | Iterable[nn.Module], generator: torch.Generator
                    ) -> None:
    """Resample every NoisyLinear inside ``modules`` (one module or several, in order).

    Each buffer is filled with standard normals in place (``normal_`` is what ``randn``
    does into a fresh tensor: the same numbers), eps_in then eps_out of each layer in
    module order, then scaled by f all at once.
    """
    roots = [modules] if isinstance(modules, nn.Module) else list(modules)
    buffers = [eps for root in roots for m in root.modules() if isinstance(m, NoisyLinear)
               for eps in (m.eps_in, m.eps_out)]
    for eps in buffers:
        eps.normal_(generator=generator)
    if buffers:
        _scale_noise_(buffers)
