"""Auxiliary heads on the encoder embedding, and their batch-size-independent losses.

* ``DirectionHead``: one logit per horizon, P(mid at t+h > mid at t); binary cross-entropy.
* ``FRDHead``: future-return distribution, a categorical over return buckets per horizon
  (``lobsurf.data.labels``); cross-entropy.
* ``OutcomeHead``: P(a trade opened now closes with profit), one logit per side (long,
  short); binary cross-entropy on closed trades, trained later by the RL learner.

Every loss is a *mean over valid entries* (a masked mean), never a sum: the original
system's aux loss summed over B x K positions and reached 11M, and its encoder gradients
grew with the batch size, so one learning rate did not fit every B (change log, "Raw aux
loss sum was 11M", "scaled by 1/B"). With masked means, the gradient of a batch and of the
same batch repeated twice are identical. The direction and FRD losses average each
horizon over its own valid entries first and then average the horizons, so a long horizon
with fewer valid labels still weighs as much as a short one.

Heads act on the last axis only, so they accept h [B, D] or h [B, K, D] alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class HeadConfig:
    """Shape of the auxiliary heads."""

    hidden: int = 0
    """Width of one hidden SiLU layer in front of each head's output layer; 0 = linear head."""
    outcome_sides: int = 2
    """Outputs of the outcome head: 2 = (long, short) trades."""


def _mlp(d_in: int, d_out: int, cfg: HeadConfig) -> nn.Module:
    if cfg.hidden <= 0:
        return nn.Linear(d_in, d_out)
    return nn.Sequential(nn.Linear(d_in, cfg.hidden), nn.SiLU(), nn.Linear(cfg.hidden, d_out))


class _Head(nn.Module):
    """A head h -> logits split at its first linear layer: ``forward(h)`` is
    ``finish(first(h))``, so a caller may compute ``first`` for several heads in one merged
    product (the agent's heads: lobsurf.agent.network) and finish each."""

    net: nn.Module

    @property
    def first(self) -> nn.Linear:
        """The linear layer that reads h."""
        return self.net if isinstance(self.net, nn.Linear) else self.net[0]

    def finish(self, first_out: torch.Tensor) -> torch.Tensor:
        """The logits from the first layer's output (the hidden layer's SiLU and output
        layer where there is one)."""
        return first_out if isinstance(self.net, nn.Linear) else self.net[1:](first_out)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.finish(self.first(h))


class DirectionHead(_Head):
    """h [..., D] → logits [..., H], one per horizon."""

    def __init__(self, d_model: int, num_horizons: int, cfg: HeadConfig):
        super().__init__()
        self.net = _mlp(d_model, num_horizons, cfg)


class FRDHead(_Head):
    """h [..., D] → logits [..., H, C] over C return buckets per horizon."""

    def __init__(self, d_model: int, num_horizons: int, num_buckets: int, cfg: HeadConfig):
        super().__init__()
        self.num_horizons = num_horizons
        self.num_buckets = num_buckets
        self.net = _mlp(d_model, num_horizons * num_buckets, cfg)

    def finish(self, first_out: torch.Tensor) -> torch.Tensor:
        return super().finish(first_out).unflatten(-1, (self.num_horizons, self.num_buckets))


class OutcomeHead(_Head):
    """h [..., D] → logits [..., S], P(profit) of a trade opened now, per side."""

    def __init__(self, d_model: int, cfg: HeadConfig):
        super().__init__()
        self.net = _mlp(d_model, cfg.outcome_sides, cfg)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over the entries where ``mask`` holds, along the batch axis 0.

    Args:
        values: [B, ...] per-entry losses.
        mask: [B, ...] bool, same shape.

    Returns:
        [...] means; 0 where a column has no valid entry (no NaN, no host sync).
    """
    m = mask.to(values.dtype)
    return (values * m).sum(dim=0) / m.sum(dim=0).clamp(min=1.0)


def direction_loss_per_horizon(logits: torch.Tensor, targets: torch.Tensor,
                               mask: torch.Tensor) -> torch.Tensor:
    """BCE of the direction logits, mean over each horizon's valid entries.

    Args:
        logits: [B, H]. targets: [B, H] float in {0, 1}. mask: [B, H] bool.

    Returns:
        [H] mean BCE in nats.
    """
    bce = F.binary_cross_entropy_with_logits(logits, targets.to(logits.dtype), reduction="none")
    return masked_mean(bce, mask)


def direction_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scalar direction loss: the mean over horizons of ``direction_loss_per_horizon``."""
    return direction_loss_per_horizon(logits, targets, mask).mean()


def frd_loss_per_horizon(logits: torch.Tensor, buckets: torch.Tensor,
                         mask: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the return-bucket logits, mean over each horizon's valid entries.

    Args:
        logits: [B, H, C]. buckets: [B, H] int64 in [0, C). mask: [B, H] bool.

    Returns:
        [H] mean cross-entropy in nats.
    """
    # Invalid entries may carry any bucket; clamp keeps the gather in range, the mask drops it.
    safe = buckets.clamp(0, logits.shape[-1] - 1)
    ce = F.cross_entropy(logits.transpose(1, 2), safe, reduction="none")  # [B, H]
    return masked_mean(ce, mask)


def frd_loss(logits: torch.Tensor, buckets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scalar FRD loss: the mean over horizons of ``frd_loss_per_horizon``."""
    return frd_loss_per_horizon(logits, buckets, mask).mean()


def outcome_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """BCE of the outcome logits over closed trades, mean over all valid entries.

    Args:
        logits: [B, S] (per side). targets: [B, S] float, 1 = the trade closed with profit.
        mask: [B, S] bool, True where a trade of that side closed (has an outcome).

    Returns:
        Scalar mean BCE in nats (0 when nothing closed).
    """
    bce = F.binary_cross_entropy_with_logits(logits, targets.to(logits.dtype), reduction="none")
    return masked_mean(bce.flatten(), mask.flatten())
