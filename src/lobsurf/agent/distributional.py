"""C51 distributional RL math (Bellemare, Dabney & Munos 2017, "A Distributional
Perspective on Reinforcement Learning"): the support, the categorical projection of the
Bellman target, and the cross-entropy loss.

The projection is the dense form of Dopamine's ``project_distribution``: every target atom
Tz_j spreads its mass p_j over the support atoms z_i with weight clip(1 - |Tz_j - z_i| / dz,
0, 1). That is Eq. 7 of the paper, with no scatter and no per-row loop, so it is
deterministic and graph-capturable. The support comes from the v_min / v_max controller
tensors (0-d, on the device): no host read of the span, no constant V_MIN anywhere.
"""

from __future__ import annotations

import torch


def support(v_min: torch.Tensor, v_max: torch.Tensor, num_atoms: int) -> torch.Tensor:
    """[num_atoms] atoms z_i = v_min + i * dz, dz = (v_max - v_min) / (num_atoms - 1).

    Args:
        v_min, v_max: 0-d tensors (any float dtype); the result is float32 on their device.
    """
    frac = torch.linspace(0.0, 1.0, num_atoms, device=v_min.device, dtype=torch.float64)
    return (v_min + (v_max - v_min) * frac).to(torch.float32)


def project_categorical(next_probs: torch.Tensor, reward: torch.Tensor, done: torch.Tensor,
                        gamma: float | torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Project the distribution of r + gamma * (1 - done) * Z(s', a*) onto the support z.

    Args:
        next_probs: [B, N] probabilities p_j(s', a*) over the atoms z.
        reward: [B] rewards (reward units); an n-step return for n-step targets.
        done: [B] bool or float, 1 where the transition is terminal (no bootstrap).
        gamma: discount of the bootstrap: a float, or [B] (gamma ** m for an m-step return).
        z: [N] support (ascending, evenly spaced).

    Returns:
        [B, N] projected target probabilities (rows sum to 1).
    """
    v_min, v_max = z[0], z[-1]
    delta_z = z[1] - z[0]
    not_done = 1.0 - done.to(next_probs.dtype)
    if isinstance(gamma, torch.Tensor):
        not_done = not_done * gamma.to(next_probs.dtype)
        gamma = 1.0
    # Eq. 7: Tz_j = [r + gamma (1 - done) z_j] clipped to [V_MIN, V_MAX]    [B, N]
    tz = (reward.to(next_probs.dtype)[:, None] + gamma * not_done[:, None] * z[None, :])
    tz = tz.clamp(v_min, v_max)
    # weight of target atom j on support atom i: clip(1 - |Tz_j - z_i| / dz, 0, 1)  [B, N_i, N_j]
    weight = (1.0 - (tz[:, None, :] - z[None, :, None]).abs() / delta_z).clamp(0.0, 1.0)
    # (Phi T Z)_i = sum_j weight_ij p_j
    return torch.einsum("bij,bj->bi", weight, next_probs)


def categorical_cross_entropy(logits: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """Per-sample cross-entropy -sum_i m_i log softmax(logits)_i.

    Args:
        logits: [B, N] online logits of the taken action.
        target_probs: [B, N] projected target (no gradient flows into it).

    Returns:
        [B] cross-entropy in nats.
    """
    return -(target_probs.detach() * torch.log_softmax(logits, dim=-1)).sum(-1)


def expected_value(probs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """E[Z] over the last axis: [..., N] probabilities, [N] support -> [...]."""
    return (probs * z).sum(-1)
