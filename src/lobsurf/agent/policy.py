"""The pi head's loss and its controllers, the V loss, and the KL reference reward.

pi is trained only by distillation from the target Q plus an entropy bonus (the original's
final design, after PPO surrogates collapsed or fought Q):

    L_pi = lambda * CE(softmax(E[Q_target(s, .)] / tau), pi) - alpha * H(pi)

whose gradient in pi's logits is lambda (pi - softmax(E[Q_target] / tau)) + alpha pi (log pi + H),
the change log's update written as a loss. alpha tunes itself toward an entropy target of
fraction x ln(A) nats, read from the **post-gate** action entropy (the original read the
policy's own entropy, which the gates decouple from what is traded, and moved tau the wrong
way); tau co-tunes with alpha. Both ramp fast below target and decay slowly above it.
"""

from __future__ import annotations

import math

import torch

from lobsurf.agent.config import PolicyConfig
from lobsurf.agent.controllers import ControllerState, controller_bounds
from lobsurf.writeback import copy_values_, named_pairs


def reference_log_probs(num_actions: int, cfg: PolicyConfig, device: torch.device | str
                        ) -> torch.Tensor:
    """[A] log pi_ref: Hold reference_hold_prob, the others share the rest equally."""
    other = (1.0 - cfg.reference_hold_prob) / (num_actions - 1)
    probs = torch.full((num_actions,), other, dtype=torch.float32, device=device)
    probs[0] = cfg.reference_hold_prob
    return probs.log()


def entropy_target(num_actions: int, cfg: PolicyConfig) -> float:
    return cfg.entropy_target_fraction * math.log(num_actions)


def pi_loss(pi_logits: torch.Tensor, target_q_mean: torch.Tensor, state: ControllerState,
            cfg: PolicyConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Distillation + entropy loss (batch mean) and the mean policy entropy.

    Args:
        pi_logits: [B, A] online pi logits.
        target_q_mean: [B, A] E[Q_target(s, a)] (no gradient).
    """
    log_pi = torch.log_softmax(pi_logits, dim=-1)
    target = torch.softmax(target_q_mean.detach() / state.distill_tau.to(pi_logits.dtype), dim=-1)
    distill = -(target * log_pi).sum(-1)  # [B]
    entropy = -(log_pi.exp() * log_pi).sum(-1)  # [B]
    alpha = state.sac_alpha.to(pi_logits.dtype)
    loss = (cfg.distill_weight * distill - alpha * entropy).mean()
    return loss, entropy.detach().mean()


def alpha_tau_values(state: ControllerState, num_actions: int, cfg: PolicyConfig
                     ) -> dict[str, torch.Tensor]:
    """New sac_alpha and distill_tau: x (1 + ramp) while the post-gate action entropy is
    below target, x (1 - decay) above; each clamped to its declared bounds."""
    below = state.action_entropy < entropy_target(num_actions, cfg)
    factor = torch.where(below, 1.0 + cfg.ramp_rate, 1.0 - cfg.decay_rate)
    return {name: (getattr(state, name) * factor).clamp(*controller_bounds(name))
            for name in ("sac_alpha", "distill_tau")}


def update_alpha_tau(state: ControllerState, num_actions: int, cfg: PolicyConfig) -> None:
    """alpha and tau x (1 + ramp) while the post-gate action entropy is below target,
    x (1 - decay) above; each clamped to its declared bounds."""
    copy_values_(named_pairs(state, alpha_tau_values(state, num_actions, cfg)))


def value_loss(value: torch.Tensor, returns: torch.Tensor, done: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Done-gated V regression: mean over closed trades of (return - V)^2, and the
    advantage done * (return - V) [B] (0 elsewhere)."""
    mask = done.to(value.dtype)
    advantage = mask * (returns.to(value.dtype) - value)
    loss = (advantage ** 2).sum() / mask.sum().clamp(min=1.0)
    return loss, advantage.detach()


def agreement(pi_logits: torch.Tensor, q_mean: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of the Pearson correlation across actions of pi and E[Q] (0-d)."""
    p = torch.softmax(pi_logits.detach(), -1)
    q = q_mean.detach()
    pc, qc = p - p.mean(-1, keepdim=True), q - q.mean(-1, keepdim=True)
    corr = (pc * qc).sum(-1) / (pc.norm(dim=-1) * qc.norm(dim=-1)).clamp(min=1e-12)
    return corr.mean()
