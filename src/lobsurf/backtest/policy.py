"""The policy interface of the backtest: anything with ``act(env) -> [B] int64 actions``.

Baselines implement it; a learned agent plugs in the same way (gather its K-window at
``env.state.cursor`` with ``lobsurf.data.dataset.gather_window``, build features, pick
actions), so evaluation never depends on a model.
"""

from __future__ import annotations

from typing import Protocol

import torch

from lobsurf.sim.env import BatchedLobEnv


class Policy(Protocol):
    def act(self, env: BatchedLobEnv) -> torch.Tensor:
        """[B] int64 actions in [0, env.cfg.num_actions) for the env's current state."""
        ...
