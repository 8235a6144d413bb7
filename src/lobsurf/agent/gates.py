"""The surfer's gates between Thompson sampling and the simulator: hold by default, trade
when the wave comes.

1. **Confidence gate**: a non-Hold action becomes Hold when Q's confidence in it, the
   probability mass its return distribution puts above zero, is below the adaptive
   ``gate_threshold``. The first B x (1 - max_hold_fraction) environments are exploration
   slots, never gated, so Q keeps seeing trading outcomes (the original's gate trapped
   itself: gate -> Hold -> Q learns Hold -> gate blocks all -> 100 % Hold).
2. **FRD gate**: a buy (sell) becomes Hold when the FRD head gives less than
   ``frd_min_prob`` to a move up (down) at least as large as the round-trip cost.

With passive orders a posted bid (ask) is gated as a buy (sell): it is an order to buy
(sell), and the trade it may open bets on the same move. The round-trip cost stays the
market one (a passive round trip may earn the spread instead: the gate stays
conservative). Hold and the cancels are never gated: a cancel only takes risk off.

Both are tensor arithmetic, including the warm-up: the step counter is a device tensor, so
the same code fires eagerly and inside a captured CUDA graph (the original captured its
gates as no-ops during warm-up and never fired them).

The threshold moves at one rate in both directions (x or / adjust_rate per step) toward a
target hold fraction of the post-gate actions (the original's 100x asymmetry pinned it).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from lobsurf.agent.config import GateConfig
from lobsurf.agent.controllers import ControllerState, controller_bounds
from lobsurf.writeback import copy_values_, named_pairs

HOLD = 0


class GateResult(NamedTuple):
    """actions [B] int64 after both gates; gated [B] bool, True where a gate turned the
    proposed action into Hold (either gate)."""

    actions: torch.Tensor
    gated: torch.Tensor


def exploration_slots(num_envs: int, cfg: GateConfig) -> int:
    """How many leading environments are never gated."""
    return int(num_envs * (1.0 - cfg.max_hold_fraction))


def profit_confidence(probs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """[B, A, N] return distributions -> [B, A] probability mass on atoms above zero."""
    return (probs * (z > 0).to(probs.dtype)).sum(-1)


def move_probabilities(frd_probs: torch.Tensor, lower_edges: torch.Tensor,
                       upper_edges: torch.Tensor, cost_ticks: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """P(return >= cost) and P(return <= -cost) from bucket probabilities.

    A bucket counts only when all of it lies beyond the cost (conservative).

    Args:
        frd_probs: [B, C] bucket probabilities at the gate's horizon.
        lower_edges, upper_edges: [C] bucket bounds in ticks (-inf / +inf at the ends).
        cost_ticks: [B] round-trip cost in ticks (>= 0).

    Returns:
        (p_up [B], p_down [B]).
    """
    up = (lower_edges[None, :] >= cost_ticks[:, None]).to(frd_probs.dtype)
    down = (upper_edges[None, :] <= -cost_ticks[:, None]).to(frd_probs.dtype)
    return (frd_probs * up).sum(-1), (frd_probs * down).sum(-1)


def apply_gates(proposed: torch.Tensor, confidence: torch.Tensor, p_up: torch.Tensor,
                p_down: torch.Tensor, action_side: torch.Tensor, threshold: torch.Tensor,
                active: torch.Tensor, explore_slots: int, cfg: GateConfig) -> GateResult:
    """Gate Thompson actions (see module doc).

    Args:
        proposed: [B] int64 Thompson actions.
        confidence: [B, A] profit confidence of each action.
        p_up, p_down: [B] FRD probabilities of a move beyond costs.
        action_side: [A] int64 the side each action trades: +1 buy or post a bid, -1 sell
            or post an ask, 0 Hold and the cancels (never gated); signed lots do too.
        threshold: 0-d gate_threshold controller.
        active: 0-d bool, the warm-up is over.
        explore_slots: leading envs never gated.
    """
    b = proposed.shape[0]
    gateable = torch.arange(b, device=proposed.device) >= explore_slots
    side = action_side[proposed]
    gateable = gateable & active & (side != 0)
    conf = confidence.gather(1, proposed[:, None])[:, 0]
    frd_blocks = torch.where(side > 0, p_up < cfg.frd_min_prob, p_down < cfg.frd_min_prob)
    gated = gateable & ((conf < threshold) | frd_blocks)
    return GateResult(actions=torch.where(gated, HOLD, proposed), gated=gated)


def gate_threshold_values(state: ControllerState, active: torch.Tensor, cfg: GateConfig
                          ) -> dict[str, torch.Tensor]:
    """New gate_threshold: raised (x rate) while hold is below target, lowered (/ rate)
    above; frozen during the warm-up. Reads the post-gate hold_fraction controller."""
    up = state.hold_fraction < cfg.target_hold_fraction
    factor = torch.where(up, cfg.adjust_rate, 1.0 / cfg.adjust_rate)
    moved = torch.where(active, state.gate_threshold * factor, state.gate_threshold)
    return {"gate_threshold": moved.clamp(*controller_bounds("gate_threshold"))}


def update_gate_threshold(state: ControllerState, active: torch.Tensor, cfg: GateConfig) -> None:
    """``gate_threshold_values`` written into ``state`` in place."""
    copy_values_(named_pairs(state, gate_threshold_values(state, active, cfg)))

