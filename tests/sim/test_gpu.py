"""GPU-only: the step makes no host sync and a CUDA-graph replay equals eager steps."""

from __future__ import annotations

import pytest
import torch

from lobsurf.sim import BatchedLobEnv, SimConfig
from lobsurf.sim.books import random_walk_book

pytestmark = pytest.mark.gpu


def steps_without_host_sync(env: BatchedLobEnv, action: torch.Tensor, steps: int) -> None:
    """One step to warm up, then ``steps`` steps under CUDA's sync debug mode "error"."""
    env.step(action)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(steps):
            env.step(action)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_step_makes_no_host_sync() -> None:
    env = BatchedLobEnv(random_walk_book(5000, 2, device="cuda"), 64, SimConfig(fee_bps=0.3))
    env.reset()
    steps_without_host_sync(env, torch.randint(0, 11, (64,), device="cuda"), 5)


def test_graph_replay_matches_eager() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_sim_step import capture, check_matches_eager

    env = BatchedLobEnv(random_walk_book(5000, 2, device="cuda"), 256,
                        SimConfig(max_episode_steps=3, fee_per_lot=0.5))
    env.reset()
    action = torch.randint(0, 11, (256,), device="cuda")
    graph, result = capture(env, action)
    check_matches_eager(env, action, lambda: (graph.replay(), result.reward)[1])


@pytest.mark.parametrize("model", ["risk_averse", "probabilistic"])
def test_passive_step_makes_no_host_sync_and_its_graph_and_compiled_replays_match_eager(model):
    import sys
    from pathlib import Path

    from lobsurf.sim.env import step_values

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_sim_step import capture, check_matches_eager

    cfg = SimConfig(stride=10, latency_rows=1, max_episode_steps=5, passive_orders=True,
                    queue_model=model, maker_fee_per_lot=-0.2, fee_bps=0.3)
    env = BatchedLobEnv(random_walk_book(5000, 2, device="cuda", trades=True), 256, cfg)
    env.reset()
    action = torch.randint(0, cfg.num_actions, (256,), device="cuda")
    steps_without_host_sync(env, action, 3)
    graph, result = capture(env, action)
    check_matches_eager(env, action, lambda: (graph.replay(), result.reward)[1])
    kernel = torch.compile(step_values, dynamic=False)
    graph, result = capture(env, action, lambda a: env.step(a, kernel=kernel))
    check_matches_eager(env, action, lambda: (graph.replay(), result.reward)[1])
    assert int(env.passive_stats.maker_lots.sum()) > 0
