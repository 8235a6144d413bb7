"""torch.compile of the training step's pieces (``train.compile``).

``compile_networks_(state)`` compiles two kinds of pieces in place:

* **network methods**: on the online and the target network, the three methods the step
  calls (``embed``: features, normaliser and encoder; ``heads``; ``q_logits``) become
  ``torch.compile`` versions bound to the same module, as instance attributes: parameter
  names, ``state_dict`` and checkpoints are unchanged, and the module's own class methods
  stay the eager reference. Compiling ``embed`` rather than the encoder alone puts the
  per-snapshot features (element-wise chains over [B, K, F]) into the encoder's Inductor
  graph, and ``heads`` fuses the heads' small element-wise ops.
* **step kernels**: the pure tensor functions the step calls through ``state.kernels``
  (``lobsurf.agent.state.StepKernels``): the observation (state copies, support, K-windows,
  agent-state inputs), Thompson acting with the confidence + FRD gates, the simulator step,
  the post-simulator bookkeeping (reward pipeline, replay write plan, action-histogram
  controllers, metrics), the prioritized draw, the learner's inputs (n-step bootstrap,
  windows), the target side of the learner (softmax, E[Q], argmax, C51 projection), every
  loss (forward and, through AOTAutograd, backward), the gradient clip's and Adam's scalar
  arithmetic (with flat parameters: the clip's norm, and Adam with Polyak, one kernel each,
  the latter writing its 1-d buffers in place: lobsurf.agent.optim), the learner's
  bookkeeping (priorities, per_beta, alpha, tau, metrics), and f of the noise draws.
  Between them sat several hundred small eager kernels of the graphed step; compiled, each
  is a handful of fused ones. Each is compiled from a copy of its function with a snapshot
  of its module's globals, so a later patch of that module (``lobsurf.bench.phases`` wraps
  its functions for the phase timer) is neither traced into a compiled graph nor a reason
  to recompile.

``lobsurf train`` compiles where ``compile_wanted`` says (``train.compile``: auto = one
CUDA process) with ``compile_config`` (Inductor's combo kernels on CUDA: independent small
kernels of one compiled piece launched as one, benchmarks/RESULTS.md, Defaults decided by measurement); a failed
compile stops the run with ``compile_failure``'s message. Static shapes; ``fullgraph`` by default,
so a graph break is an error at the first call instead of a silent eager island inside the
CUDA graph. Each piece compiles once per
(batch shape, grad mode, autocast state) it meets; the graphed step's eager warm-up makes
them, so the capture records Inductor's kernels. PERFORMANCE.md 3.2 measured 1.6x on the
whole step for the encoder alone.

What stays eager: the random draws (custom ``torch.Generator`` arguments: noise, the
Thompson/pi and replay uniforms, the simulator's reset draws; each kernel takes its draws as
an input), the indexed writes into the replay storage and its priorities, the backward and
the optimizer's multi-tensor ops, and every in-place write of state: torch 2.13 on CPU traces
an in-place write to a 0-d CPU input as no op at all (``v.add_(1)`` compiled leaves ``v``
unchanged), so every kernel is pure: it returns the new values of the controllers, metric
sums, simulator state and ring counters, and the step copies them in place outside it
(lobsurf.writeback: one multi-tensor copy per dtype).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from lobsurf.agent.step import eager_kernels

#: the AgentNetwork methods the training step calls, compiled in place
COMPILED_METHODS = ("embed", "heads", "q_logits")
#: the StepKernels fields (lobsurf.agent.state) compiled in place
COMPILED_KERNELS = ("observe", "act", "sim_step", "collect_updates", "sample", "draw",
                    "sample_at", "learner_inputs", "c51_target", "loss_terms",
                    "flat_clip_coefficient", "flat_adam",
                    "learn_updates", "priority_weight", "noise")


@dataclass(frozen=True)
class CompileConfig:
    """How the networks are compiled."""

    backend: str = "inductor"
    """torch.compile backend ("eager" traces with Dynamo only: what CPU tests use)."""
    fullgraph: bool = True
    """Refuse graph breaks (an error at the first call names the op)."""
    dynamic: bool = False
    """Static shapes: the step's shapes never change."""
    methods: tuple[str, ...] = COMPILED_METHODS
    """Network methods to compile (a subset lets a test compile only some pieces)."""
    kernels: tuple[str, ...] = COMPILED_KERNELS
    """Step kernels to compile."""
    options: tuple[tuple[str, Any], ...] = ()
    """Inductor settings (torch._inductor.config names) for these compiles only, e.g.
    (("combo_kernels", True),); ignored by other backends."""

    def compile(self, fn: Callable) -> Callable:
        options = dict(self.options) if self.backend == "inductor" and self.options else None
        return torch.compile(fn, backend=self.backend, fullgraph=self.fullgraph,
                             dynamic=self.dynamic, options=options)


