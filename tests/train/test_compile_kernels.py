"""train.compile of the step's pure tensor functions (``state.kernels``: gates, C51
target side, every loss) with Inductor on CPU: the compiled step equals the
eager step to float tolerance, fullgraph, one Dynamo graph per kernel per shape and no
graph break; the phase timer's patches of the step module stay out of the compiled code.

Tiny shapes (8 envs, a 16-wide encoder left eager) keep Inductor's CPU compile short.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch._dynamo.utils import counters

from lobsurf.agent.step import StepKernels, train_step
from lobsurf.bench.phases import timed_phases
from lobsurf.train.compile import (COMPILED_KERNELS, CompileConfig, compile_networks_,
                                   compiled, compiled_kernels)
from lobsurf.train.loop import build_state, step_config
from lobsurf.train.data import load_training_data
from tests.agent.conftest import tiny_config

#: collect-only steps (replay fill, gates in warm-up) then learning steps; the gates turn
#: on at step GATE_WARMUP, inside the learning steps, so both sides of the boundary run
PREFILL, STEPS, GATE_WARMUP = 4, 8, 5
#: Inductor reorders float reductions (fused softmax / log-softmax / sums): fp32 tolerance
RTOL, ATOL = 1e-5, 1e-6
#: kernels only: the networks stay eager (their compile is tests/train/test_compile.py's)
KERNELS_ONLY = CompileConfig(backend="inductor", methods=())


def _setup(tiny_store, n_step: int = 1):
    cfg = tiny_config(tiny_store.path, gates={"warmup_steps": GATE_WARMUP},
                      learner={"learning_starts": PREFILL, "n_step": n_step})
    data = load_training_data(cfg, "cpu", tiny_store.path)
    return data, build_state(cfg, data, "cpu"), step_config(cfg)


def _run(state, data, scfg) -> dict[str, torch.Tensor]:
    for step in range(STEPS):
        train_step(state, data.train_book, scfg, learning=step >= PREFILL)
    m, ctl = state.metrics, state.controllers
    out = {name: getattr(m, name).clone() for name in (
        "loss_q", "loss_pi", "loss_value", "loss_frd", "loss_aux", "policy_entropy",
        "agreement", "grad_norm", "q_mean", "reward", "gated", "hold_actions", "net_pnl")}
    out |= {f"ctl.{name}": getattr(ctl, name).clone() for name in (
        "v_min", "v_max", "pnl_magnitude", "reward_scale", "gate_threshold", "sac_alpha",
        "distill_tau", "per_beta")}
    out["replay.reward"] = state.replay.storage.reward.clone()
    out["replay.weight"] = state.replay.weight.clone()
    out |= {f"online.{k}": v.detach().clone() for k, v in state.online.state_dict().items()}
    return out


def _compare(eager: dict[str, torch.Tensor], traced: dict[str, torch.Tensor]) -> None:
    for name, a in eager.items():
        b = traced[name]
        if a.is_floating_point():
            torch.testing.assert_close(b, a, rtol=RTOL, atol=ATOL, msg=name)
        else:
            assert torch.equal(a, b), name


@pytest.mark.parametrize("n_step", [1, 3])
def test_compiled_kernels_match_the_eager_step(tiny_store, n_step):
    data, state, scfg = _setup(tiny_store, n_step)
    twin = copy.deepcopy(state)
    torch._dynamo.reset()
    counters.clear()
    compile_networks_(twin, KERNELS_ONLY)
    assert compiled_kernels(twin) == COMPILED_KERNELS and compiled_kernels(state) == ()
    assert not compiled(twin.online)  # methods=(): the networks stay eager
    eager, traced = _run(state, data, scfg), _run(twin, data, scfg)
    assert bool(eager["gated"] > 0), "the gates never fired: the gate kernel went untested"
    assert bool(eager["loss_q"] > 0)
    _compare(eager, traced)
    # one Dynamo graph per kernel (one shape each, no recompile) and no graph break
    assert counters["stats"]["unique_graphs"] == len(COMPILED_KERNELS)
    assert sum(counters["graph_break"].values()) == 0


def test_a_wrong_kernel_is_caught(tiny_store, monkeypatch):
    """The planted bug: the compiled loss drops the importance weights (all ones)."""
    import lobsurf.agent.step as step_module

    data, state, scfg = _setup(tiny_store)
    twin = copy.deepcopy(state)
    right = StepKernels.loss_terms

    def unweighted(out, target, target_mean_s, z, t, weight, *rest):
        return right(out, target, target_mean_s, z, t, torch.ones_like(weight), *rest)

    monkeypatch.setattr(StepKernels, "loss_terms", unweighted)
    twin.kernels.loss_terms = unweighted
    torch._dynamo.reset()
    compile_networks_(twin, CompileConfig(backend="inductor", methods=(),
                                          kernels=("loss_terms",)))
    assert step_module.loss_terms is right
    with pytest.raises(AssertionError, match="loss_q|grad_norm|online"):
        _compare(_run(state, data, scfg), _run(twin, data, scfg))


def test_phase_timer_patches_stay_out_of_compiled_kernels(tiny_store):
    data, state, scfg = _setup(tiny_store)
    torch._dynamo.reset()
    compile_networks_(state, CompileConfig(backend="eager", methods=()))
    train_step(state, data.train_book, scfg, learning=False)
    counters.clear()
    with timed_phases(state, "cpu") as timer:
        for _ in range(PREFILL + 1):
            train_step(state, data.train_book, scfg, learning=True)
    assert counters["stats"]["unique_graphs"] == 2  # the learn kernels, first called here
    assert sum(counters["graph_break"].values()) == 0
    assert "learn/losses/C51 projection" not in timer.seconds  # inside the compiled kernel
    assert "collect/reward pipeline" in timer.seconds  # eager: still timed
