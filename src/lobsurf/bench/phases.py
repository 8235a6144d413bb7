"""Where an eager training step spends its time: named sub-phases, timed from outside.

``timed_phases(state)`` wraps, for the duration of a ``with`` block only, the functions and
methods the real step (lobsurf.agent.step, .collect, .learn) calls: the step's own code is
not copied or edited, so the figures are of the code ``lobsurf train`` runs. Each wrapped
call is bracketed by device synchronizes and timed on the host, under the path of the phases
it runs inside (``learn/losses/target forward``); a parent's time minus its children's is its
``(rest)``. The synchronizes add some microseconds per range on CUDA, so the sum of the
phases is a little above an unprofiled step.

With ``label=True`` each timed call is also a ``torch.profiler.record_function`` range named
``PHASE_MARK + path``, opened after the entry synchronize and closed after the exit one, so
every device kernel of a phase runs inside its range (a profiler trace of a labelled pass
attributes each kernel to its phase by that containment).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import torch

import lobsurf.agent.collect as collect_module
import lobsurf.agent.learn as learn_module
import lobsurf.agent.step as step_module

#: prefix of the profiler ranges of labelled phases
PHASE_MARK = "phase:"

#: the step's modules: each global function of theirs named in _FUNCTIONS is timed where it
#: is looked up (a function imported into two modules is wrapped in both)
_STEP_MODULES = (step_module, collect_module, learn_module)
#: (owner attribute path from the state, attribute, phase name)
_METHODS = (
    ("env", "step", "simulator step"), ("replay", "write_", "replay write"),
    ("replay", "sample", "replay sample"), ("replay", "sample_drawn", "replay sample"),
    ("replay", "draw_ahead_", "replay draw"), ("online", "forward", "online forward"),
    ("target", "embed", "target encoder"), ("target", "q_logits", "target heads"),
    ("optimizer", "zero_grad", "zero grad"), ("optimizer", "step", "adam"),
    ("replay", "write_priorities_", "priorities"),
    # the step's kernels (compiled or eager: timed as one piece either way)
    ("kernels", "observe", "observe"), ("kernels", "act", "thompson + gates"),
    ("kernels", "sim_step", "step values"),
    ("kernels", "collect_updates", "rewards, replay plan, controllers, metrics"),
    ("kernels", "sample", "prioritized draw"), ("kernels", "draw", "prioritized draw"),
    ("kernels", "sample_at", "sampled transitions"),
    ("kernels", "learner_inputs", "learner inputs"),
    ("kernels", "c51_target", "C51 target"), ("kernels", "loss_terms", "loss terms"),
    ("kernels", "flat_clip_coefficient", "grad clip"),
    ("kernels", "flat_adam", "flat update"),
    ("kernels", "priority_weight", "priority weights"),
    ("kernels", "learn_updates", "max priority, controllers, metrics"),
)
_FUNCTIONS = (
    ("fresh_noise_", "noise"), ("flat_gradients_", "backward"),
    # collect and the learner's three parts by name, so that the phases read the same
    # whether the learner runs after the collect or beside it (learn_beside_collect)
    ("collect_deferred", "collect"), ("draw_sample", "learn"), ("drawn_sample", "learn"),
    ("draw_next_", "learn"), ("gradients", "learn"),
    ("apply_gradients", "learn"), ("losses", "losses"),
    ("book_window", "window rows"), ("choose_actions", "act + gates"),
    ("reward_pipeline_values", "reward pipeline"), ("mark_shaping", "reward shaping"),
    ("action_histogram_values", "controllers"),
    ("project_categorical", "C51 projection"),
)


class PhaseTimer:
    """Seconds per phase path, summed over the calls made while installed."""

    def __init__(self, device: torch.device | str, label: bool = False) -> None:
        self.cuda = torch.device(device).type == "cuda"
        self.label = label
        self.seconds: dict[str, float] = defaultdict(float)
        self.stack: list[str] = []

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def wrap(self, fn: Callable, name: str) -> Callable:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.stack.append(name)
            path = "/".join(self.stack)
            self.sync()
            t0 = time.perf_counter()
            try:
                with self.range(path):
                    result = fn(*args, **kwargs)
                    self.sync()
                return result
            finally:
                self.seconds[path] += time.perf_counter() - t0
                self.stack.pop()
        return timed

    def range(self, path: str) -> contextlib.AbstractContextManager:
        """The profiler range of a labelled phase (a no-op context when not labelling)."""
        if not self.label:
            return contextlib.nullcontext()
        return torch.profiler.record_function(PHASE_MARK + path)

    def per_step_ms(self, steps: int) -> dict[str, float]:
        """ms per step of each path, plus ``<parent>/(rest)`` for parents with children."""
        ms = {k: v * 1e3 / steps for k, v in self.seconds.items()}
        out = dict(ms)
        for parent in ms:
            children = [v for k, v in ms.items()
                        if k.startswith(parent + "/") and "/" not in k[len(parent) + 1:]]
            if children:
                out[parent + "/(rest)"] = ms[parent] - sum(children)
        return {k: round(v, 4) for k, v in sorted(out.items())}


@contextlib.contextmanager
def timed_phases(state: Any, device: torch.device | str, label: bool = False
                 ) -> Iterator[PhaseTimer]:
    """Install the phase wrappers on ``state`` and the step's modules; removed on exit
    (``label``: profiler ranges too, module docstring)."""
    timer = PhaseTimer(device, label)
    undo: list[Callable[[], None]] = []

    def patch(owner: Any, attr: str, name: str, instance: bool) -> None:
        original = getattr(owner, attr)
        had_own = instance and attr in vars(owner)  # e.g. a compiled method (train.compile)
        setattr(owner, attr, timer.wrap(original, name))
        if instance and not had_own:  # the instance attribute shadows the class's; delete it
            undo.append(lambda: delattr(owner, attr))
        else:
            undo.append(lambda: setattr(owner, attr, original))

    try:
        for path, attr, name in _METHODS:
            patch(getattr(state, path), attr, name, instance=True)
        for attr, name in _FUNCTIONS:
            for module in _STEP_MODULES:
                if hasattr(module, attr):
                    patch(module, attr, name, instance=False)
        yield timer
    finally:
        for fn in reversed(undo):
            fn()
