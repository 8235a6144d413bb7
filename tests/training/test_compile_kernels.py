"""train.compile of the step's pure tensor functions (``state.kernels``: observation,
acting and gates, simulator, bookkeeping, replay draw, learner inputs, C51 target side,
every loss, learner bookkeeping) with Inductor on CPU: each compiled kernel equals its eager
function on the same inputs, call by call; the compiled step leaves every state tensor
(networks, optimizer, controllers, metric sums, replay, simulator, counters) where the eager
step does, to float tolerance, so the kernels' new values really are written back; fullgraph,
one Dynamo graph per kernel per shape and no graph break; the phase timer's patches of the
step module stay out of the compiled code.

Tiny shapes (8 envs, a 16-wide encoder left eager) keep Inductor's CPU compile short; still,
compiling every kernel takes tens of seconds on a fresh machine, so the quick loop (``-m
"not slow"``) keeps one compiled kernel checked against eager (the planted wrong kernel)
and the full suite runs the rest.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch._dynamo.utils import counters

from lobsurf.agent.step import eager_kernels, train_step
from lobsurf.bench.phases import timed_phases
from lobsurf.training.data import load_training_data
from lobsurf.training.run.state import build_state, step_config
from lobsurf.training.speed.compile import (COMPILED_KERNELS, CompileConfig, compile_networks_,
                                   compiled, compiled_kernels)
from tests.agent.conftest import tiny_config

#: collect-only steps (replay fill, gates in warm-up) then learning steps; the gates turn
#: on at step GATE_WARMUP, inside the learning steps, so both sides of the boundary run
PREFILL, STEPS, GATE_WARMUP = 4, 8, 5
#: Inductor reorders float reductions (fused softmax / log-softmax / sums): fp32 tolerance
RTOL, ATOL = 1e-5, 1e-6
#: kernels only: the networks stay eager (their compile is tests/training/test_compile.py's)
KERNELS_ONLY = CompileConfig(backend="inductor", methods=())


def _setup(tiny_store, n_step: int = 1):
    cfg = tiny_config(tiny_store.path, gates={"warmup_steps": GATE_WARMUP},
                      learner={"learning_starts": PREFILL, "n_step": n_step})
    data = load_training_data(cfg, "cpu", tiny_store.path)
    return data, build_state(cfg, data, "cpu"), step_config(cfg)


def _tensors(obj, prefix: str = ""):
    """(path, tensor) of every tensor inside ``obj`` (dataclasses, tuples, lists, dicts)."""
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _tensors(getattr(obj, f.name), f"{prefix}.{f.name}")
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
        for name, value in zip(obj._fields, obj):
            yield from _tensors(value, f"{prefix}.{name}")
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from _tensors(value, f"{prefix}[{i}]")
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _tensors(value, f"{prefix}[{key!r}]")


def _state_tensors(state) -> dict[str, torch.Tensor]:
    """A copy of every tensor a step writes (everything but the constant tables)."""
    out = {f"online.{k}": v for k, v in state.online.state_dict().items()}
    out |= {f"target.{k}": v for k, v in state.target.state_dict().items()}
    out |= {f"replay.{k}": v for k, v in state.replay.state_dict().items()
            if isinstance(v, torch.Tensor) and k != "generator"}
    out |= {f"optimizer{path}": t for path, t in _tensors(state.optimizer.state_dict())}
    for name in ("controllers", "metrics", "step_count"):
        out |= {f"{name}{path}": t for path, t in _tensors(getattr(state, name))}
    out |= {f"sim{path}": t for path, t in _tensors((state.env.state, state.env.stats))}
    return {k: v.detach().clone() for k, v in out.items()}


def _run(state, data, scfg) -> dict[str, torch.Tensor]:
    for step in range(STEPS):
        train_step(state, data.train_book, scfg, learning=step >= PREFILL)
    return _state_tensors(state)


def _compare(eager: dict[str, torch.Tensor], traced: dict[str, torch.Tensor]) -> None:
    assert eager.keys() == traced.keys()
    for name, a in eager.items():
        b = traced[name]
        if a.is_floating_point():
            torch.testing.assert_close(b, a, rtol=RTOL, atol=ATOL, msg=name)
        else:
            assert torch.equal(a, b), name


def _frozen(obj):
    """A copy of a kernel's arguments as they are now (the step overwrites its state after):
    tensors cloned (detached), containers and dataclasses rebuilt, other objects (the replay)
    copied with their tensor attributes cloned."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: _frozen(getattr(obj, f.name))
                                           for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*map(_frozen, obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(map(_frozen, obj))
    if isinstance(obj, dict):
        return {k: _frozen(v) for k, v in obj.items()}
    if hasattr(obj, "__dict__") and not isinstance(obj, torch.nn.Module) and not callable(obj):
        twin = copy.copy(obj)
        vars(twin).update({k: _frozen(v) for k, v in vars(obj).items()
                           if isinstance(v, torch.Tensor) or dataclasses.is_dataclass(v)})
        return twin
    return obj


def _checked(name: str, kernel, called: set[str] | None = None):
    """``kernel`` (compiled), each call compared with the eager function on the same inputs:
    its results, and its inputs after the call (the flat Adam writes its buffers in place);
    ``called`` collects the names of the kernels that ran."""
    eager = getattr(eager_kernels(), name)

    def run(*args, **kwargs):
        if called is not None:
            called.add(name)
        frozen_args, frozen_kwargs = _frozen((args, kwargs))
        got = kernel(*args, **kwargs)
        _compare(dict(_tensors(eager(*frozen_args, **frozen_kwargs), name)),
                 {path: t.detach() for path, t in _tensors(got, name)})
        _compare(dict(_tensors((frozen_args, frozen_kwargs), f"{name} input")),
                 {path: t.detach() for path, t in _tensors((args, kwargs), f"{name} input")})
        return got
    return run


#: the replay sample's kernel in one piece, which only ``learn`` (a sample drawn on the
#: spot) calls: the training step draws ahead (``draw``, then ``sample_at``)
DRAW_FIRST_ONLY = {"sample"}


@pytest.mark.slow
@pytest.mark.parametrize("n_step", [1, 3])
def test_compiled_kernels_match_the_eager_step(tiny_store, n_step):
    data, state, scfg = _setup(tiny_store, n_step)
    twin = copy.deepcopy(state)
    torch._dynamo.reset()
    counters.clear()
    compile_networks_(twin, KERNELS_ONLY)
    assert compiled_kernels(twin) == COMPILED_KERNELS and compiled_kernels(state) == ()
    assert not compiled(twin.online)  # methods=(): the networks stay eager
    called: set[str] = set()
    for name in COMPILED_KERNELS:  # every call of a compiled kernel checked against eager
        setattr(twin.kernels, name, _checked(name, getattr(twin.kernels, name), called))
    eager, traced = _run(state, data, scfg), _run(twin, data, scfg)
    assert bool(eager["metrics.gated"] > 0), "the gates never fired: the act kernel untested"
    assert bool(eager["metrics.loss_q"] > 0)
    assert bool(eager["metrics.trades"] > 0), "no trade closed: the reward pipeline untested"
    _compare(eager, traced)
    assert called == set(COMPILED_KERNELS) - DRAW_FIRST_ONLY
    # one Dynamo graph per kernel called (one shape each, no recompile) and no graph break
    assert counters["stats"]["unique_graphs"] == len(called)
    assert sum(counters["graph_break"].values()) == 0


def _twin_with(tiny_store, monkeypatch, name: str, planted):
    """(data, state, scfg, twin): the twin's kernel ``name`` is ``planted`` compiled, with
    the eager reference left as it was."""
    import sys

    data, state, scfg = _setup(tiny_store)
    twin = copy.deepcopy(state)
    right = getattr(eager_kernels(), name)
    torch._dynamo.reset()
    setattr(twin.kernels, name,
            CompileConfig(backend="inductor", methods=(), kernels=(name,)).compile(planted))
    assert getattr(state.kernels, name) is right  # the eager reference
    assert getattr(sys.modules[right.__module__], name) is right
    return data, state, scfg, twin


def test_a_wrong_kernel_is_caught(tiny_store, monkeypatch):
    """The planted bug: the compiled loss drops the importance weights (all ones)."""
    right = eager_kernels().loss_terms

    def unweighted(out, target, target_mean_s, z, t, weight, *rest):
        return right(out, target, target_mean_s, z, t, torch.ones_like(weight), *rest)

    data, state, scfg, twin = _twin_with(tiny_store, monkeypatch, "loss_terms", unweighted)
    with pytest.raises(AssertionError, match="loss_q|grad_norm|online"):
        _compare(_run(state, data, scfg), _run(twin, data, scfg))


@pytest.mark.slow
def test_a_skipped_write_is_caught(tiny_store, monkeypatch):
    """The planted bug: the compiled bookkeeping leaves the atom span out of the values the
    step writes back (as an in-place write inside a compiled kernel would be lost)."""
    right = eager_kernels().collect_updates

    def span_unwritten(*args):
        upd = right(*args)
        return upd._replace(controllers={k: v for k, v in upd.controllers.items()
                                         if k not in ("v_min", "v_max")})

    data, state, scfg, twin = _twin_with(tiny_store, monkeypatch, "collect_updates",
                                         span_unwritten)
    eager, traced = _run(state, data, scfg), _run(twin, data, scfg)
    assert float(traced["controllers.v_min"]) == -1.0  # its bootstrap: never written
    with pytest.raises(AssertionError, match="online|v_min"):
        _compare(eager, traced)
    ctl = [k for k in eager if k.startswith("controllers.")]
    with pytest.raises(AssertionError, match="v_min"):
        _compare({k: eager[k] for k in ctl}, {k: traced[k] for k in ctl})


@pytest.mark.slow
def test_phase_timer_patches_stay_out_of_compiled_kernels(tiny_store):
    data, state, scfg = _setup(tiny_store)
    torch._dynamo.reset()
    compile_networks_(state, CompileConfig(backend="eager", methods=()))
    train_step(state, data.train_book, scfg, learning=False)
    counters.clear()
    with timed_phases(state, "cpu") as timer:
        for _ in range(PREFILL + 1):
            train_step(state, data.train_book, scfg, learning=True)
    # the learn kernels (the draw and its sample, learner inputs, C51 target, losses,
    # priority weights, clip, Adam, bookkeeping), first called here
    assert counters["stats"]["unique_graphs"] == 9
    assert sum(counters["graph_break"].values()) == 0
    bookkeeping = "collect/rewards, replay plan, controllers, metrics"
    assert bookkeeping in timer.seconds  # the kernel is timed as one piece ...
    assert f"{bookkeeping}/reward pipeline" not in timer.seconds  # ... its insides are not
    assert "learn/losses/C51 target/C51 projection" not in timer.seconds


#: aten ops that launch a fill kernel (on CUDA one graph node each)
FILLS = frozenset({"aten::zeros", "aten::zero_", "aten::fill_", "aten::full", "aten::ones_like"})


def _fills_under(event, inside: bool, found: list[str]) -> None:
    # the fill ops below a compiled function's backward, or anywhere when ``inside``
    inside = inside or event.name.endswith("CompiledFunctionBackward")
    if inside and event.name in FILLS:
        found.append(event.name)
    for child in event.cpu_children:
        _fills_under(child, inside, found)


@pytest.mark.slow
def test_backward_fills_no_seed_or_zero_tangents(tiny_store):
    """The learner's backward launches no fills of its own: the seed d total / d total is
    the step's constant (StepTables.loss_seed), and the compiled losses' outputs other than
    total are detached, so AOTAutograd gives none of them a zero tangent. On CUDA each such
    fill was a graph node on the backward's chain (seven per step)."""
    from torch.profiler import ProfilerActivity, profile

    from lobsurf.agent.learn import draw_sample, flat_gradients_, losses

    data, state, scfg = _setup(tiny_store)
    torch._dynamo.reset()
    compile_networks_(state, CompileConfig(backend="inductor", methods=(),
                                           kernels=("loss_terms",)))
    for step in range(PREFILL + 1):  # the last a learning step: the backward compiles
        train_step(state, data.train_book, scfg, learning=step == PREFILL)
    sample, li = draw_sample(state, data.train_book, scfg)
    ls = losses(state, data.train_book, sample, scfg, li)
    assert ls.total.requires_grad and not any(
        x.requires_grad for x in (ls.q, ls.q_per_sample, ls.pi, ls.policy_entropy))
    opt = state.optimizer
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        flat_gradients_(ls.total, opt.params, opt.flat, state.tables.loss_seed)
    found: list[str] = []
    for event in prof.events():
        if event.cpu_parent is None:
            _fills_under(event, event.name == "aten::ones_like", found)
    assert found == []
    assert bool(opt.flat.grad.abs().sum() > 0)
