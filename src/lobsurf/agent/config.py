"""Configuration of the learner: the network, the replay buffer, the losses and the rewards.

Frozen dataclasses, one per part, each field with its meaning and unit; validation in
``__post_init__`` names the field. ``lobsurf.training.config.RunConfig`` composes them with the
data, simulator and run settings. Adaptive scalars (reward scale, atom span, PER beta ...)
are not here: they are controllers, declared once in ``lobsurf.agent.controllers``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

def _check_positive(obj: object, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(obj, name)
        if not value > 0:  # NaN fails too
            raise ValueError(f"{name} must be > 0, got {value}")


def _check_unit_interval(obj: object, names: tuple[str, ...], closed_low: bool = True) -> None:
    for name in names:
        value = getattr(obj, name)
        ok = (0 <= value <= 1) if closed_low else (0 < value <= 1)
        if not ok:
            raise ValueError(f"{name} must be in {'[' if closed_low else '('}0, 1], got {value}")


@dataclass(frozen=True)
class NetworkConfig:
    """Shape of the heads on the encoder embedding (the encoder has its own EncoderConfig)."""

    num_atoms: int = 21
    """C51 atoms per action (support spread evenly over the controllers' [v_min, v_max])."""
    q_hidden: int = 256
    """Width of the C51 head's hidden noisy layer."""
    noisy_sigma0: float = 0.5
    """Factorised-Gaussian noisy layers: initial sigma = noisy_sigma0 / sqrt(fan_in)
    (Fortunato et al. 2018, sec. 3.2)."""
    state_time_scale_steps: float = 100.0
    """Time in trade enters the network as log1p(steps) / log1p(this): 1 at this many steps."""
    state_pnl_clip: float = 5.0
    """Unrealized PnL enters in units of a typical closed trade's |PnL|, clipped to +-this."""

    def __post_init__(self) -> None:
        if self.num_atoms < 2:
            raise ValueError(f"num_atoms must be >= 2, got {self.num_atoms}")
        if self.q_hidden < 1:
            raise ValueError(f"q_hidden must be >= 1, got {self.q_hidden}")
        _check_positive(self, ("noisy_sigma0", "state_time_scale_steps", "state_pnl_clip"))


@dataclass(frozen=True)
class ReplayConfig:
    """Prioritized replay on the device (Schaul et al. 2016, proportional variant)."""

    capacity: int = 1 << 17
    """Transitions kept (a ring: the oldest is overwritten)."""
    alpha: float = 0.6
    """Sampling probability proportional to priority ** alpha (0 = uniform)."""
    beta_start: float = 0.4
    """Importance-weight exponent at step 0 (the per_beta controller's bootstrap)."""
    beta_anneal_steps: int = 20_000
    """Steps over which per_beta rises linearly from its bootstrap to 1."""
    priority_eps: float = 1e-3
    """Added to |per-sample loss| so that no stored transition has zero probability."""

    def __post_init__(self) -> None:
        if self.capacity < 2:
            raise ValueError(f"capacity must be >= 2, got {self.capacity}")
        _check_unit_interval(self, ("alpha", "beta_start"))
        _check_positive(self, ("beta_anneal_steps", "priority_eps"))


@dataclass(frozen=True)
class RewardConfig:
    """The reward pipeline: scale raw net PnL into the atom span, clamp, move the span."""

    win: float = 1.0
    """Upper clamp of a scaled reward (WIN): the positive reward ceiling."""
    loss: float = 3.0
    """Lower clamp is -LOSS: losses may be 3x larger than wins (loss aversion)."""
    scaled_magnitude: float = 0.5
    """reward_scale maps the running mean |net PnL| of closed trades to this many reward units."""
    magnitude_ema_rate: float = 0.01
    """EMA rate of the running |net PnL| per closed trade (per step with a closed trade)."""
    span_ema_rate: float = 0.001
    """EWMA rate at which [v_min, v_max] follows [-loss, +win] (half-life ~700 steps)."""
    span_floor: float = 1.0
    """The span never shrinks inside [-span_floor, +span_floor]."""
    mark_to_market: bool = True
    """Add the potential-based shaping gamma * M(s') - M(s) to the realized PnL, M the open
    trade's net mark at the mid (currency): the reward of a step holds its mark change, so
    a held position is credited while the move happens, not only when the trade closes.
    Over a trade the terms telescope to its realized net PnL (exactly so at gamma 1), and
    potential-based shaping leaves the optimal policy unchanged (Ng, Harada, Russell 1999).
    False: the realized PnL alone (the original's sparse reward on closed trades)."""

    def __post_init__(self) -> None:
        _check_positive(self, ("win", "loss", "scaled_magnitude", "span_floor"))
        _check_unit_interval(self, ("magnitude_ema_rate", "span_ema_rate"), closed_low=False)


@dataclass(frozen=True)
class LearnerConfig:
    """Losses, optimiser and target network."""

    batch_size: int = 0
    """Transitions sampled per learning step; 0 = the number of environments B."""
    gamma: float = 0.99
    """Per-step discount of the C51 Bellman target."""
    lr: float = 1e-3
    """Adam learning rate (every loss is a batch mean, so it does not depend on B)."""
    adam_eps: float = 1e-5
    """Adam epsilon."""
    grad_clip_norm: float = 10.0
    """Global gradient-norm clip (0 disables)."""
    polyak_tau: float = 0.005
    """Target network <- (1 - tau) target + tau online, every learning step."""
    learning_starts: int = 100
    """Steps that only collect (fill the replay) before the first learning step."""
    n_step: int = 1
    """Bootstrap after this many steps: the C51 target is sum_j gamma^j r_j + gamma^m Z(s_m),
    m <= n (shorter near the newest data and at episode ends); 1 = one-step targets."""
    acting: Literal["thompson", "pi", "greedy"] = "thompson"
    """Training-time action choice: one Thompson sample of Q per action then the gates,
    a sample of pi, or argmax E[Q]."""

    def __post_init__(self) -> None:
        if self.batch_size < 0:
            raise ValueError(f"batch_size must be >= 0, got {self.batch_size}")
        _check_unit_interval(self, ("gamma", "polyak_tau"))
        if not 0 < self.lr < math.inf or not self.adam_eps > 0:
            raise ValueError(f"lr and adam_eps must be > 0, got {self.lr}, {self.adam_eps}")
        if not self.grad_clip_norm >= 0:
            raise ValueError(f"grad_clip_norm must be >= 0, got {self.grad_clip_norm}")
        if self.n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {self.n_step}")
        if self.learning_starts < 0:
            raise ValueError(f"learning_starts must be >= 0, got {self.learning_starts}")
        if self.acting not in ("thompson", "pi", "greedy"):
            raise ValueError(f"acting must be thompson, pi or greedy, got {self.acting!r}")


@dataclass(frozen=True)
class PolicyConfig:
    """The pi head (distilled from target Q, with an auto-tuned entropy bonus), V, KL reference."""

    distill_weight: float = 0.1
    """lambda: weight of the distillation cross-entropy CE(softmax(E[Q_target] / tau), pi)."""
    entropy_target_fraction: float = 0.7
    """The entropy target of alpha's tuning is this fraction of ln(num_actions) nats."""
    ramp_rate: float = 0.01
    """alpha and tau grow by this factor-minus-one per step while entropy is below target."""
    decay_rate: float = 0.0001
    """... and shrink by this per step while it is above (slow: the original's entropy
    collapsed faster than a symmetric controller could recover)."""
    reference_hold_prob: float = 0.5
    """pi_ref: Hold gets this probability, the other actions share the rest equally."""
    value_weight: float = 0.5
    """Weight of the V regression (done-gated: closed trades only)."""
    action_ema_rate: float = 0.01
    """EMA rate of the controllers that read the actions sent to the simulator (their
    entropy, which alpha and tau steer by, and the hold fraction, which the gate steers by)."""

    def __post_init__(self) -> None:
        _check_positive(self, ("distill_weight", "ramp_rate", "decay_rate", "value_weight"))
        _check_unit_interval(self, ("action_ema_rate",), closed_low=False)
        _check_unit_interval(self, ("entropy_target_fraction",), closed_low=False)
        if not 0 < self.reference_hold_prob < 1:
            raise ValueError(f"reference_hold_prob must be in (0, 1), got "
                             f"{self.reference_hold_prob}")


@dataclass(frozen=True)
class GateConfig:
    """The confidence gate and the FRD gate between Thompson sampling and the simulator."""

    enabled: bool = True
    """Apply both gates to Thompson actions (training's default acting)."""
    warmup_steps: int = 100
    """Steps before the gates may fire (a device-side comparison, so capture keeps it live)."""
    max_hold_fraction: float = 0.85
    """The first B x (1 - this) environments are exploration slots, never gated."""
    adjust_rate: float = 1.1
    """The threshold is multiplied (hold below target) or divided (above) by this per step."""
    target_hold_fraction: float = 0.5
    """The hold fraction (EMA of post-gate actions) the threshold steers toward."""
    frd_horizon_index: int = 1
    """Which label horizon the FRD gate reads (index into labels.horizons_snapshots)."""
    frd_min_prob: float = 0.1
    """A buy (sell) is held when P(move beyond costs in its direction) is below this."""

    def __post_init__(self) -> None:
        if self.warmup_steps < 0 or self.frd_horizon_index < 0:
            raise ValueError("warmup_steps and frd_horizon_index must be >= 0")
        _check_unit_interval(self, ("max_hold_fraction", "target_hold_fraction", "frd_min_prob"))
        if not self.adjust_rate > 1:
            raise ValueError(f"adjust_rate must be > 1, got {self.adjust_rate}")


@dataclass(frozen=True)
class AuxConfig:
    """Weights of the auxiliary losses that keep shaping the shared encoder."""

    frd_weight: float = 0.5
    """Future-return-distribution cross-entropy (labels of the state's row)."""
    direction_weight: float = 0.5
    """Direction BCE (labels of the state's row)."""
    outcome_weight: float = 0.5
    """Outcome BCE on the opening states of trades that have closed."""

    def __post_init__(self) -> None:
        for name in ("frd_weight", "direction_weight", "outcome_weight"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
