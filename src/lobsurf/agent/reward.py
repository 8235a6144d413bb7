"""The reward pipeline, run on every collected step in this order:

0. **shape** (RewardConfig.mark_to_market): add gamma * M(s') - M(s), M the open trade's
   net mark (currency), to the realized PnL of the step;
1. **scale**: the step's PnL (currency) x reward_scale, where reward_scale maps the running mean
   |net PnL| of closed trades (the pnl_magnitude controller) to ``scaled_magnitude`` reward
   units, so rewards land inside the atom span whatever the instrument's money scale;
2. **clamp** to [-LOSS, +WIN] (RewardConfig.loss, .win; asymmetric: loss aversion);
3. **atom span**: v_min / v_max follow the clamp bounds by EWMA (rate span_ema_rate), never
   inside +-span_floor, so Q's support covers exactly what the clamp lets through.

The original system wrote these three kernels, then shipped with the entry point never
called (raw PnL of $100-1000 went into a +-0.5 support: binary Q), and later with the clamp
and span updates wired into one step path but not the other (change log). Here one pure
function does all three and ``lobsurf.agent.collect.collect`` is the only caller, used by every
path that trains (prefill included).

Each controller update is a pure function returning the new values (``*_values``: what the
step's compiled kernels call, lobsurf.writeback says why); the ``update_*`` and
``reward_pipeline`` forms write them into the ControllerState in place.
"""

from __future__ import annotations

import torch

from lobsurf.agent.config import RewardConfig
from lobsurf.agent.controllers import ControllerState
from lobsurf.writeback import copy_values_, named_pairs


def pnl_magnitude_values(state: ControllerState, raw_pnl: torch.Tensor, closed: torch.Tensor,
                         cfg: RewardConfig) -> dict[str, torch.Tensor]:
    """New pnl_magnitude and reward_scale: the EMA of mean |net PnL| per closed trade (the
    first observation replaces the bootstrap 0) and the scale it implies.

    Args:
        raw_pnl: [B] float64 realized net PnL (currency), 0 where nothing closed.
        closed: [B] bool, a trade closed this step.
    """
    count = closed.sum().to(torch.float64)
    batch_mean = torch.where(closed, raw_pnl.abs(), 0.0).sum() / count.clamp(min=1.0)
    unset = state.pnl_magnitude <= 0
    updated = torch.where(unset, batch_mean,
                          torch.lerp(state.pnl_magnitude, batch_mean, cfg.magnitude_ema_rate))
    magnitude = torch.where(count > 0, updated, state.pnl_magnitude)
    new_scale = cfg.scaled_magnitude / magnitude.clamp(min=1e-12)
    return {"pnl_magnitude": magnitude,
            "reward_scale": torch.where(magnitude > 0, new_scale, state.reward_scale)}


def update_pnl_magnitude(state: ControllerState, raw_pnl: torch.Tensor, closed: torch.Tensor,
                         cfg: RewardConfig) -> None:
    """``pnl_magnitude_values`` written into ``state`` in place."""
    copy_values_(named_pairs(state, pnl_magnitude_values(state, raw_pnl, closed, cfg)))


def _scale_and_clamp(raw_pnl: torch.Tensor, reward_scale: torch.Tensor, cfg: RewardConfig
                     ) -> torch.Tensor:
    return (raw_pnl * reward_scale).clamp(-cfg.loss, cfg.win).to(torch.float32)


def scale_and_clamp(raw_pnl: torch.Tensor, state: ControllerState, cfg: RewardConfig
                    ) -> torch.Tensor:
    """[B] raw net PnL (currency) -> [B] float32 reward units in [-loss, +win]."""
    return _scale_and_clamp(raw_pnl, state.reward_scale, cfg)


def atom_span_values(state: ControllerState, cfg: RewardConfig) -> dict[str, torch.Tensor]:
    """New v_min, v_max: one EWMA step toward [-loss, +win], floored at +-span_floor."""
    target_min = -max(cfg.loss, cfg.span_floor)
    target_max = max(cfg.win, cfg.span_floor)
    return {"v_min": torch.lerp(state.v_min, torch.full_like(state.v_min, target_min),
                                cfg.span_ema_rate).clamp(max=-cfg.span_floor),
            "v_max": torch.lerp(state.v_max, torch.full_like(state.v_max, target_max),
                                cfg.span_ema_rate).clamp(min=cfg.span_floor)}


def update_atom_span(state: ControllerState, cfg: RewardConfig) -> None:
    """One EWMA step of [v_min, v_max] toward [-loss, +win], floored at +-span_floor."""
    copy_values_(named_pairs(state, atom_span_values(state, cfg)))


def mark_shaping(mark_before: torch.Tensor, mark_after: torch.Tensor, done: torch.Tensor,
                 gamma: float) -> torch.Tensor:
    """[B] float64 potential-based shaping gamma * M(s') - M(s) (M(s') = 0 at a terminal s').

    Args:
        mark_before, mark_after: [B] float64 net mark of the open trade (currency, 0 when
            flat; ``SimState.unrealized_pnl``) before and after the step.
        done: [B] bool s' is terminal (the episode ended; the position was closed).
    """
    return torch.where(done, 0.0, mark_after * gamma) - mark_before


def reward_pipeline_values(raw_pnl: torch.Tensor, closed: torch.Tensor, state: ControllerState,
                           cfg: RewardConfig, shaping: torch.Tensor | None = None
                           ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Shape -> scale -> clamp -> atom span (module docstring), pure: the [B] float32 rewards
    and the new values of the four controllers it moves (pnl_magnitude, reward_scale, v_min,
    v_max); arguments as ``reward_pipeline``."""
    values = pnl_magnitude_values(state, raw_pnl, closed, cfg)
    step_pnl = raw_pnl if shaping is None else raw_pnl + shaping
    reward = _scale_and_clamp(step_pnl, values["reward_scale"], cfg)
    return reward, values | atom_span_values(state, cfg)


def reward_pipeline(raw_pnl: torch.Tensor, closed: torch.Tensor, state: ControllerState,
                    cfg: RewardConfig, shaping: torch.Tensor | None = None) -> torch.Tensor:
    """Shape -> scale -> clamp -> atom span update (module docstring); [B] float32 rewards.

    Args:
        raw_pnl: [B] float64 realized net PnL (currency), 0 where nothing closed; it alone
            drives the pnl_magnitude controller (the money scale of a whole trade).
        closed: [B] bool, a trade closed this step.
        shaping: [B] float64 ``mark_shaping`` term added before scaling, or None.
    """
    reward, values = reward_pipeline_values(raw_pnl, closed, state, cfg, shaping)
    copy_values_(named_pairs(state, values))
    return reward