#: Inductor settings of the compiled pieces on CUDA: combo kernels (independent small
#: kernels of one compiled piece launched as one; Inductor's CPU backend has none)
CUDA_INDUCTOR_OPTIONS = (("combo_kernels", True),)


def compile_config(device: torch.device | str) -> CompileConfig:
    """The CompileConfig of a run on ``device``: ``CUDA_INDUCTOR_OPTIONS`` on CUDA."""
    if torch.device(device).type != "cuda":
        return CompileConfig()
    return CompileConfig(options=CUDA_INDUCTOR_OPTIONS)


def compile_wanted(train: Any, device: torch.device | str, processes: int) -> bool:
    """Whether a run compiles: ``train.compile`` true, or "auto" on CUDA in one process
    (several processes' steps are eager and unverified compiled); never with
    ``train.reference`` (the readable step is eager by design)."""
    if train.reference:
        return False
    if train.compile == "auto":
        return torch.device(device).type == "cuda" and processes == 1
    return bool(train.compile)


def compile_errors() -> tuple[type[BaseException], ...]:
    """The exception types a failed compilation raises at a compiled piece's first call
    (Dynamo's refusals and backend failures; Inductor's own errors where torch has them)."""
    from torch._dynamo.exc import TorchDynamoException

    found: list[type[BaseException]] = [TorchDynamoException]
    try:
        from torch._inductor.exc import InductorError
        found.append(InductorError)
    except ImportError:  # older torch: Inductor's failures arrive as Dynamo's
        pass
    return tuple(found)


#: characters of a compile error's first line quoted to the user (the rest: --debug)
_FAILURE_CHARS = 300


def compile_failure(exc: BaseException) -> str:
    """What to tell the user when compiling the step failed."""
    first = (str(exc).strip().splitlines() or [""])[0][:_FAILURE_CHARS]
    return (f"train.compile: compiling the training step failed ({type(exc).__name__}: "
            f"{first}); run again with --no-compile (train.compile=false) to train eagerly, "
            "or with --debug for the traceback")


def compile_networks_(state: Any, cfg: CompileConfig = CompileConfig()) -> None:
    """Compile ``cfg.methods`` of ``state.online`` and ``state.target`` and ``cfg.kernels``
    of ``state.kernels`` in place (pieces already compiled or patched are left alone)."""
    for net in (state.online, state.target):
        for name in cfg.methods:
            if name in vars(net):  # already compiled (or patched): leave it
                continue
            setattr(net, name, cfg.compile(getattr(net, name)))
    eager = eager_kernels()
    for name in cfg.kernels:
        fn = getattr(state.kernels, name)
        if fn is getattr(eager, name):  # still the eager default
            setattr(state.kernels, name, cfg.compile(frozen_globals(fn)))


def frozen_globals(fn: Callable) -> Callable:
    """A copy of the function ``fn`` that resolves its globals in a snapshot of its module's
    namespace taken now (module docstring: the phase timer's patches stay outside).

    The copy gets its own code object: Dynamo caches compiled code on the code object, and
    an entry made for an earlier copy (an earlier ``compile_networks_`` in this process)
    would pass its guards here and then look its compiled graph up in that copy's globals
    (a NameError on ``__compiled_fn_*``).
    """
    copy = types.FunctionType(fn.__code__.replace(), dict(fn.__globals__), fn.__name__,
                              fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__, copy.__qualname__ = fn.__kwdefaults__, fn.__qualname__
    copy.__doc__, copy.__module__ = fn.__doc__, fn.__module__
    return copy


def compile_guard_(guard: Any, cfg: CompileConfig = CompileConfig()) -> None:
    """The divergence guard's arithmetic (``lobsurf.training.faults.guard.guard_values``) compiled in
    place, as the step kernels are: the loop runs the guard inside the graphed step."""
    from lobsurf.training.faults.guard import guard_values

    if guard.values is guard_values:  # not compiled yet
        guard.values = cfg.compile(frozen_globals(guard_values))


def compiled(net: torch.nn.Module) -> bool:
    """Whether ``compile_networks_`` compiled ``net``'s methods."""
    return all(name in vars(net) for name in COMPILED_METHODS)


def compiled_kernels(state: Any) -> tuple[str, ...]:
    """The ``state.kernels`` fields that are no longer the eager defaults."""
    eager = eager_kernels()
    return tuple(name for name in COMPILED_KERNELS
                 if getattr(state.kernels, name) is not getattr(eager, name))
