"""The simulator's actions as the baselines trade them: 0 Hold, 1..n Buy
order_sizes_lots[i-1], n+1..2n Sell them (lobsurf.sim.env)."""

from __future__ import annotations

import torch

from lobsurf.sim.env import BatchedLobEnv


def buy_sell_actions(env: BatchedLobEnv, size_index: int) -> tuple[int, int]:
    """(buy, sell): the actions that trade ``order_sizes_lots[size_index]`` lots."""
    sizes = len(env.cfg.order_sizes_lots)
    if not 0 <= size_index < sizes:
        raise ValueError(f"size_index {size_index} outside the {sizes} order sizes")
    return 1 + size_index, 1 + sizes + size_index


def direction_to_action(direction: torch.Tensor, buy: int, sell: int) -> torch.Tensor:
    """[B] int {-1, 0, +1} -> action (Sell, Hold, Buy)."""
    return torch.where(direction > 0, buy, torch.where(direction < 0, sell, 0))
