"""Training metrics accumulated on the device, read by the host once per log interval.

The step adds into named 0-d float64 sums in place (no host sync); ``read_and_reset``
stacks them into one tensor, copies it to the host in one transfer (the one deliberate sync
of a log interval), turns sums into the logged means and zeroes the sums.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass
class MetricSums:
    """Sums since the last read, each a 0-d float64 device tensor."""

    collect_steps: torch.Tensor  # steps collected
    learn_steps: torch.Tensor  # steps that learned
    env_steps: torch.Tensor  # B per collected step
    q_loss: torch.Tensor  # sum of the batch-mean C51 loss over learning steps
    q_mean: torch.Tensor  # sum of the batch-mean E[Q] of the taken actions (reward units)
    grad_norm: torch.Tensor  # sum of the global gradient norm before clipping
    trades: torch.Tensor  # trades closed
    wins: torch.Tensor  # closed trades with net PnL > 0
    net_pnl: torch.Tensor  # realized net PnL, currency
    hold_actions: torch.Tensor  # Hold actions sent
    abs_position: torch.Tensor  # sum over steps of mean |position| (lots)
    reward: torch.Tensor  # sum over steps of the mean scaled reward

    @staticmethod
    def zeros(device: torch.device | str) -> MetricSums:
        return MetricSums(**{f.name: torch.zeros((), dtype=torch.float64, device=device)
                             for f in fields(MetricSums)})

    def as_dict(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def load_(self, values: dict[str, torch.Tensor]) -> None:
        for name, value in values.items():
            getattr(self, name).copy_(value)

    def read_and_reset(self) -> dict[str, float]:
        """Host copy of the logged means (one transfer), then zero the sums."""
        names = [f.name for f in fields(self)]
        values = dict(zip(names, torch.stack([getattr(self, n) for n in names]).tolist()))
        for n in names:
            getattr(self, n).zero_()
        steps = max(values["collect_steps"], 1.0)
        learns = max(values["learn_steps"], 1.0)
        trades = values["trades"]
        return {
            "l_q": values["q_loss"] / learns if values["learn_steps"] else float("nan"),
            "q_mean": values["q_mean"] / learns if values["learn_steps"] else float("nan"),
            "grad_norm": values["grad_norm"] / learns if values["learn_steps"] else float("nan"),
            "win_rate": values["wins"] / trades if trades else float("nan"),
            "trades_closed": int(trades),
            "net_pnl": values["net_pnl"],
            "pnl_per_trade": values["net_pnl"] / trades if trades else float("nan"),
            "hold_fraction": values["hold_actions"] / max(values["env_steps"], 1.0),
            "mean_abs_position": values["abs_position"] / steps,
            "mean_reward": values["reward"] / steps,
            "env_steps": int(values["env_steps"]),
            "learn_steps": int(values["learn_steps"]),
        }
