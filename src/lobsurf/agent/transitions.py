"""A batch of transitions as the replay stores them, and its packing by dtype.

``Transitions`` holds what rebuilds a transition (dataset rows, the agent's own state at
both ends, action, reward, done, trade_closed, the outcome labels), every field [B]. The
replay keeps the fields packed (``PACKING``: one [C, k] tensor per dtype, a field a
column), so a write or a gather of every field is one kernel per dtype (lobsurf.agent.replay).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass
class Transitions:
    """A batch of transitions, every field [B]."""

    row: torch.Tensor  # int64 dataset row of the state's newest snapshot
    position: torch.Tensor  # int64 lots
    time_in_trade: torch.Tensor  # int64 steps
    unrealized_pnl: torch.Tensor  # float64 currency
    action: torch.Tensor  # int64
    reward: torch.Tensor  # float32 reward units (scaled, clamped)
    done: torch.Tensor  # bool: the episode ended (terminal: no bootstrap)
    trade_closed: torch.Tensor  # bool: a trade closed (V's done-gate, outcome labels)
    next_row: torch.Tensor
    next_position: torch.Tensor
    next_time_in_trade: torch.Tensor
    next_unrealized_pnl: torch.Tensor
    outcome_valid: torch.Tensor  # bool: the trade this action opened has closed since
    outcome_win: torch.Tensor  # bool: ... with net PnL > 0


_DTYPES = {"unrealized_pnl": torch.float64, "next_unrealized_pnl": torch.float64,
           "reward": torch.float32, "done": torch.bool, "trade_closed": torch.bool,
           "outcome_valid": torch.bool,
           "outcome_win": torch.bool}
#: the fields the outcome labels write, in this order (the last two of the bool pack)
OUTCOME_FIELDS = ("outcome_valid", "outcome_win")


def _packing() -> tuple[tuple[torch.dtype, tuple[str, ...]], ...]:
    groups: dict[torch.dtype, list[str]] = {}
    for f in fields(Transitions):
        groups.setdefault(_DTYPES.get(f.name, torch.int64), []).append(f.name)
    packing = tuple((dtype, tuple(names)) for dtype, names in groups.items())
    assert dict(packing)[torch.bool][-2:] == OUTCOME_FIELDS
    return packing


#: the storage layout: the fields packed by dtype (field order), one [C, k] tensor per dtype
#: and a field a column, so a write or a gather of every field is one kernel per dtype (four)
#: rather than one per field (fourteen)
PACKING = _packing()


def pack(batch: Transitions) -> tuple[torch.Tensor, ...]:
    """[B] fields -> one [B, k] tensor per ``PACKING`` group."""
    return tuple(torch.stack([getattr(batch, name) for name in names], 1)
                 for _, names in PACKING)


def unpack(packs: tuple[torch.Tensor, ...]) -> Transitions:
    """One [N, k] tensor per ``PACKING`` group -> Transitions of its [N] columns (views)."""
    return Transitions(**{name: packed[:, j] for packed, (_, names) in zip(packs, PACKING)
                          for j, name in enumerate(names)})
