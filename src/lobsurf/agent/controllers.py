"""Named controller state: every adaptive scalar of the learner, declared once.

Each controller is one field of ``ControllerState``, declared with ``controller(...)``:
its bootstrap value, its bounds and a one-line meaning. That declaration is the only place
a bootstrap exists: ``CONTROLLERS`` (the registry) is read from the fields, the device
tensors are made from it, the table goes into ``metrics.jsonl`` and every checkpoint. The
original system kept these in numbered slots of one array and lost hours to bootstraps that
disagreed with constants elsewhere (change log: clamp bounds bootstrapped at +-0.5 while the
constants said WIN=1, LOSS=3); names and one declaration make that impossible.

Values are 0-d float64 device tensors, updated in place (``copy_``) with the new values the
pure update functions of ``lobsurf.agent.reward`` and friends return (``*_values``;
lobsurf.writeback), so a captured CUDA graph always reads and writes the live values
at stable addresses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from lobsurf.writeback import copy_values_, named_pairs


@dataclass(frozen=True)
class ControllerSpec:
    """One controller's declaration."""

    name: str
    bootstrap: float
    low: float
    high: float
    meaning: str


def controller(bootstrap: float, low: float, high: float, meaning: str) -> Any:
    """Declare a controller as a ``ControllerState`` field (the name is the field's)."""
    return field(metadata={"bootstrap": bootstrap, "low": low, "high": high, "meaning": meaning})


@dataclass
class ControllerState:
    """Every adaptive scalar, a 0-d float64 tensor on the training device."""

    pnl_magnitude: torch.Tensor = controller(
        0.0, 0.0, math.inf,
        "EMA of mean |net PnL| per closed trade, currency (0 = none seen yet)")
    reward_scale: torch.Tensor = controller(
        1.0, 1e-12, 1e12,
        "reward units per currency unit: scaled_magnitude / pnl_magnitude")
    v_min: torch.Tensor = controller(
        -1.0, -1e6, -1.0,
        "lowest C51 atom; EWMA toward -clamp loss, never above -span_floor")
    v_max: torch.Tensor = controller(
        1.0, 1.0, 1e6,
        "highest C51 atom; EWMA toward +clamp win, never below +span_floor")
    per_beta: torch.Tensor = controller(
        0.4, 0.0, 1.0,
        "PER importance-weight exponent, annealed linearly to 1")
    action_entropy: torch.Tensor = controller(
        math.log(11.0), 0.0, 10.0,
        "EMA of the entropy (nats) of the histogram of actions sent to the simulator")
    hold_fraction: torch.Tensor = controller(
        1.0, 0.0, 1.0,
        "EMA of the share of Hold among the actions sent to the simulator")
    sac_alpha: torch.Tensor = controller(
        0.01, 1e-4, 2.0,
        "entropy bonus weight of pi; ramps up fast below the entropy target, decays slowly")
    distill_tau: torch.Tensor = controller(
        5.0, 1.0, 50.0,
        "temperature of pi's distillation target softmax(E[Q_target] / tau); co-tuned with alpha")
    kl_beta: torch.Tensor = controller(
        0.005, 0.0, 1.0,
        "weight of the KL reference reward beta * log pi_ref(a), stored in replay")
    gate_threshold: torch.Tensor = controller(
        0.3, 0.01, 0.99,
        "confidence gate: a non-Hold action is held when Q's P(return > 0) is below this")

    @staticmethod
    def bootstrap(device: torch.device | str, overrides: dict[str, float] | None = None
                  ) -> ControllerState:
        """Fresh state at the declared bootstraps (``overrides`` replace some, e.g. per_beta
        from ReplayConfig.beta_start); every value is checked against its bounds."""
        overrides = overrides or {}
        unknown = set(overrides) - {s.name for s in CONTROLLERS}
        if unknown:
            raise KeyError(f"unknown controllers: {sorted(unknown)}")
        values = {}
        for spec in CONTROLLERS:
            value = overrides.get(spec.name, spec.bootstrap)
            if not spec.low <= value <= spec.high:
                raise ValueError(f"controller {spec.name}: start value {value} outside "
                                 f"[{spec.low}, {spec.high}]")
            values[spec.name] = torch.tensor(value, dtype=torch.float64, device=device)
        return ControllerState(**values)

    def as_dict(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def load_(self, values: dict[str, torch.Tensor | float]) -> None:
        """Copy saved values in place (addresses stay stable); names must match exactly."""
        if set(values) != {f.name for f in fields(self)}:
            raise KeyError(f"controller names differ: saved {sorted(values)}")
        for name, value in values.items():
            getattr(self, name).copy_(torch.as_tensor(value, dtype=torch.float64))


#: The registry: one spec per ControllerState field, in declaration order.
CONTROLLERS: tuple[ControllerSpec, ...] = tuple(
    ControllerSpec(name=f.name, **f.metadata) for f in fields(ControllerState))


def controller_bounds(name: str) -> tuple[float, float]:
    """(low, high) of the controller ``name``, from its declaration."""
    spec = next((s for s in CONTROLLERS if s.name == name), None)
    if spec is None:
        raise KeyError(f"unknown controller {name!r}")
    return spec.low, spec.high


def controller_table() -> list[dict[str, Any]]:
    """The registry as JSON-able rows (infinite bounds as strings)."""
    def num(x: float) -> float | str:
        return x if math.isfinite(x) else str(x)

    return [{"name": s.name, "bootstrap": num(s.bootstrap), "low": num(s.low),
             "high": num(s.high), "meaning": s.meaning} for s in CONTROLLERS]


def per_beta_values(state: ControllerState, start: float, anneal_steps: int
                    ) -> dict[str, torch.Tensor]:
    """New per_beta: + (1 - start) / anneal_steps, capped at 1 (one step per learning step)."""
    return {"per_beta": (state.per_beta + (1.0 - start) / anneal_steps).clamp(max=1.0)}


def action_histogram(actions: torch.Tensor, num_actions: int) -> torch.Tensor:
    """[A] float64 counts of [B] int64 actions (a one-hot sum: exact integer counts)."""
    values = torch.arange(num_actions, device=actions.device)
    return (actions[:, None] == values).sum(0, dtype=torch.float64)


def _histogram_emas(state: ControllerState, counts: torch.Tensor, num_sent: int, rate: float
                    ) -> dict[str, torch.Tensor]:
    p = counts / num_sent
    entropy = -(p * torch.log(p.clamp(min=1e-30))).sum()
    return {"action_entropy": torch.lerp(state.action_entropy, entropy, rate),
            "hold_fraction": torch.lerp(state.hold_fraction, p[0], rate)}


def action_histogram_values(state: ControllerState, actions: torch.Tensor, num_actions: int,
                            rate: float) -> dict[str, torch.Tensor]:
    """New action_entropy and hold_fraction: EMA steps toward the entropy and the Hold
    share of the histogram of the actions actually sent ([B] int64; rate in (0, 1])."""
    return _histogram_emas(state, action_histogram(actions, num_actions), actions.shape[0],
                           rate)


def action_histogram_update(state: ControllerState, actions: torch.Tensor, num_actions: int,
                            rate: float) -> torch.Tensor:
    """EMA updates of action_entropy and hold_fraction from the actions actually sent.

    Args:
        actions: [B] int64 actions sent to the simulator.
        rate: EMA rate in (0, 1].

    Returns:
        [A] float64 histogram counts of this step (for metrics).
    """
    counts = action_histogram(actions, num_actions)
    copy_values_(named_pairs(state, _histogram_emas(state, counts, actions.shape[0], rate)))
    return counts
