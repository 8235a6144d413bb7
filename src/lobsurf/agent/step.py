"""One training step: ``collect`` (act, gate, simulate, reward pipeline, replay write;
``lobsurf.agent.collect``) and ``learn`` (replay sample, every loss, backward, Adam, Polyak,
priorities, controllers; ``lobsurf.agent.learn``), over named state: the state, the step's
static settings and tables, its pure tensor functions, and ``train_step``.

Read top to bottom, a step is:
    resample noise -> gather the K-windows at the envs' cursors -> features -> encoder -> heads
    -> Thompson sample of Q -> confidence gate -> FRD gate -> simulator step
    -> reward pipeline (mark-to-market shaping -> scale -> clamp -> atom span)
    -> + beta log pi_ref(a) -> replay write
    (+ outcome labels of the trades that closed; terminal only at episode ends)
    -> controllers (post-gate action histogram, gate threshold) -> metrics
    -> [learn] replay sample -> target net on s and s' -> C51 projection of the target's
    greedy action at s' -> online heads at s (on CUDA beside the target side, on a second
    stream) -> C51 CE x IS weights + pi distillation/entropy + V + FRD + direction +
    outcome (all batch means) -> backward (the new priorities beside it) -> clip -> Adam
    -> Polyak -> max priority, per_beta, alpha, tau

By default (``learner.sample_before_collect``) the learner draws its sample before the
collect writes, from the transitions of the steps before, so everything up to its
backward runs beside the collect (on CUDA on a stream of its own; the collect beside the
draw too, its replay write after the draw's reads) and only clip, Adam and what follows
wait for both (``learn_beside_collect``). With ``train.draw_ahead`` the collect's stream
then draws the next learning step's indices beside the backward.

Capture-ready: static shapes, buffers updated in place, no ``.item()``/``.cpu()``/
``.tolist()`` and no Python branch on a device value (tests patch those to raise): the gate
warm-up compares a device step counter. The only Python branches are on static config, on
``learning`` (a host flag of the loop) and, with ``train.draw_ahead``, on whether a draw was
made ahead (a host flag that only a first learning step after collects alone finds unset:
eager, before any capture).

Kernel count: at small B the graphed step costs about a microsecond per kernel
(PERFORMANCE.md 2.1), so the arithmetic between the network calls is in pure tensor
functions, ``StepKernels`` (observe, act, simulate, the post-simulator bookkeeping, the
replay sample, the learner's inputs, the C51 target, the losses, the gradient clip's and
Adam's scalars, the learner's bookkeeping, f of the noise), which ``train.compile`` fuses
into a few kernels each. They return new values; the step writes them into its state in
place in a handful of multi-tensor copies (lobsurf.writeback). Outside them stay the
random draws (custom generators), the writes at indices into big buffers (replay storage,
priorities), the multi-tensor ops over the parameters (gradients, clip, Adam, Polyak) and
the networks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from lobsurf.agent.collect import (Acted, CollectUpdates, Observation, collect,
                                   collect_deferred, collect_updates, observe, thompson_gate)
from lobsurf.agent.config import (AuxConfig, GateConfig, LearnerConfig, NetworkConfig,
                                  PolicyConfig, ReplayConfig, RewardConfig)
from lobsurf.agent.controllers import ControllerState
from lobsurf.agent.flat import FlatParameters
from lobsurf.agent.learn import (GradientSync, LearnerInputs, LearnUpdates, Losses,
                                 apply_gradients, c51_target, clip_coefficient, draw_next_,
                                 draw_sample, drawn_sample, flat_clip_coefficient, gradients,
                                 learn, learn_updates, learner_inputs, loss_terms)
from lobsurf.agent.metrics import MetricSums
from lobsurf.agent.network import AgentNetwork
from lobsurf.agent.noisy import resample_noise_, scaled_noise
from lobsurf.agent.optim import AdamScalars, TensorAdam, adam_scalars, flat_adam_
from lobsurf.agent.replay import (PrioritizedReplay, Sample, draw_values, priority_weight,
                                  sample_at, sample_values)
from lobsurf.data.dataset import BookTensors
from lobsurf.data.labels import Labels
from lobsurf.sim.env import BatchedLobEnv, StepValues, step_values
from lobsurf.streams import run_beside
from lobsurf.writeback import copy_values_


@dataclass(frozen=True)
class StepConfig:
    """The static settings one step reads (parts of the RunConfig)."""

    network: NetworkConfig
    replay: ReplayConfig
    learner: LearnerConfig
    reward: RewardConfig
    policy: PolicyConfig
    gates: GateConfig
    aux: AuxConfig
    window: int
    position_unit: int
    """Lots that enter the network as position 1 (the largest order size)."""
    batch_size: int
    """Transitions per learning step (LearnerConfig.batch_size resolved against B)."""
    num_envs: int
    """B: transitions written to replay per step (n-step returns walk the ring by B)."""
    controller_ema_rate: float
    """EMA rate of the action-histogram controllers (entropy, hold fraction)."""
    precision: str = "fp32"
    """Network forwards in "fp32" or under "bf16" autocast (train.precision; the heads'
    outputs, the C51 projection and every loss stay fp32: lobsurf.models.precision)."""
    draw_ahead: bool = True
    """With ``learner.sample_before_collect``: each learning step draws the next step's
    replay indices once its collect has written and its priorities are in, beside its
    backward, and the next step starts from that draw (train.draw_ahead;
    ``learn_beside_collect``) instead of drawing first. The same indices and weights (but
    with train.shared_generator)."""
    split_target: bool = False
    """The target net's forward as two calls, on s and on s', where ``TrainState`` has a
    stream for the s' half (train.split_target; ``lobsurf.agent.learn.splits_target``);
    false: one call on both."""


@dataclass
class StepTables:
    """Device constants of the step, made once (not checkpointed: derived from the config).

    order_lots [A] int64 signed lots per action; log_pi_ref [A]; bucket_lower/upper [C]
    FRD bucket bounds in ticks; fee_per_lot, fee_per_value_tick, tick_value 0-d float64;
    loss_seed 0-d float32 1, the backward's seed d total / d total (autograd would fill a
    new one every step: a kernel on the learner's critical path).
    """

    order_lots: torch.Tensor
    log_pi_ref: torch.Tensor
    bucket_lower: torch.Tensor
    bucket_upper: torch.Tensor
    fee_per_lot: torch.Tensor
    fee_per_value_tick: torch.Tensor
    tick_value: torch.Tensor
    loss_seed: torch.Tensor


@dataclass
class TrainState:
    """Everything a step reads and writes (checkpointed by lobsurf.train.checkpoint, except
    ``tables`` and ``labels``, which the config and data rebuild)."""

    online: AgentNetwork
    target: AgentNetwork
    optimizer: TensorAdam
    controllers: ControllerState
    replay: PrioritizedReplay
    env: BatchedLobEnv
    noise_generator: torch.Generator
    acting_generator: torch.Generator
    metrics: MetricSums
    step_count: torch.Tensor
    """0-d int64 device counter of collected steps (drives the gate warm-up)."""
    tables: StepTables
    labels: Labels
    """Auxiliary labels of the training book's rows."""
    kernels: StepKernels = field(default_factory=lambda: StepKernels())
    """The step's pure tensor functions (eager; ``train.compile`` swaps in compiled ones)."""
    branch: torch.cuda.Stream | None = None
    """A second CUDA stream on which the target net's forward and the C51 target run beside
    the online net's forward (``train.overlap_target``), and three small independent
    pieces beside the main line: the noise draws beside the replay sample, the sampled
    entries' new priorities beside the backward, the rest of the learner's bookkeeping
    (max priority, controllers, metrics) beside Adam and Polyak; None: one stream, in
    order."""
    learner_branch: torch.cuda.Stream | None = None
    """A CUDA stream on which the learner's losses and backward run beside collect
    (``train.overlap_collect`` with ``learner.sample_before_collect``); None: in turn."""
    target_halves: torch.cuda.Stream | None = None
    """A CUDA stream on which the target net's forward on s' runs beside its forward on s
    (``train.split_target`` with ``train.overlap_target``, on CUDA); None: one call on
    both (``lobsurf.agent.learn.splits_target``)."""
    forwards_done: torch.cuda.Event | None = None
    """Recorded on ``learner_branch`` once the learner's losses are enqueued (its forward
    and, joined into it, the target net's); the collect waits for it before it starts, so
    it runs beside the learner's backward (``train.collect_beside_backward``). None: the
    collect starts at the fork."""
    flat_target: FlatParameters | None = None
    """The target network's parameters as one buffer laid out as the optimizer's flat
    online parameters (``train.flat_parameters``): Polyak runs inside the optimizer's flat
    update. None: the per-tensor Polyak step."""


