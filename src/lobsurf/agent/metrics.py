"""Training metrics accumulated on the device, read by the host once per log interval.

The step adds into named 0-d float64 sums (no host sync): ``added`` gives the new sums, which
the step writes back in place with its other state (lobsurf.writeback); ``take_`` stacks them
into one device tensor and zeroes the sums (device ops), ``means`` turns its host copy into
the logged means; ``read_and_reset`` does both with one transfer (a host sync). The training
loop copies the stack without a sync (lobsurf.training.run.readout). Every key is defined in
docs/training.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

import torch

#: learner sums -> logged per-learning-step means
_LEARN_MEANS = {"loss_q": "l_q", "loss_pi": "l_pi", "loss_value": "l_v", "loss_frd": "l_frd",
                "loss_aux": "l_aux", "policy_entropy": "policy_entropy",
                "agreement": "q_pi_agreement", "q_mean": "q_mean", "grad_norm": "grad_norm"}


@dataclass
class MetricSums:
    """Sums since the last read, each a 0-d float64 device tensor."""

    collect_steps: torch.Tensor  # steps collected
    learn_steps: torch.Tensor  # steps that learned
    env_steps: torch.Tensor  # B per collected step
    loss_q: torch.Tensor  # batch-mean C51 loss, summed over learning steps
    loss_pi: torch.Tensor  # pi distillation - alpha * entropy
    loss_value: torch.Tensor  # done-gated V regression
    loss_frd: torch.Tensor  # FRD cross-entropy
    loss_aux: torch.Tensor  # weighted direction + outcome BCE
    policy_entropy: torch.Tensor  # mean entropy of pi (nats)
    agreement: torch.Tensor  # mean corr(pi, E[Q]) across actions
    q_mean: torch.Tensor  # batch-mean E[Q] of the taken actions (reward units)
    grad_norm: torch.Tensor  # global gradient norm before clipping
    trades: torch.Tensor  # trades closed
    wins: torch.Tensor  # closed trades with net PnL > 0
    net_pnl: torch.Tensor  # realized net PnL, currency
    hold_actions: torch.Tensor  # Hold actions sent
    gated: torch.Tensor  # actions a gate turned into Hold
    abs_position: torch.Tensor  # sum over steps of mean |position| (lots)
    reward: torch.Tensor  # sum over steps of the mean stored reward

    @staticmethod
    def zeros(device: torch.device | str) -> MetricSums:
        return MetricSums(**{f.name: torch.zeros((), dtype=torch.float64, device=device)
                             for f in fields(MetricSums)})

    def as_dict(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def load_(self, values: dict[str, torch.Tensor]) -> None:
        for name, value in values.items():
            getattr(self, name).copy_(value)

    def take_(self) -> torch.Tensor:
        """The sums stacked into one device tensor (field order), then zeroed (device ops)."""
        sums = list(self.as_dict().values())
        stacked = torch.stack(sums)
        torch._foreach_zero_(sums)
        return stacked

    def read_and_reset(self) -> dict[str, float]:
        """Host copy of the logged means (one transfer), then zero the sums."""
        return self.means(self.take_().tolist())

    @staticmethod
    def means(sums: list[float]) -> dict[str, float]:
        """The logged means from the host values of ``take_``'s stack."""
        values = dict(zip([f.name for f in fields(MetricSums)], sums))
        nan = float("nan")
        steps = max(values["collect_steps"], 1.0)
        learns = values["learn_steps"]
        trades = values["trades"]
        env_steps = max(values["env_steps"], 1.0)
        out = {key: values[name] / learns if learns else nan
               for name, key in _LEARN_MEANS.items()}
        out.update({
            "win_rate": values["wins"] / trades if trades else nan,
            "trades_closed": int(trades),
            "net_pnl": values["net_pnl"],
            "pnl_per_trade": values["net_pnl"] / trades if trades else nan,
            "hold_fraction": values["hold_actions"] / env_steps,
            "gated_count": values["gated"] / steps,
            "gated_fraction": values["gated"] / env_steps,
            "mean_abs_position": values["abs_position"] / steps,
            "mean_reward": values["reward"] / steps,
            "env_steps": int(values["env_steps"]),
            "learn_steps": int(learns),
        })
        return out


def added(sums: MetricSums, increments: Mapping[str, torch.Tensor | float]
          ) -> dict[str, torch.Tensor]:
    """The new value of each named sum after adding its increment (pure: written back by
    the caller; a sum is float64 whatever the increment's dtype)."""
    return {name: getattr(sums, name) + value for name, value in increments.items()}
