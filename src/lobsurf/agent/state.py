"""The training step's shared types: its static settings, its device constants, the state it
reads and writes, the table of its pure tensor functions, and the values those functions
pass between the collect (``lobsurf.agent.collect``), the learner (``lobsurf.agent.learn``)
and the step that joins them (``lobsurf.agent.step``). All three import this module and
none imports another's types, so the step's modules form no circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch

from lobsurf.agent.config import (AuxConfig, GateConfig, LearnerConfig, NetworkConfig,
                                  PolicyConfig, ReplayConfig, RewardConfig)
from lobsurf.agent.controllers import ControllerState
from lobsurf.agent.flat import FlatParameters
from lobsurf.agent.metrics import MetricSums
from lobsurf.agent.network import AgentNetwork
from lobsurf.agent.optim import TensorAdam
from lobsurf.agent.replay import PrioritizedReplay, Sample, WritePlan
from lobsurf.agent.transitions import Transitions
from lobsurf.data.dataset import Window
from lobsurf.data.labels import Labels
from lobsurf.models.feature_table import FeatureRows
from lobsurf.sim.env import BatchedLobEnv, StepValues


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
    precision: str = "fp32"
    """Network forwards in "fp32" or under "bf16" autocast (train.precision; the heads'
    outputs, the C51 projection and every loss stay fp32: lobsurf.models.precision)."""


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
    """Everything a step reads and writes (checkpointed by lobsurf.training.recovery.checkpoint, except
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
    kernels: StepKernels
    """The step's pure tensor functions (eager; ``train.compile`` swaps in compiled ones)."""
    flat_target: FlatParameters
    """The target network's parameters as one buffer laid out as the optimizer's flat
    online parameters: Polyak runs inside the optimizer's flat update."""
    branch: torch.cuda.Stream | None = None
    """On CUDA, a second stream on which the target net's forward and the C51 target run
    beside the online net's forward, and three small independent pieces beside the main
    line: the noise draws beside the replay sample, the sampled entries' new priorities
    beside the backward, the rest of the learner's bookkeeping (max priority, controllers,
    metrics) beside Adam and Polyak; None (CPU): one stream, in order."""
    learner_branch: torch.cuda.Stream | None = None
    """On CUDA, a stream on which the learner's losses and backward run beside the collect;
    None (CPU): in turn."""


class Observation(NamedTuple):
    """What the acting forward sees (``observe``): copies of the envs' state before the
    step (row [B] cursors, position, time_in_trade, unrealized_pnl), the support z [N], the
    K-windows at the cursors and the agent-state inputs [B, 3]."""

    row: torch.Tensor
    position: torch.Tensor
    time_in_trade: torch.Tensor
    unrealized_pnl: torch.Tensor
    z: torch.Tensor
    window: Window | FeatureRows
    inputs: torch.Tensor


class Acted(NamedTuple):
    """The acting policy's choice: actions [B] int64 sent to the simulator, gated [B] bool
    (False where no gate ran), and the new values of the controllers it moved (by name)."""

    actions: torch.Tensor
    gated: torch.Tensor
    controllers: dict[str, torch.Tensor]


class CollectUpdates(NamedTuple):
    """What one simulator step leaves to write (``collect_updates``): the transitions, the
    replay's write plan, and the new controller values and metric sums by name."""

    batch: Transitions
    replay: WritePlan
    controllers: dict[str, torch.Tensor]
    metrics: dict[str, torch.Tensor]


@dataclass
class Losses:
    """Every loss of one sample (0-d batch means) and what the updates need."""

    total: torch.Tensor
    q: torch.Tensor
    q_per_sample: torch.Tensor
    pi: torch.Tensor
    value: torch.Tensor
    frd: torch.Tensor
    aux: torch.Tensor
    policy_entropy: torch.Tensor
    agreement: torch.Tensor
    q_taken_mean: torch.Tensor


class LearnerInputs(NamedTuple):
    """The networks' inputs of a learning step and the bootstrap (``learner_inputs``): the
    support z [N]; the target net's K-windows and agent-state inputs for s then s' [2B]; the
    online net's for s [B] (the first half of the target's: gathered once); the bootstrap's
    return, terminal flag and discount (a float or [B], ``project_categorical``)."""

    z: torch.Tensor
    target_window: Window | FeatureRows
    target_inputs: torch.Tensor
    online_window: Window | FeatureRows
    online_inputs: torch.Tensor
    reward: torch.Tensor
    done: torch.Tensor
    gamma: float | torch.Tensor


class LearnUpdates(NamedTuple):
    """What one learning step leaves to write after its backward (``learn_updates``): the
    new max priority, the new controller values and metric sums by name (the sampled
    entries' new sampling weights went in beside the backward: ``gradients``)."""

    max_priority: torch.Tensor
    controllers: dict[str, torch.Tensor]
    metrics: dict[str, torch.Tensor]


class GradientSync(Protocol):
    """The collectives a step needs (lobsurf.training.distributed.collective.Collective;
    None: one process)."""

    def grads_(self, params: list[torch.Tensor], flat: torch.Tensor | None = None) -> None: ...
    def controllers_(self, ctl: ControllerState) -> None: ...




@dataclass
class StepKernels:
    """The pure tensor functions the step calls through ``TrainState.kernels``: the eager
    functions (``lobsurf.agent.step.eager_kernels``: the CPU path), or compiled versions of
    the same functions (``lobsurf.training.speed.compile``). Each returns new values; the step does
    the in-place writes."""

    observe: Callable[..., Observation]
    act: Callable[..., Acted]
    sim_step: Callable[..., StepValues]
    collect_updates: Callable[..., CollectUpdates]
    sample: Callable[..., Sample]
    draw: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    sample_at: Callable[..., Sample]
    learner_inputs: Callable[..., LearnerInputs]
    c51_target: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    loss_terms: Callable[..., tuple[torch.Tensor, ...]]
    flat_clip_coefficient: Callable[..., tuple[torch.Tensor, ...]]
    flat_adam: Callable[..., torch.Tensor]
    """The flat optimizer's update (clip division, Adam, Polyak): unlike the others it
    writes its 1-d inputs in place (lobsurf.agent.optim)."""
    learn_updates: Callable[..., LearnUpdates]
    priority_weight: Callable[..., torch.Tensor]
    noise: Callable[[torch.Tensor], torch.Tensor]