@dataclass
class StepKernels:
    """The pure tensor functions the step calls through ``TrainState.kernels``: the eager
    functions by default (the reference and the CPU path); ``lobsurf.train.compile``
    replaces them with compiled versions of the same functions. Each returns new values;
    the step does the in-place writes."""

    observe: Callable[..., Observation] = observe
    act: Callable[..., Acted] = thompson_gate
    sim_step: Callable[..., StepValues] = step_values
    collect_updates: Callable[..., CollectUpdates] = collect_updates
    sample: Callable[..., Sample] = sample_values
    draw: Callable[..., tuple[torch.Tensor, torch.Tensor]] = draw_values
    sample_at: Callable[..., Sample] = sample_at
    learner_inputs: Callable[..., LearnerInputs] = learner_inputs
    c51_target: Callable[..., tuple[torch.Tensor, torch.Tensor]] = c51_target
    loss_terms: Callable[..., tuple[torch.Tensor, ...]] = loss_terms
    clip_coefficient: Callable[..., tuple[torch.Tensor, ...]] = clip_coefficient
    flat_clip_coefficient: Callable[..., tuple[torch.Tensor, ...]] = flat_clip_coefficient
    adam_scalars: Callable[..., AdamScalars] = adam_scalars
    flat_adam: Callable[..., torch.Tensor] = flat_adam_
    """The flat optimizer's update (clip division, Adam, Polyak): unlike the others it
    writes its 1-d inputs in place (lobsurf.agent.optim)."""
    learn_updates: Callable[..., LearnUpdates] = learn_updates
    priority_weight: Callable[..., torch.Tensor] = priority_weight
    noise: Callable[[torch.Tensor], torch.Tensor] = scaled_noise


