"""The whole training step as one CUDA graph: warm up eagerly, capture once, replay.

``GraphedStep(fn, state, generators, device)`` wraps a zero-argument step function (the
loop's ``train_step(..., learning=True)`` plus the divergence guard's check). Its first
``GraphConfig.warmup_steps`` calls run ``fn`` eagerly on a side stream: they are real steps
of the run, and they make every cuBLAS handle and workspace, autograd's gradient buffers
and every cache before a graph records addresses. The call after that captures ``fn``
once (the capture runs nothing) and replays it; every later call is one ``replay()``.

Graph-safe RNG: the step draws from custom ``torch.Generator`` objects (noise, acting,
replay sampling, simulator resets). Each is registered with the graph
(``CUDAGraph.register_generator_state``) before capture, so every replay reads fresh
Philox offsets and advances the generator by the graph's whole increment, exactly as the
eager calls would: eager and graphed runs from one seed draw the same numbers, and a
checkpoint's ``get_state()`` after replays is the state an eager run would have. A capture
also registers the default CUDA generator, which the step never draws from; where the step
draws from one generator alone (on CUDA it does: lobsurf.training.run.state), that one takes
the default's place for the capture, so each replay refreshes one generator's device scalars
(2 kernels before the graph's first node) instead of two's.

Capture safety is checked, not assumed: the last warm-up call compares every tensor
address and every host value reachable from the state before and after the step
(``state_fingerprint``). A step that rebinds a tensor (``self.x = self.x + 1``) or moves
a host counter would be frozen by a graph, so capture is refused, naming what moved.

The learning and pre-learning (collect-only) phases are different graphs; the loop runs
the short pre-learning phase eagerly and graphs only the learning step. Graphs need CUDA
and one process (no collectives inside the step); ``graph_unsupported`` says why not, and
``graph_enabled`` whether a run graphs its step.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lobsurf.training.config import RunConfig

#: CUgraphNodeType of a kernel node (CUDA driver API, cuda.h: CU_GRAPH_NODE_TYPE_KERNEL)
_KERNEL_NODE = 0


@dataclass(frozen=True)
class GraphConfig:
    """How a step is graphed."""

    warmup_steps: int = 3
    """Eager calls before capture. The last one is also the capture-safety check, which
    compares the state before and after a call that allocates nothing new, so >= 2."""

    def __post_init__(self) -> None:
        if self.warmup_steps < 2:
            raise ValueError(f"warmup_steps must be >= 2, got {self.warmup_steps}")


class CaptureUnsafe(RuntimeError):
    """The step rebinds state tensors or changes host values: a graph would freeze them."""


def graph_unsupported(device: torch.device | str) -> str | None:
    """Why a step on ``device`` cannot be graphed here, or None when it can."""
    device = torch.device(device)
    if device.type != "cuda":
        return f"CUDA graphs need a CUDA device, not {device.type}"
    if not torch.cuda.is_available():
        return "CUDA is not available"
    if not hasattr(torch.cuda.CUDAGraph, "register_generator_state"):
        return (f"torch {torch.__version__} has no CUDAGraph.register_generator_state "
                "(graph-safe custom generators need torch >= 2.4)")
    return None


def graph_enabled(cfg: RunConfig, device: torch.device | str, sync: Any) -> bool:
    """train.cuda_graph on a device that can graph, one process (``sync`` None; else eager,
    said once where it was asked for on CUDA)."""
    if not cfg.train.cuda_graph or torch.device(device).type != "cuda":
        return False
    if cfg.train.reference:
        print("train: CUDA graph off: train.reference runs the readable step eagerly",
              file=sys.stderr)
        return False
    why = graph_unsupported(device) or ("several processes (collectives inside the step)"
                                        if sync is not None else None)
    if why is not None:
        print(f"train: CUDA graph off: {why}; the step runs eagerly", file=sys.stderr)
    return why is None


def step_generators(state: Any) -> list[torch.Generator]:
    """Every custom generator a training step draws from (lobsurf.agent.step.TrainState),
    each once (on CUDA the four roles hold one)."""
    roles = [state.noise_generator, state.acting_generator, state.replay.generator,
             state.env.generator]
    return list({id(g): g for g in roles}.values())


def state_fingerprint(root: Any) -> dict[str, tuple]:
    """Every tensor (address, shape, dtype; gradients too) and host scalar reachable from
    ``root`` through dataclass fields, object attributes, modules, lists and dicts."""
    out: dict[str, tuple] = {}
    seen: set[int] = set()

    def walk(obj: Any, name: str) -> None:
        if isinstance(obj, torch.Tensor):
            out[name] = ("tensor", obj.data_ptr(), tuple(obj.shape), obj.dtype)
            if obj.is_leaf and obj.requires_grad and obj.grad is not None:
                walk(obj.grad, name + ".grad")
            return
        if isinstance(obj, (bool, int, float, str)) or obj is None:
            out[name] = ("value", obj)
            return
        if id(obj) in seen or isinstance(obj, (torch.Generator, torch.dtype, torch.device,
                                               type)) or callable(obj) and not isinstance(
                                                   obj, nn.Module):
            return
        seen.add(id(obj))
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, f"{name}[{k!r}]")
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, f"{name}[{i}]")
        elif dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                walk(getattr(obj, f.name), f"{name}.{f.name}")
        elif hasattr(obj, "__dict__"):
            for k, v in vars(obj).items():
                walk(v, f"{name}.{k}")

    walk(root, "state")
    return out


def fingerprint_changes(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """Names whose address or value differs, appeared or vanished between two fingerprints."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def graph_node_counts(graph: torch.cuda.CUDAGraph) -> tuple[int, int] | None:
    """(all nodes, kernel nodes) of a captured, kept graph, through the CUDA driver API;
    None where the driver library or the raw graph cannot be read."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        raw = ctypes.c_void_p(int(graph.raw_cuda_graph()))
        count = ctypes.c_size_t(0)
        if cuda.cuGraphGetNodes(raw, None, ctypes.byref(count)) != 0:
            return None
        nodes = (ctypes.c_void_p * count.value)()
        if cuda.cuGraphGetNodes(raw, nodes, ctypes.byref(count)) != 0:
            return None
        kinds = ctypes.c_int(0)
        kernels = 0
        for node in nodes:
            if cuda.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kinds)) == 0:
                kernels += kinds.value == _KERNEL_NODE
        return count.value, kernels
    except (OSError, AttributeError, RuntimeError, TypeError, ValueError):
        return None


@contextlib.contextmanager
def _in_the_default_slot(generators: list[torch.Generator], device: torch.device
                         ) -> Iterator[None]:
    """With one generator, that generator's state in the default CUDA generator's place for
    the ``with`` block (``graphsafe_set_state``), then the default's own back.

    A capture always registers the default generator's current state as well as the
    step's, and each replay then sets two device scalars of each registered state, one
    eager kernel apiece, in turn before the graph's first node. The step never draws from
    the default generator (every draw names its own), so where it draws from one
    generator alone (on CUDA it does) that generator can take the slot: the graph
    holds one state, two kernels a replay instead of four, and the same numbers. With
    several generators, or a torch without the graph-safe state exchange, nothing changes.
    """
    default = torch.cuda.default_generators[device.index if device.index is not None
                                            else torch.cuda.current_device()]
    if len(generators) != 1 or not hasattr(default, "graphsafe_set_state"):
        yield
        return
    own = default.graphsafe_get_state()
    default.graphsafe_set_state(generators[0])
    try:
        yield
    finally:
        default.graphsafe_set_state(own)


class GraphedStep:
    """``fn`` eagerly for the warm-up calls, then one capture, then a replay per call.

    Args:
        fn: the step, zero arguments, static shapes, state updated in place.
        state: the root of everything ``fn`` reads and writes (checked before capture).
        generators: every custom CUDA generator ``fn`` draws from (registered).
        device: the CUDA device.
        cfg: warm-up length.
        pool: a graph memory pool to share (``torch.cuda.graph_pool_handle()``), or None.

    Raises:
        ValueError: the device cannot run graphs (``graph_unsupported`` says why).
    """

    def __init__(self, fn: Callable[[], None], state: Any, generators: list[torch.Generator],
                 device: torch.device | str, cfg: GraphConfig = GraphConfig(),
                 pool: Any = None) -> None:
        why = graph_unsupported(device)
        if why is not None:
            raise ValueError(why)
        self.fn, self.state, self.generators, self.cfg = fn, state, generators, cfg
        self.device = torch.device(device)
        self.pool = pool
        self.stream = torch.cuda.Stream(self.device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.eager_calls = 0
        self.nodes: tuple[int, int] | None = None
        """(all nodes, kernel nodes) of the captured graph, once captured."""

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def __call__(self) -> None:
        if self.graph is None and self.eager_calls < self.cfg.warmup_steps:
            self._eager()
            return
        if self.graph is None:
            self.capture()
        self.graph.replay()

    def _eager(self) -> None:
        last = self.eager_calls == self.cfg.warmup_steps - 1
        before = state_fingerprint(self.state) if last else None
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            self.fn()
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        self.eager_calls += 1
        if last:
            moved = fingerprint_changes(before, state_fingerprint(self.state))
            if moved:
                shown = ", ".join(moved[:8]) + (f" and {len(moved) - 8} more"
                                                if len(moved) > 8 else "")
                raise CaptureUnsafe(f"the step rebinds tensors or changes host values that a "
                                    f"CUDA graph would freeze: {shown}")

    def capture(self) -> None:
        """Capture ``fn`` once (nothing runs; the next ``replay`` is the step)."""
        try:
            graph, kept = torch.cuda.CUDAGraph(keep_graph=True), True
        except TypeError:  # a torch without keep_graph: no node count
            graph, kept = torch.cuda.CUDAGraph(), False
        for g in self.generators:
            graph.register_generator_state(g)
        torch.cuda.synchronize(self.device)
        with _in_the_default_slot(self.generators, self.device):
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
                self.fn()
        if kept:
            self.nodes = graph_node_counts(graph)
            graph.instantiate()
        self.graph = graph
