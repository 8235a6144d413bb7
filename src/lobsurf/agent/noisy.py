"""Noisy linear layer with factorised Gaussian noise (Fortunato et al. 2018, "Noisy Networks
for Exploration", sec. 3.2).

    y = (mu_w + sigma_w * (f(eps_out) f(eps_in)^T)) x + mu_b + sigma_b * f(eps_out),
    f(e) = sign(e) sqrt(|e|)

The noise vectors are buffers resampled in place by ``resample_(generator)``: one seeded
generator per run draws them (reproducible, checkpointed), and the buffers keep stable
addresses so a captured graph reads the fresh noise. Nothing is drawn inside ``forward``.
``resample_noise_`` resamples every noisy layer of several modules at once: one draw of
standard normals for all their buffers (eps_in then eps_out of each layer, in module
order), f over it as one pure function (``scaled_noise``, which the training step may pass
in compiled), and one multi-tensor copy into the buffers: three kernels for the step's two
networks, where a draw and f per buffer took twelve.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import nn

from lobsurf.writeback import copy_values_


def scaled_noise(e: torch.Tensor) -> torch.Tensor:
    """f(e) = sign(e) sqrt(|e|), pure (copysign: the same numbers, one fused expression)."""
    return torch.copysign(torch.sqrt(torch.abs(e)), e)


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

    def noisy_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight [out, in], bias [out]) with the current noise: what ``forward`` applies
        (the agent's merged head product takes them to apply them with other layers')."""
        weight = self.weight_mu + self.weight_sigma * torch.outer(self.eps_out, self.eps_in)
        return weight, self.bias_mu + self.bias_sigma * self.eps_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, *self.noisy_parameters())


@torch.no_grad()
def resample_noise_(modules: nn.Module | Iterable[nn.Module], generator: torch.Generator,
                    scale: Callable[[torch.Tensor], torch.Tensor] = scaled_noise) -> None:
    """Resample every NoisyLinear inside ``modules`` (one module or several, in order).

    One draw of standard normals covers every buffer (eps_in then eps_out of each layer in
    module order, laid end to end), ``scale`` (``scaled_noise`` or a compiled copy) maps it
    through f, and one multi-tensor copy writes the pieces into the buffers in place.
    """
    roots = [modules] if isinstance(modules, nn.Module) else list(modules)
    buffers = [eps for root in roots for m in root.modules() if isinstance(m, NoisyLinear)
               for eps in (m.eps_in, m.eps_out)]
    if not buffers:
        return
    draw = torch.empty(sum(b.numel() for b in buffers), dtype=buffers[0].dtype,
                       device=buffers[0].device).normal_(generator=generator)
    pieces = torch.split(scale(draw), [b.numel() for b in buffers])
    copy_values_(zip(buffers, pieces))
