"""Action choice from Q's return distributions.

* ``thompson``: one sample of the return per action from its categorical distribution
  (inverse CDF of one uniform draw per (env, action)), then argmax over actions. Draws come
  from an explicit generator, and the sampling is tensor arithmetic: no ``multinomial``, no
  host sync, the same eagerly and in a captured graph.
* ``greedy``: argmax over actions of E[Q] (evaluation).
* ``pi``: a sample of the distilled policy.
"""

from __future__ import annotations

import torch

from lobsurf.agent.distributional import expected_value


def categorical_uniforms(probs: torch.Tensor, generator: torch.Generator,
                         dtype: torch.dtype | None = None) -> torch.Tensor:
    """The uniforms ``sample_categorical`` draws: one per row of ``probs`` [..., N] ->
    [...], in ``dtype`` (default probs' dtype; drawn apart so a compiled kernel can take them
    as an input: torch.compile does not trace a custom generator)."""
    return torch.rand(probs.shape[:-1], generator=generator, device=probs.device,
                      dtype=probs.dtype if dtype is None else dtype)


def categorical_from_uniforms(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draws: [..., N] probabilities and [...] uniforms -> [...] int64 indices."""
    # the draw = number of outcomes whose cumulative probability is below u
    return (probs.cumsum(-1) < u[..., None]).sum(-1).clamp_(max=probs.shape[-1] - 1)


def sample_categorical(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One draw per row of categorical distributions over the last axis (inverse CDF of one
    uniform each): [..., N] probabilities -> [...] int64 indices."""
    return categorical_from_uniforms(probs, categorical_uniforms(probs, generator))


def thompson_from_uniforms(probs: torch.Tensor, z: torch.Tensor, u: torch.Tensor
                           ) -> torch.Tensor:
    """``thompson_actions`` from its uniforms u [B, A] (``categorical_uniforms(probs, .)``)."""
    return z[categorical_from_uniforms(probs, u)].argmax(-1)


def thompson_actions(probs: torch.Tensor, z: torch.Tensor, generator: torch.Generator
                     ) -> torch.Tensor:
    """One Thompson sample per action, argmax.

    Args:
        probs: [B, A, N] return distributions over the support z [N].
        generator: the acting generator.

    Returns:
        [B] int64 actions.
    """
    return thompson_from_uniforms(probs, z, categorical_uniforms(probs, generator))


def pi_actions(pi_logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """[B, A] logits of the distilled policy -> [B] int64 sampled actions."""
    return sample_categorical(torch.softmax(pi_logits, dim=-1), generator)


def greedy_actions(probs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """[B, A, N] distributions -> [B] int64 argmax_a E[Q(s, a)]."""
    return expected_value(probs, z).argmax(-1)
