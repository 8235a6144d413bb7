"""The resting orders' row walk as one Triton kernel (lobsurf.sim.passive_triton): the env
that walks its rows with it equals the slow reference (lobsurf.sim.reference_passive,
which shares no code with it) at every step, on CPU in Triton's interpreter; on a GPU it
equals the PyTorch walk bit for bit, eager and compiled."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lobsurf.models.kernels.triton_support import available_for
from lobsurf.sim import BatchedLobEnv, SimConfig
from lobsurf.sim.books import random_walk_book
from lobsurf.sim.passive_triton import walk_rows_triton
from tests.sim.harness import compared_env
from tests.sim.passive_books import queue_market
from tests.sim.test_env_reference import PASSIVE_CONFIGS, exercised, passive_actions

needs_kernel = pytest.mark.skipif(not available_for(torch.device("cpu")),
                                  reason="needs Triton (its CPU interpreter without CUDA)")


@needs_kernel
@pytest.mark.parametrize("name", [
    "risk-averse-s1-l0", "risk-averse-s2-l1",
    # latency = stride: no rows after the action arrives (the walk's empty case)
    pytest.param("probabilistic-s4-l4", marks=pytest.mark.slow)])
def test_the_kernel_walk_matches_the_reference(name: str) -> None:
    cfg = PASSIVE_CONFIGS[name]
    book = queue_market(900, seed=cfg.seed, segments=2, gap_prob=0.2, jump_prob=0.03)
    exercised(compared_env(book, cfg, num_envs=4, walk_kernel=True,
                           actions=passive_actions(cfg, 110, 4, cfg.seed)))


@needs_kernel
def test_the_kernel_walk_matches_the_reference_with_bps_fees_and_queue_power_3() -> None:
    # the probabilistic model's products and the bps fee's: where fused products would differ
    cfg = dataclasses.replace(PASSIVE_CONFIGS["probabilistic-s3-l1"], queue_power=3,
                              fee_bps=0.7, maker_fee_bps=0.35, max_episode_steps=15)
    book = random_walk_book(500, num_segments=2, seed=4, max_size_lots=8, trades=True)
    exercised(compared_env(book, cfg, num_envs=4, walk_kernel=True,
                           actions=passive_actions(cfg, 80, 4, 11)))


@needs_kernel
def test_an_unknown_queue_model_is_refused() -> None:
    cfg = SimConfig(stride=2, latency_rows=1, passive_orders=True)
    env = BatchedLobEnv(random_walk_book(200, 1, seed=0, trades=True), 1, cfg)
    zeros = torch.zeros(1, 2, dtype=torch.int64)
    money = torch.tensor(0.0, dtype=torch.float64)
    with pytest.raises(ValueError, match="queue model"):
        walk_rows_triton(zeros, zeros.double(), zeros.bool(), zeros,
                         tuple(torch.zeros(1, dtype=torch.int64) for _ in range(12)),
                         money.reshape(1), zeros, torch.zeros(1, 3, dtype=torch.int64), 0, 1,
                         env.tables.passive, money, "fifo", 1)


def _fields(env: BatchedLobEnv) -> dict[str, list]:
    return {f"{type(p).__name__}.{f.name}": getattr(p, f.name).tolist()
            for p in (env.state, env.stats, env.passive_state, env.passive_stats)
            for f in dataclasses.fields(p)}


@pytest.mark.gpu
@pytest.mark.parametrize("model,power", [("risk_averse", 1), ("probabilistic", 5)])
@pytest.mark.parametrize("compiled", [False, True])
def test_on_cuda_the_kernel_equals_the_pytorch_walk(model, power, compiled) -> None:
    from lobsurf.sim.env import step_values

    cfg = SimConfig(stride=10, latency_rows=1, max_episode_steps=6, passive_orders=True,
                    queue_model=model, queue_power=power, fee_per_lot=0.5, fee_bps=0.3,
                    maker_fee_per_lot=-0.2, maker_fee_bps=0.15)
    book = random_walk_book(20_000, 3, device="cuda", trades=True, max_size_lots=8)
    envs = [BatchedLobEnv(book, 4096, cfg) for _ in range(2)]
    assert envs[0].tables.passive.walk_kernel  # on CUDA the kernel walks by default
    envs[1].tables = envs[1].tables._replace(
        passive=envs[1].tables.passive._replace(walk_kernel=False))
    kernel = torch.compile(step_values, dynamic=False) if compiled else step_values
    g = torch.Generator(device="cuda").manual_seed(power)
    for env in envs:
        env.reset()
    for _ in range(40):
        action = torch.randint(0, cfg.num_actions, (4096,), device="cuda", generator=g)
        results = [env.step(action, kernel=kernel if env is envs[0] else step_values)
                   for env in envs]
        assert torch.equal(results[0].reward, results[1].reward)
    assert _fields(envs[0]) == _fields(envs[1])
    assert int(envs[0].passive_stats.maker_lots.sum()) > 100
