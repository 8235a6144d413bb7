"""GPU only: the graphed learning step equals the eager one, and the eager step never syncs.

Eager is the reference. Two runs from one seed and config take the same steps, one all
eager, one through the loop's graphed step (eager pre-learning, eager warm-up, capture,
replays), across the gate warm-up boundary (gates.warmup_steps falls inside the replays).
Tolerances: actions, rows, positions, rewards, done flags and every generator's state
must be identical (the same kernels draw the same numbers); losses within 1e-4 relative
and parameters within 1e-5 absolute (atomic adds in the backward of gathers may sum in
another order, nothing else differs).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lobsurf.agent.metrics import MetricSums
from lobsurf.agent.step import train_step
from lobsurf.training.data import load_training_data
from lobsurf.training.faults.guard import DivergenceGuard
from lobsurf.training.run.state import build_run_state, build_state, step_config
from lobsurf.training.run.step import graphed_step, guarded_step
from lobsurf.training.speed.compile import compiled_kernels
from lobsurf.training.speed.cuda_graph import step_generators
from tests.agent.conftest import tiny_config

pytestmark = pytest.mark.gpu

LEARNING_STARTS = 3
GATE_WARMUP = 9  # device step counter: gates switch on inside the graphed stretch
STEPS = 18
LOSSES = ("loss_q", "loss_pi", "loss_value", "loss_frd", "loss_aux", "grad_norm", "gated",
          "net_pnl", "reward")


def _run(store, graphed: bool, precision: str = "fp32", compiled: bool = False,
         overlap: bool = True):
    """``overlap=False``: the step's side streams taken away (one stream, in order)."""
    cfg = tiny_config(store, learner={"learning_starts": LEARNING_STARTS},
                      gates={"warmup_steps": GATE_WARMUP},
                      train={"envs": 32, "precision": precision, "compile": compiled},
                      replay={"capacity": 4096})
    data = load_training_data(cfg, "cuda", store)
    state = build_run_state(cfg, data, "cuda", None, 0)
    scfg, guard = step_config(cfg), DivergenceGuard("cuda")
    if not overlap:
        state.branch = state.learner_branch = None
    runner = graphed_step(state, data.train_book, scfg, guard, "cuda") if graphed else None
    per_step = []
    for step in range(STEPS):
        learning = step >= LEARNING_STARTS
        if runner is not None and learning:
            runner()
        else:
            guarded_step(state, data.train_book, scfg, guard, learning)
        per_step.append(torch.stack([getattr(state.metrics, k) for k in LOSSES]).clone())
    torch.cuda.synchronize()
    return state, torch.stack(per_step), runner, guard


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_graphed_steps_equal_eager_steps(tiny_store, precision) -> None:
    eager, eager_losses, _, _ = _run(tiny_store.path, graphed=False, precision=precision)
    graph, graph_losses, runner, guard = _run(tiny_store.path, graphed=True,
                                              precision=precision)
    assert len(step_generators(graph)) == 1  # on CUDA one generator serves every draw
    assert graph.replay.drawn_ahead  # the next learning step's sample drawn ahead
    assert runner.captured and runner.nodes is not None and runner.nodes[1] > 100
    _same_transitions(eager, graph, STEPS * 32)
    for ge, gg in zip(step_generators(eager), step_generators(graph)):
        assert torch.equal(ge.get_state(), gg.get_state())
    assert int(graph.step_count) == STEPS and guard.read() is None
    torch.testing.assert_close(graph_losses, eager_losses, rtol=1e-4, atol=1e-6)
    # the gates ran in the graphed stretch: the counter passed the warm-up boundary there
    assert float(graph_losses[-1, LOSSES.index("gated")]) == float(
        eager_losses[-1, LOSSES.index("gated")])
    for pe, pg in zip(eager.online.parameters(), graph.online.parameters()):
        torch.testing.assert_close(pg, pe, rtol=0, atol=1e-5)


def _same_transitions(a, b, n: int) -> None:
    for name in ("action", "row", "position", "reward", "done", "trade_closed", "next_row"):
        x, y = getattr(a.replay.storage, name)[:n], getattr(b.replay.storage, name)[:n]
        bad = (x != y).nonzero()
        assert bad.numel() == 0, f"{name} differs first at transition {bad[0].item()}"


@pytest.mark.parametrize("graphed", [False, True], ids=["eager", "graphed"])
def test_streams_beside_each_other_equal_one_stream(tiny_store, graphed) -> None:
    """The target net's forward on a second stream and the learner's losses and backward on
    a third, beside the collect (parallel graph branches when captured, at the device's
    highest priority), take the same steps as the one-stream step: the same kernels on the
    same inputs, and no piece writes what one beside it reads. Losses within the tolerance
    of the module docstring (the backward's atomic adds)."""
    one, one_losses, _, _ = _run(tiny_store.path, graphed=graphed, overlap=False)
    two, two_losses, runner, _ = _run(tiny_store.path, graphed=graphed, overlap=True)
    assert one.branch is None and one.learner_branch is None
    assert two.branch is not None and two.learner_branch is not None
    if graphed:
        assert runner.captured
    _same_transitions(one, two, STEPS * 32)
    torch.testing.assert_close(two_losses, one_losses, rtol=1e-4, atol=1e-6)
    for p1, p2 in zip(one.online.parameters(), two.online.parameters()):
        torch.testing.assert_close(p2, p1, rtol=0, atol=1e-5)


