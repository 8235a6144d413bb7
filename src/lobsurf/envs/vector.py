"""Gymnasium VectorEnv over the batched simulator, for other RL libraries.

Autoreset: ``AutoresetMode.SAME_STEP``. When an env's episode ends (step limit or segment
end; its position was closed at market on that step), ``truncated`` is True and the
returned observation already belongs to the next episode; the last observation of the
finished episode is in ``info["final_obs"]`` (rows where ``info["_final_obs"]`` is True).
``terminated`` is always False: episodes end by time, not by a terminal state. A closed
trade is ``info["trade_closed"]`` (the simulator's ``done``); the reward is the trade's
realized net PnL in the instrument's currency on that step and 0 otherwise.

Observation per env (a Dict): ``book`` [K, 40] float32 = bid prices, ask prices (ticks
relative to the newest mid), bid sizes, ask sizes (lots) of the last K snapshots, oldest
first; ``agent`` [3] float32 = position (lots), unrealized PnL (currency), time in trade
(steps). With ``passive_orders`` the action space grows by the posts and cancels
(lobsurf.sim.config) and ``agent`` by 8: per side (bid, then ask) whether an order rests
(0/1), its remaining lots, its queue ahead as a fraction of the size shown at its price
(0 front, 1 back or out of view) and its age in steps (lobsurf.sim.passive.PassiveState).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from lobsurf.data.dataset import BookTensors, gather_window
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv

#: features per snapshot: 10 bid prices, 10 ask prices, 10 bid sizes, 10 ask sizes
BOOK_FEATURES = 40
AGENT_FEATURES = 3
#: agent features per side of a resting order: resting, remaining lots, queue fraction, age
RESTING_FEATURES = 4


class LobVectorEnv(VectorEnv):
    """``num_envs`` simulator envs as one Gymnasium VectorEnv (numpy in and out)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, book: BookTensors, num_envs: int, cfg: SimConfig) -> None:
        self.sim = BatchedLobEnv(book, num_envs, cfg)
        self.num_envs = num_envs
        k = cfg.window
        self.agent_features = AGENT_FEATURES + (2 * RESTING_FEATURES if cfg.passive_orders
                                                else 0)
        self.single_observation_space = gym.spaces.Dict({
            "book": gym.spaces.Box(-np.inf, np.inf, (k, BOOK_FEATURES), np.float32),
            "agent": gym.spaces.Box(-np.inf, np.inf, (self.agent_features,), np.float32),
        })
        self.single_action_space = gym.spaces.Discrete(cfg.num_actions)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def _observe(self, rows: torch.Tensor, agent: torch.Tensor) -> dict[str, np.ndarray]:
        w = gather_window(self.sim.book, rows, self.sim.cfg.window)
        mid2 = self.sim.mid2_ticks[rows].double()[:, None, None]  # [B, 1, 1] twice the mid
        px = torch.cat((w.bid_px_ticks, w.ask_px_ticks), 2).double()
        rel = (2 * px - mid2) / 2
        book = torch.cat((rel, w.bid_sz.double(), w.ask_sz.double()), 2).float()
        return {"book": book.cpu().numpy(), "agent": agent.float().cpu().numpy()}

    def _agent(self) -> torch.Tensor:
        s = self.sim.state
        own = torch.stack((s.position.double(), s.unrealized_pnl, s.time_in_trade.double()), 1)
        ps = self.sim.passive_state
        if ps is None:
            return own
        resting = torch.stack((ps.resting.double(), ps.remaining.double(), ps.queue_fraction,
                               ps.age.double()), 2)  # [B, 2 sides, 4]
        return torch.cat((own, resting.flatten(1)), 1)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict]:
        if seed is not None:
            self.sim.generator.manual_seed(seed)
        self.sim.reset()
        self.sim.reset_stats()
        return self._observe(self.sim.state.cursor, self._agent()), {}

    def _checked(self, actions: Any) -> np.ndarray:
        # The simulator indexes its order table with the action: -1 would silently mean the
        # last action (Sell 5) and 1.7 would truncate, so anything but B valid ints is refused.
        a = np.asarray(actions)
        n = self.single_action_space.n
        if (a.shape != (self.num_envs,) or not np.issubdtype(a.dtype, np.integer)
                or a.min() < 0 or a.max() >= n):
            raise ValueError(f"actions must be {self.num_envs} integers in [0, {n}), got "
                             f"shape {a.shape} dtype {a.dtype}: {a.ravel()[:8]}")
        return a

    def step(self, actions: np.ndarray):
        s = self.sim.state
        action = torch.as_tensor(self._checked(actions), dtype=torch.int64, device=self.sim.device)
        # the finished episode's last rows, in case this step ends it (flat after the close)
        final_rows = torch.minimum(s.cursor + self.sim.cfg.stride, s.stop - 1)
        result = self.sim.step(action)
        obs = self._observe(s.cursor, self._agent())
        ended = result.episode_end.cpu().numpy()
        info: dict[str, Any] = {"trade_closed": result.trade_closed.cpu().numpy()}
        if ended.any():
            zeros = torch.zeros(self.num_envs, self.agent_features, device=self.sim.device)
            info["final_obs"] = self._observe(final_rows, zeros)
            info["_final_obs"] = ended
        return (obs, result.reward.cpu().numpy(), np.zeros(self.num_envs, bool), ended, info)


def make_vec_env(store: Any, num_envs: int, device: torch.device | str = "cpu",
                 **cfg: Any) -> LobVectorEnv:
    """Gymnasium VectorEnv over a store (path, ``Store`` or ``BookTensors``).

    Args:
        store: a store folder, an open ``lobsurf.data.store.Store`` or loaded BookTensors.
        num_envs: B.
        device: where the simulator runs (observations come back as numpy).
        **cfg: ``SimConfig`` fields (window, latency_rows, fee_per_lot, ...).
    """
    from lobsurf.data.dataset import load_book_tensors
    from lobsurf.data.store import Store

    if isinstance(store, BookTensors):
        book = store.to(device)
    else:
        book = load_book_tensors(store if isinstance(store, Store) else Store.open(store), device)
    return LobVectorEnv(book, num_envs, SimConfig(**cfg))
