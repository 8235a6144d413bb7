"""Noisy linear layer with factorised Gaussian noise (Fortunato et al. 2018, "Noisy Networks
for Exploration", sec. 3.2).

    y = (mu_w + sigma_w * (f(eps_out) f(eps_in)^T)) x + mu_b + sigma_b * f(eps_out),
    f(e) = sign(e) sqrt(|e|)

The noise vectors are buffers resampled in place by ``resample_(generator)``: one seeded
generator per run draws them (reproducible, checkpointed), and the buffers keep stable
addresses so a captured graph reads the fresh noise. Nothing is drawn inside ``forward``.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def _scaled_noise(e: torch.Tensor) -> torch.Tensor:
    return e.sign() * e.abs().sqrt()


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

    @torch.no_grad()
    def resample_(self, generator: torch.Generator) -> None:
        """Draw fresh noise into the buffers, in place."""
        self.eps_in.copy_(_scaled_noise(torch.randn(self.in_features, generator=generator,
                                                    device=self.eps_in.device)))
        self.eps_out.copy_(_scaled_noise(torch.randn(self.out_features, generator=generator,
                                                     device=self.eps_out.device)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight_mu + self.weight_sigma * torch.outer(self.eps_out, self.eps_in)
        bias = self.bias_mu + self.bias_sigma * self.eps_out
        return nn.functional.linear(x, weight, bias)


def resample_noise_(module: nn.Module, generator: torch.Generator) -> None:
    """Resample every NoisyLinear inside ``module``."""
    for m in module.modules():
        if isinstance(m, NoisyLinear):
            m.resample_(generator)