def test_compiled_graphed_steps_track_eager_steps(tiny_store) -> None:
    """train.compile inside the graph (Inductor's kernels) against the eager reference.
    Inductor reorders float sums, so this is not bit-exact: the actions and rewards taken
    (Thompson draws from the same uniforms) must agree until a near-tie flips one, the
    losses up to the first flip within 2e-3 relative, and at least the first two thirds of
    the steps must come before any flip."""
    eager, eager_losses, _, _ = _run(tiny_store.path, graphed=False)
    graph, graph_losses, runner, guard = _run(tiny_store.path, graphed=True, compiled=True)
    assert runner.captured and len(compiled_kernels(graph)) > 0
    assert int(graph.step_count) == STEPS and guard.read() is None
    envs = 32
    actions = [getattr(s.replay.storage, "action")[:STEPS * envs].view(STEPS, envs)
               for s in (eager, graph)]
    differs = (actions[0] != actions[1]).any(dim=1).nonzero()
    agree = STEPS if differs.numel() == 0 else int(differs[0])
    assert agree >= 2 * STEPS // 3, f"actions differ from step {agree} of {STEPS}"
    rewards = [s.replay.storage.reward[:agree * envs] for s in (eager, graph)]
    torch.testing.assert_close(rewards[1], rewards[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(graph_losses[:agree], eager_losses[:agree], rtol=2e-3, atol=1e-5)
    assert bool(torch.isfinite(graph_losses).all())


def test_eager_step_makes_no_host_sync(tiny_store) -> None:
    cfg = tiny_config(tiny_store.path, learner={"learning_starts": 2}, train={"envs": 32})
    data = load_training_data(cfg, "cuda", tiny_store.path)
    state, scfg, guard = build_state(cfg, data, "cuda"), step_config(cfg), DivergenceGuard("cuda")
    for step in range(4):  # first calls make handles and gradients
        guarded_step(state, data.train_book, scfg, guard, step >= 2)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        train_step(state, data.train_book, scfg, learning=False)
        for _ in range(3):
            guarded_step(state, data.train_book, scfg, guard, True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert int(state.step_count) == 8


def _after_six_replays(tiny_store):
    """(state, guard, graphed step) of a tiny 32-env run that learns from step 0, after six
    steps through the loop's graphed step (eager warm-up, capture, replays)."""
    cfg = tiny_config(tiny_store.path, learner={"learning_starts": 0}, train={"envs": 32})
    data = load_training_data(cfg, "cuda", tiny_store.path)
    state, scfg, guard = build_state(cfg, data, "cuda"), step_config(cfg), DivergenceGuard("cuda")
    runner = graphed_step(state, data.train_book, scfg, guard, "cuda")
    for _ in range(6):
        runner()
    return state, guard, runner


def test_metric_sums_read_between_replays(tiny_store) -> None:
    """The loop's readout outside the graph: reading and zeroing the sums between replays
    leaves the next replays counting from zero."""
    state, guard, runner = _after_six_replays(tiny_store)
    assert state.metrics.read_and_reset()["learn_steps"] == 6
    for _ in range(2):
        runner()
    values = state.metrics.read_and_reset()
    assert values["learn_steps"] == 2 and values["env_steps"] == 64
    assert isinstance(state.metrics, MetricSums) and dataclasses.is_dataclass(state.metrics)


def test_a_deferred_readout_takes_no_host_sync_and_reads_its_own_step(tiny_store) -> None:
    """The loop's deferred readout (lobsurf.training.run.readout): taken between replays without a
    host sync, finished after the next replay, it holds the sums of its own step."""
    from lobsurf.training.run.readout import Readout

    state, guard, runner = _after_six_replays(tiny_store)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        readout = Readout(state, guard, 6, with_metrics=True)
        runner()  # the next step, launched before the readout is read
    finally:
        torch.cuda.set_sync_debug_mode("default")
    readout.finish()
    # (learning from step 0 on a near-empty replay may already have tripped the guard: the
    # readout must say what a synchronous read says)
    assert readout.bad == guard.read(state) and readout.means["learn_steps"] == 6
    assert readout.means["env_steps"] == 6 * 32
    assert readout.controllers.keys() == state.controllers.as_dict().keys()
    assert state.metrics.read_and_reset()["learn_steps"] == 1
