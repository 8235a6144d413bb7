"""train.compile traces the step's network pieces whole (fullgraph: no graph break) and
changes no number: Dynamo with the eager backend runs the same ops as the eager step."""

from __future__ import annotations

import copy

import pytest
import torch

from lobsurf.agent.step import train_step
from lobsurf.bench.phases import timed_phases
from lobsurf.training.speed.compile import COMPILED_METHODS, CompileConfig, compile_networks_, compiled


def _losses_after(state, data, scfg, steps: int) -> list[torch.Tensor]:
    for step in range(steps):
        train_step(state, data.train_book, scfg, learning=step >= 4)
    return [state.metrics.loss_q.clone(), state.metrics.loss_pi.clone(),
            state.metrics.loss_frd.clone(), state.metrics.grad_norm.clone()]


@pytest.mark.slow
def test_inductor_networks_learn_as_eager(tiny_setup) -> None:
    # a copy of the state with its networks compiled by Inductor takes the eager state's 7
    # steps (3 learning) to float rounding: losses and parameters
    _cfg, data, state, scfg = tiny_setup
    twin = copy.deepcopy(state)
    torch._dynamo.reset()
    compile_networks_(twin, CompileConfig(backend="inductor", kernels=()))
    eager = _losses_after(state, data, scfg, 7)
    compiled_losses = _losses_after(twin, data, scfg, 7)
    assert bool(eager[0] > 0)  # the learning steps ran
    for a, b in zip(eager, compiled_losses):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    for a, b in zip(state.online.parameters(), twin.online.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=pytest.mark.slow)])
def test_compiled_step_matches_the_eager_step(tiny_setup, precision):
    import dataclasses

    _cfg, data, state, scfg = tiny_setup
    scfg = dataclasses.replace(scfg, precision=precision)
    twin = copy.deepcopy(state)
    torch._dynamo.reset()
    compile_networks_(twin, CompileConfig(backend="eager"))
    assert compiled(twin.online) and compiled(twin.target) and not compiled(state.online)
    eager = _losses_after(state, data, scfg, 7)
    traced = _losses_after(twin, data, scfg, 7)
    assert all(bool(m > 0) for m in eager[:1])  # the learning steps ran
    for a, b in zip(eager, traced):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8)


def test_a_graph_break_is_an_error(tiny_setup, monkeypatch):
    _cfg, data, state, scfg = tiny_setup
    heads = type(state.online).heads

    def breaking(self, h, s):
        torch._dynamo.graph_break()
        return heads(self, h, s)

    monkeypatch.setattr(type(state.online), "heads", breaking)
    torch._dynamo.reset()
    compile_networks_(state, CompileConfig(backend="eager"))
    with pytest.raises(Exception, match="(?i)graph.break"):
        train_step(state, data.train_book, scfg, learning=False)


def test_phase_timer_keeps_the_compiled_methods(tiny_setup):
    _cfg, data, state, scfg = tiny_setup
    compile_networks_(state, CompileConfig(backend="eager"))
    before = {name: vars(state.target)[name] for name in COMPILED_METHODS}
    with timed_phases(state, "cpu"):
        train_step(state, data.train_book, scfg, learning=False)
    assert {name: vars(state.target)[name] for name in COMPILED_METHODS} == before
