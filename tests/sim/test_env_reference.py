"""Batched simulator == slow reference, exactly, on random actions over several books."""

from __future__ import annotations

import pytest
import torch

from lobsurf.data.dataset import load_book_tensors
from lobsurf.data.store import Store
from lobsurf.sim import SimConfig
from lobsurf.sim.books import random_walk_book
from tests.conftest import write_store
from tests.sim.harness import compare_runs

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
