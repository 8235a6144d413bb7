"""One step of the training loop: collect (+ learn once the replay holds
``learner.learning_starts`` steps) with the production step (lobsurf.agent.step) or, with
``train.reference``, the readable one (lobsurf.agent.reference), then the divergence
guard's device-side finiteness check (no host sync). On CUDA, in one process, the learning
step plus the guard's check replays one CUDA graph (``train.cuda_graph``;
lobsurf.training.speed.cuda_graph); the pre-learning steps stay eager, between replays on
the same stream.
"""

from __future__ import annotations

import functools
import sys

import torch

from lobsurf.agent.reference import reference_step
from lobsurf.agent.state import StepConfig, TrainState
from lobsurf.agent.step import train_step
from lobsurf.errors import UserError
from lobsurf.training.faults.guard import DivergenceGuard
from lobsurf.training.run.prepare import TrainingRun
from lobsurf.training.speed.compile import compile_errors, compile_failure, compiled_kernels
from lobsurf.training.speed.cuda_graph import GraphedStep, step_generators


def take_step(run: TrainingRun, step: int) -> None:
    """Step ``step`` of the run (module doc): the graphed learning step where the run has
    one (captured at the first learning step, and again after a rollback), else eager."""
    learning = step >= run.cfg.learner.learning_starts
    try:
        if run.graph_on and learning:
            if run.graphed is None:  # said even without the bar: it can take a minute
                print("train: capturing the learning step as a CUDA graph"
                      + (", compiling it first (train.compile, about a minute)"
                         if compiled_kernels(run.state) else ""), file=sys.stderr)
                run.graphed = graphed_step(run.state, run.data.train_book, run.scfg, run.guard,
                                           run.device)
            run.graphed()
        else:
            guarded_step(run.state, run.data.train_book, run.scfg, run.guard, learning,
                         run.sync, run.cfg.train.reference)
    except compile_errors() as exc:
        raise UserError(compile_failure(exc)) from exc


def guarded_step(state: TrainState, book, scfg: StepConfig, guard: DivergenceGuard,
                 learning: bool, sync=None, reference: bool = False) -> None:
    """One step (the production step, or with ``reference`` the readable one:
    lobsurf.agent.reference), then the divergence guard's device-side check."""
    if reference:
        reference_step(state, book, scfg, learning)
    else:
        train_step(state, book, scfg, learning=learning, sync=sync)
    guard.check_(state)


def graphed_step(state: TrainState, book, scfg: StepConfig, guard: DivergenceGuard,
                 device: torch.device | str) -> GraphedStep:
    """The learning step plus the guard's check as one graph over this state."""
    return GraphedStep(functools.partial(guarded_step, state, book, scfg, guard, True),
                       (state, guard), step_generators(state), device)