def fresh_noise_(state: TrainState) -> None:
    """New noise in the online and the target network's noisy layers (online first, from
    the noise generator), resampled together (lobsurf.agent.noisy.resample_noise_)."""
    resample_noise_((state.online, state.target), state.noise_generator, state.kernels.noise)


def train_step(state: TrainState, book: BookTensors, cfg: StepConfig, learning: bool,
               sync: GradientSync | None = None) -> None:
    """Resample the noise, collect one step, and learn when ``learning`` (host flag): from a
    sample drawn before the collect, beside it (``learn_beside_collect``, the default
    ``learner.sample_before_collect``), or after it.

    With ``sync`` (several processes) the controllers are averaged over the ranks right
    after ``collect``, the only place they move on local data, so the learner's controller
    updates read the same values on every rank; then the gradients are averaged.
    """
    if learning and cfg.learner.sample_before_collect:
        learn_beside_collect(state, book, cfg, sync)
        return
    fresh_noise_(state)
    collect(state, book, cfg)
    if sync is not None:
        sync.controllers_(state.controllers)
    if learning:
        learn(state, book, cfg, sync)


def learn_beside_collect(state: TrainState, book: BookTensors, cfg: StepConfig,
                         sync: GradientSync | None = None) -> None:
    """A learning step whose learner samples before the step's collect writes
    (``learner.sample_before_collect``), so its losses and backward need nothing collect
    makes and run beside it (on ``state.learner_branch``, a second CUDA stream; in turn
    without one: the noise, the draw, the learner's losses and backward, then the collect).

    The learner's half resamples the noise (beside its draw, on ``state.branch``), draws
    its replay sample and gathers its inputs (never one of the slots this collect
    overwrites), then reads the networks' parameters and the controllers as they were
    before collect; beside its backward it writes the sampled entries' priorities (slots
    the collect never writes or reads). The collect reads the parameters and writes the
    simulator, the replay and (deferred to the join) the controllers and metric sums;
    neither writes what the other reads. With a stream the collect starts once the noise
    is in, beside the draw (a chain of small kernels that everything of the learner waits
    for), and its replay write waits for the end of the draw, which reads those slots and
    their labels. After the join: clip, Adam, the rest of the bookkeeping, Polyak. With
    ``state.forwards_done`` the collect waits for the learner's forwards too, and runs
    beside its backward.

    With ``cfg.draw_ahead`` the draw moves off the head of the learner's chain: the
    collect's stream, once its replay write is done and the learner's priorities are in,
    draws the next learning step's indices (beside the backward), and the learner's half
    starts from the draw made by the step before (its transitions and importance weights
    then; the first learning step draws its own first). Between the two nothing writes
    what the draw reads (the weights, the ring pointer, the fill count), so it draws the
    indices the plain order would, from the same uniforms of the replay's generator (with
    ``train.shared_generator``, whose one stream the other draws share, from other ones).
    A collect without this learner after it (``collect``: ``train_step``'s other steps)
    discards the draw.
    """
    forwards_done = state.forwards_done
    beside = state.learner_branch is not None
    ahead = cfg.draw_ahead
    # A stream only waits for an event recorded by work issued (on the host) before the
    # wait; run_beside issues the learner's half first, so the collect waits for events of
    # the learner's half, never the other way round.
    noised = torch.cuda.Event() if beside else None  # this step's noise in the parameters
    drawn = torch.cuda.Event() if beside else None  # the draw's reads of the replay done
    # the sampled entries' priorities written (the next draw reads them)
    prioritized = torch.cuda.Event() if beside and ahead else None

    def fresh_noise():
        fresh_noise_(state)
        if noised is not None:
            noised.record()

    def draw() -> tuple[Sample, LearnerInputs]:
        if ahead:
            return drawn_sample(state, book, cfg)
        return draw_sample(state, book, cfg, reserved=cfg.num_envs)

    def learner_half() -> tuple[Losses, list[torch.Tensor]]:
        # the noise draws touch nothing the sample reads: beside it on state.branch
        _, (sample, li) = run_beside(state.branch, fresh_noise, draw)
        if drawn is not None:
            drawn.record()
        return gradients(state, book, sample, cfg, li, forwards_done, prioritized)

    def collect_half():
        if noised is not None:
            noised.wait()  # its acting forward reads this step's noise
        if forwards_done is not None:
            forwards_done.wait()  # the learner's forwards first (train.collect_beside_backward)
        deferred = collect_deferred(state, book, cfg, before_write=drawn)
        if ahead:
            if prioritized is not None:
                prioritized.wait()
            # after this step's replay write and priorities, as the next step would draw
            draw_next_(state, cfg)
        return deferred

    (ls, params), (_, pending) = run_beside(state.learner_branch, learner_half, collect_half)
    copy_values_(pending)
    if sync is not None:
        sync.controllers_(state.controllers)
    apply_gradients(state, ls, params, cfg, sync)
