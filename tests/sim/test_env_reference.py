"""Batched simulator == slow reference, exactly, on random actions over several books."""

from __future__ import annotations

import pytest
import torch

from lobsurf.data.dataset import load_book_tensors
from lobsurf.data.store import Store
from lobsurf.sim import SimConfig
from lobsurf.sim.books import random_walk_book
from tests.conftest import write_store
from tests.sim.harness import compare_runs, compared_env

CONFIGS = [
    SimConfig(window=8, latency_rows=0, stride=1, max_episode_steps=25, seed=1),
    SimConfig(window=4, latency_rows=2, stride=3, max_episode_steps=40, fee_per_lot=0.85,
              fee_bps=0.5, position_limit_lots=7, seed=2),
    SimConfig(window=16, latency_rows=1, stride=2, max_episode_steps=1000,
              order_sizes_lots=(3, 20, 60), position_limit_lots=80, fee_per_lot=1.2, seed=3),
]


def random_actions(cfg: SimConfig, steps: int, envs: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.num_actions, (steps, envs), generator=g)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["plain", "fees-latency-stride", "big-orders"])
def test_matches_reference_on_store_books(tiny_store: Store, cfg: SimConfig) -> None:
    # tiny_store: random-walk books of tests/conftest through the real store and loader
    book = load_book_tensors(tiny_store)
    trades = compare_runs(book, cfg, num_envs=6, actions=random_actions(cfg, 150, 6, cfg.seed))
    assert trades > 20


@pytest.mark.parametrize("cfg", CONFIGS, ids=["plain", "fees-latency-stride", "big-orders"])
def test_matches_reference_with_empty_levels(cfg: SimConfig) -> None:
    # sizes include zeros and are small, so big orders walk all levels and fill partially
    book = random_walk_book(600, num_segments=3, seed=cfg.seed, max_size_lots=8)
    trades = compare_runs(book, cfg, num_envs=5, actions=random_actions(cfg, 150, 5, 7))
    assert trades > 20


def test_matches_reference_on_synthetic_store(tmp_path) -> None:
    # books from the project's synthetic order-flow generator (lobsurf.data.synth)
    from lobsurf.data.synth import SynthConfig, generate_day

    synth = SynthConfig(snapshots_per_day=1500, days=2, seed=5)
    chunks = [c for day in range(synth.days) for c in generate_day(synth, day)]
    book = load_book_tensors(write_store(tmp_path / "synth", chunks, gap_ns=2 * 3600 * 10**9))
    assert book.num_segments == 2
    cfg = CONFIGS[1]
    trades = compare_runs(book, cfg, num_envs=6, actions=random_actions(cfg, 150, 6, 11))
    assert trades > 20


# ---- passive orders: the batched env == the plain-Python reference, exactly -------------
PASSIVE = dict(passive_orders=True, order_sizes_lots=(1, 2, 3), position_limit_lots=5,
               fee_per_lot=0.5, fee_bps=0.2, maker_fee_per_lot=-0.2)
PASSIVE_CONFIGS = {
    "risk-averse-s1-l0": SimConfig(window=2, stride=1, latency_rows=0, max_episode_steps=30,
                                   queue_model="risk_averse", seed=1, **PASSIVE),
    "probabilistic-s3-l1": SimConfig(window=4, stride=3, latency_rows=1, max_episode_steps=25,
                                     queue_model="probabilistic", queue_power=2, seed=2,
                                     maker_fee_bps=-0.05, **PASSIVE),
    "probabilistic-s4-l4": SimConfig(window=3, stride=4, latency_rows=4, max_episode_steps=12,
                                     queue_model="probabilistic", queue_power=1, seed=3,
                                     **PASSIVE),
    "risk-averse-s2-l1": SimConfig(window=2, stride=2, latency_rows=1, max_episode_steps=1000,
                                   queue_model="risk_averse", seed=4, **PASSIVE),
}
# Hold most often, so orders rest a while; then posts, market orders and cancels
KIND_WEIGHTS = {"hold": 8.0, "market": 1.0, "post": 1.5, "cancel": 1.0}


def passive_actions(cfg: SimConfig, steps: int, envs: int, seed: int) -> torch.Tensor:
    """[T, B] random actions mixing holds, market orders, posts and cancels."""
    n = len(cfg.order_sizes_lots)
    kinds = ["hold"] + ["market"] * 2 * n + ["post"] * 2 * n + ["cancel"] * 2
    weights = torch.tensor([KIND_WEIGHTS[k] / kinds.count(k) for k in kinds])
    g = torch.Generator().manual_seed(seed)
    return torch.multinomial(weights, steps * envs, replacement=True, generator=g).view(steps,
                                                                                       envs)


@pytest.mark.parametrize("name", list(PASSIVE_CONFIGS))
def test_passive_orders_match_the_reference(name: str) -> None:
    from tests.sim.passive_books import queue_market

    cfg = PASSIVE_CONFIGS[name]
    book = queue_market(900, seed=cfg.seed, segments=2, gap_prob=0.2, jump_prob=0.03)
    env = compared_env(book, cfg, num_envs=4, actions=passive_actions(cfg, 110, 4, cfg.seed))
    exercised(env)


def exercised(env) -> None:
    """The run closed trades and filled resting orders."""
    assert int(env.stats.trades.sum()) > 8
    assert int(env.passive_stats.maker_lots.sum()) > 20


def test_passive_orders_match_the_reference_on_jumping_books() -> None:
    # random prints unrelated to the sizes, levels redrawn each row, empty levels: the
    # resting orders' edge cases (prices out of view, prints larger than the level)
    cfg = PASSIVE_CONFIGS["probabilistic-s3-l1"]
    book = random_walk_book(700, num_segments=3, seed=9, max_size_lots=8, trades=True)
    exercised(compared_env(book, cfg, num_envs=4, actions=passive_actions(cfg, 110, 4, 5)))


@pytest.mark.slow
@pytest.mark.parametrize("model,power", [("risk_averse", 3), ("probabilistic", 1),
                                         ("probabilistic", 3), ("probabilistic", 5)])
@pytest.mark.parametrize("stride,latency", [(1, 0), (1, 1), (3, 0), (3, 2), (5, 5)])
def test_passive_orders_match_the_reference_sweep(model, power, stride, latency) -> None:
    from tests.sim.passive_books import queue_market

    cfg = SimConfig(window=3, stride=stride, latency_rows=latency, max_episode_steps=20,
                    queue_model=model, queue_power=power, seed=stride * 7 + latency,
                    **{**PASSIVE, "maker_fee_per_lot": -0.1, "maker_fee_bps": 0.3})
    book = queue_market(1200, seed=power + stride, segments=3, gap_prob=0.3, jump_prob=0.02)
    exercised(compared_env(book, cfg, num_envs=6, actions=passive_actions(cfg, 150, 6, power)))
