"""The Gymnasium VectorEnv wrapper: spaces, autoreset semantics, and agreement with the sim."""

from __future__ import annotations

import numpy as np
import pytest
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
    envs = make_vec_env(random_walk_book(400, num_segments=1), num_envs=3, window=4, seed=0)
    envs.reset(seed=0)
    for bad in ([0, 0, -1], [0, 0, 11], [0, 0], [1.5, 0.0, 0.0], [[0, 0, 0]]):
        with pytest.raises(ValueError, match="actions must be 3 integers in"):
            envs.step(np.asarray(bad))
    _, reward, _, _, _ = envs.step(np.array([0, 10, 5], dtype=np.int32))
    assert reward.shape == (3,)


def _expected_book(book, row: int, window: int) -> np.ndarray:
    # [K, 40] from the book with plain loops: prices in ticks relative to the mid of `row`
    # (half-tick values where the spread is odd), then sizes in lots.
    mid = (int(book.bid_px_ticks[row, 0]) + int(book.ask_px_ticks[row, 0])) / 2
    out = np.zeros((window, 40))
    for k, r in enumerate(range(row - window + 1, row + 1)):
        for lvl in range(10):
            out[k, lvl] = int(book.bid_px_ticks[r, lvl]) - mid
            out[k, 10 + lvl] = int(book.ask_px_ticks[r, lvl]) - mid
            out[k, 20 + lvl] = int(book.bid_sz[r, lvl])
            out[k, 30 + lvl] = int(book.ask_sz[r, lvl])
    return out


def test_observation_contents_are_ticks_lots_and_the_open_trade() -> None:
    # One env, no latency: buy 1 lot, hold, sell it. Every observation is checked against
    # the book and the trade worked out here: the book part in ticks (a 1-tick spread puts
    # the best bid at -0.5), position in lots, unrealized PnL in currency net of the
    # entry fee, time in trade in steps.
    fee = 0.25
    book = random_walk_book(400, 1, seed=11)
    env = make_vec_env(book, 1, window=5, latency_rows=0, fee_per_lot=fee,
                       max_episode_steps=100, seed=2)
    obs, _ = env.reset()
    tick_value = book.tick_size * book.multiplier
    entry_ticks = None
    script = [1, 0, 0, 0, 6, 0]  # Buy 1, Hold x3, Sell 1, Hold
    expected_position = [1, 1, 1, 1, 0, 0]
    saw_odd_spread = False
    for step, action in enumerate(script):
        row = int(env.sim.state.cursor[0])
        np.testing.assert_array_equal(obs["book"][0], _expected_book(book, row, 5))
        saw_odd_spread |= (int(book.ask_px_ticks[row, 0]) - int(book.bid_px_ticks[row, 0])) % 2 == 1
        if action == 1:
            entry_ticks = int(book.ask_px_ticks[row, 0])  # a 1-lot buy takes the best ask
        obs, _, _, truncated, _ = env.step(np.array([action]))
        assert not truncated.any()
        row = int(env.sim.state.cursor[0])
        position, unrealized, time_in_trade = obs["agent"][0]
        assert position == expected_position[step]
        if expected_position[step]:
            mid = (int(book.bid_px_ticks[row, 0]) + int(book.ask_px_ticks[row, 0])) / 2
            want = (mid - entry_ticks) * tick_value - fee
            assert unrealized == pytest.approx(want, rel=1e-6), (step, unrealized, want)
            assert time_in_trade == step + 1  # steps since the buy, the buy's step counting 1
        else:
            assert unrealized == 0 and time_in_trade == 0
    assert saw_odd_spread  # so a half-tick scale of the prices would have shown


def test_passive_orders_add_their_actions_and_the_resting_orders_to_the_observation() -> None:
    from tests.sim.passive_books import queue_market

    book = queue_market(400, seed=2)
    cfg = dict(window=4, stride=2, max_episode_steps=9, passive_orders=True, seed=1)
    env = make_vec_env(book, 3, **cfg)
    sim = BatchedLobEnv(book, 3, SimConfig(**cfg))
    assert env.single_action_space.n == 23 and env.single_observation_space["agent"].shape == (11,)
    obs, _ = env.reset()
    sim.reset()
    rng = np.random.default_rng(1)
    rested = False
    for _ in range(20):
        a = rng.choice([0, 11, 16, 21, 22], 3)  # hold, post bid 1, post ask 1, cancels
        obs, reward, _, truncated, info = env.step(a)
        r = sim.step(torch.as_tensor(a))
        np.testing.assert_array_equal(reward, r.reward.numpy())
        ps = sim.passive_state
        want = np.concatenate([torch.stack([ps.resting[:, i].double(),
                                            ps.remaining[:, i].double(), ps.queue_fraction[:, i],
                                            ps.age[:, i].double()], 1).numpy()
                               for i in (0, 1)], 1)
        np.testing.assert_allclose(obs["agent"][:, 3:], want, rtol=1e-6)
        rested |= bool(ps.resting.any())
        if truncated.any():
            assert info["final_obs"]["agent"].shape == (3, 11)
    assert rested
