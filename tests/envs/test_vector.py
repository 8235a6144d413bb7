"""The Gymnasium VectorEnv wrapper: spaces, autoreset semantics, and agreement with the sim."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from lobsurf.data.store import Store
from lobsurf.envs import make_vec_env
from lobsurf.sim import BatchedLobEnv, SimConfig
from lobsurf.sim.books import random_walk_book


def test_spaces_and_observations_from_a_store(tiny_store: Store) -> None:
    env = make_vec_env(tiny_store.path, 3, window=8)
    obs, info = env.reset(seed=3)
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert obs["book"].shape == (3, 8, 40) and obs["agent"].shape == (3, 3)
    assert env.observation_space.contains(obs)
    # newest snapshot: best bid below the mid, best ask above, in ticks
    assert (obs["book"][:, -1, 0] < 0).all() and (obs["book"][:, -1, 10] > 0).all()
    assert (obs["agent"] == 0).all()


def test_rewards_and_autoreset_match_the_batched_sim() -> None:
    book = random_walk_book(400, 2, seed=4)
    cfg = dict(window=4, max_episode_steps=7, fee_per_lot=0.3, seed=9)
    env = make_vec_env(book, 5, **cfg)
    sim = BatchedLobEnv(book, 5, SimConfig(**cfg))
    env.reset()
    sim.reset()
    rng = np.random.default_rng(0)
    ended_any = False
    for _ in range(30):
        a = rng.integers(0, 11, 5)
        obs, reward, terminated, truncated, info = env.step(a)
        r = sim.step(torch.as_tensor(a))
        np.testing.assert_array_equal(reward, r.reward.numpy())
        np.testing.assert_array_equal(truncated, r.episode_end.numpy())
        np.testing.assert_array_equal(info["trade_closed"], r.trade_closed.numpy())
        assert not terminated.any()
        np.testing.assert_array_equal(obs["agent"][:, 0], sim.state.position.numpy())
        if truncated.any():
            ended_any = True
            assert (info["_final_obs"] == truncated).all()
            assert (obs["agent"][truncated, 0] == 0).all()  # closed at market, new episode
            assert info["final_obs"]["book"].shape == (5, 4, 40)
    assert ended_any


def test_invalid_actions_are_refused() -> None:
    # -1 used to index the order table from the end (Sell 5); floats were truncated.
    import pytest

    envs = make_vec_env(random_walk_book(400, num_segments=1), num_envs=3, window=4, seed=0)
    envs.reset(seed=0)
    for bad in ([0, 0, -1], [0, 0, 11], [0, 0], [1.5, 0.0, 0.0], [[0, 0, 0]]):
        with pytest.raises(ValueError, match="actions must be 3 integers in"):
            envs.step(np.asarray(bad))
    _, reward, _, _, _ = envs.step(np.array([0, 10, 5], dtype=np.int32))
    assert reward.shape == (3,)
