"""One training step: ``collect`` (act, gate, simulate, reward pipeline, replay write;
``lobsurf.agent.collect``) and ``learn`` (replay sample, every loss, backward, Adam, Polyak,
priorities, controllers; ``lobsurf.agent.learn``), joined by ``train_step``. Its types are
in ``lobsurf.agent.state``; ``lobsurf.agent.reference`` is the same step in one plain
function, and the place to start reading.

The learner draws its sample before the collect writes, from the transitions of the steps
before, so everything up to its backward runs beside the collect (on CUDA on a stream of
its own; the collect beside the draw too, its replay write after the draw's reads), and
only clip, Adam and what follows wait for both (``learn_beside_collect``). The collect's
stream then draws the next learning step's indices beside the backward.

Capture-ready: static shapes, buffers updated in place, no ``.item()``/``.cpu()``/
``.tolist()`` and no Python branch on a device value (tests patch those to raise): the gate
warm-up compares a device step counter. The only Python branches are on static config, on
``learning`` (a host flag of the loop) and on whether a draw was made ahead (a host flag
that only a first learning step after collects alone finds unset: eager, before any
capture).

Kernel count: at small B the graphed step costs about a microsecond per kernel
(PERFORMANCE.md 2.1), so the arithmetic between the network calls is in pure tensor
functions, ``StepKernels``, which ``train.compile`` fuses into a few kernels each. They
return new values; the step writes them into its state in place in a handful of
multi-tensor copies (lobsurf.writeback). Outside them stay the random draws (custom
generators), the writes at indices into big buffers (replay storage, priorities), the
gradients, Adam and Polyak over the flat parameters, and the networks.
"""

from __future__ import annotations

import torch

from lobsurf.agent.collect import (collect, collect_deferred, collect_updates, observe,
                                   thompson_gate)
from lobsurf.agent.learn import (apply_gradients, c51_target, draw_next_,
                                 drawn_sample, flat_clip_coefficient, gradients,
                                 learn_updates, learner_inputs, loss_terms)
from lobsurf.agent.noisy import resample_noise_, scaled_noise
from lobsurf.agent.optim import flat_adam_
from lobsurf.agent.replay import (draw_values, priority_weight, sample_at,
                                  sample_values)
from lobsurf.agent.state import (GradientSync, Losses, StepConfig, StepKernels,
                                 TrainState)
from lobsurf.data.dataset import BookTensors
from lobsurf.sim.env import step_values
from lobsurf.streams import run_beside
from lobsurf.writeback import copy_values_


def eager_kernels() -> StepKernels:
    """The step's pure tensor functions as written (the CPU path, and what
    ``train.compile`` compiles)."""
    return StepKernels(
        observe=observe, act=thompson_gate, sim_step=step_values,
        collect_updates=collect_updates, sample=sample_values, draw=draw_values,
        sample_at=sample_at, learner_inputs=learner_inputs, c51_target=c51_target,
        loss_terms=loss_terms, flat_clip_coefficient=flat_clip_coefficient,
        flat_adam=flat_adam_, learn_updates=learn_updates, priority_weight=priority_weight,
        noise=scaled_noise)


def fresh_noise_(state: TrainState) -> None:
    """New noise in the online and the target network's noisy layers (online first, from
    the noise generator), resampled together (lobsurf.agent.noisy.resample_noise_)."""
    resample_noise_((state.online, state.target), state.noise_generator, state.kernels.noise)


def train_step(state: TrainState, book: BookTensors, cfg: StepConfig, learning: bool,
               sync: GradientSync | None = None) -> None:
    """Resample the noise and collect one step; when ``learning`` (host flag), learn beside
    the collect from a sample drawn before it (``learn_beside_collect``).

    With ``sync`` (several processes) the controllers are averaged over the ranks right
    after the collect, the only place they move on local data, so the learner's controller
    updates read the same values on every rank; then the gradients are averaged.
    """
    if learning:
        learn_beside_collect(state, book, cfg, sync)
        return
    fresh_noise_(state)
    collect(state, book, cfg)
    if sync is not None:
        sync.controllers_(state.controllers)


def learn_beside_collect(state: TrainState, book: BookTensors, cfg: StepConfig,
                         sync: GradientSync | None = None) -> None:
    """A learning step whose learner samples before the step's collect writes, so its
    losses and backward need nothing the collect makes and run beside it (on
    ``state.learner_branch``, a second CUDA stream; in turn without one: the noise, the
    draw, the learner's losses and backward, then the collect).

    The learner's half resamples the noise (beside its draw, on ``state.branch``), takes
    the replay sample drawn ahead by the step before (the first learning step draws its
    own) and gathers its inputs (never one of the slots this collect overwrites), then
    reads the networks' parameters and the controllers as they were before the collect;
    beside its backward it writes the sampled entries' priorities (slots the collect never
    writes or reads). The collect reads the parameters and writes the simulator, the replay
    and (deferred to the join) the controllers and metric sums; neither writes what the
    other reads. With a stream the collect starts once the noise is in, beside the draw,
    and its replay write waits for the end of the draw, which reads those slots and their
    labels. Once its write is done and the learner's priorities are in, the collect's
    stream draws the next learning step's indices (beside the backward): between the two
    nothing writes what a draw reads (the weights, the ring pointer, the fill count), so it
    draws the indices the plain order would. After the join: clip, Adam, the rest of the
    bookkeeping, Polyak. A collect without this learner after it (``collect``:
    ``train_step``'s other steps) discards the draw.
    """
    beside = state.learner_branch is not None
    # A stream only waits for an event recorded by work issued (on the host) before the
    # wait; run_beside issues the learner's half first, so the collect waits for events of
    # the learner's half, never the other way round.
    noised = torch.cuda.Event() if beside else None  # this step's noise in the parameters
    drawn = torch.cuda.Event() if beside else None  # the draw's reads of the replay done
    # the sampled entries' priorities written (the next draw reads them)
    prioritized = torch.cuda.Event() if beside else None

    def fresh_noise():
        fresh_noise_(state)
        if noised is not None:
            noised.record()

    def learner_half() -> Losses:
        # the noise draws touch nothing the sample reads: beside it on state.branch
        _, (sample, li) = run_beside(state.branch, fresh_noise,
                                     lambda: drawn_sample(state, book, cfg))
        if drawn is not None:
            drawn.record()
        return gradients(state, book, sample, cfg, li, prioritized)

    def collect_half():
        if noised is not None:
            noised.wait()  # its acting forward reads this step's noise
        deferred = collect_deferred(state, book, cfg, before_write=drawn)
        if prioritized is not None:
            prioritized.wait()
        # after this step's replay write and priorities, as the next step would draw
        draw_next_(state, cfg)
        return deferred

    ls, (_, pending) = run_beside(state.learner_branch, learner_half, collect_half)
    copy_values_(pending)
    if sync is not None:
        sync.controllers_(state.controllers)
    apply_gradients(state, ls, cfg, sync)
