"""One training step: ``collect`` (act, gate, simulate, reward pipeline, replay write) and
``learn`` (replay sample, every loss, backward, Adam, Polyak, priorities, controllers), over
named state.

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
    outcome (all batch means) -> backward -> clip -> Adam -> priorities -> Polyak ->
    per_beta, alpha, tau

By default (``learner.sample_before_collect``) the learner draws its sample before the
collect writes, from the transitions of the steps before, so everything up to its
backward runs beside the collect (on CUDA on a stream of its own) and only clip, Adam and
what follows wait for both (``learn_beside_collect``).

Capture-ready: static shapes, buffers updated in place, no ``.item()``/``.cpu()``/
``.tolist()`` and no Python branch on a device value (tests patch those to raise): the gate
warm-up compares a device step counter. The only Python branches are on static config and on
``learning`` (a host flag of the loop).

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
from dataclasses import dataclass, field, fields
from typing import NamedTuple, Protocol

import torch

from lobsurf.agent.acting import (categorical_uniforms, greedy_actions, pi_actions,
                                  thompson_actions, thompson_from_uniforms)
from lobsurf.agent.config import (AuxConfig, GateConfig, LearnerConfig, NetworkConfig,
                                  PolicyConfig, ReplayConfig, RewardConfig)
from lobsurf.agent.controllers import (ControllerState, action_histogram_values,
                                       per_beta_values)
from lobsurf.agent.distributional import (categorical_cross_entropy, expected_value,
                                          project_categorical, support)
from lobsurf.agent.gates import (GateResult, apply_gates, exploration_slots,
                                 gate_threshold_values, move_probabilities, profit_confidence)
from lobsurf.agent.metrics import MetricSums, added
from lobsurf.agent.network import AgentNetwork, AgentOutput, agent_state_features
from lobsurf.agent.noisy import resample_noise_, scaled_noise
from lobsurf.agent.flat import FlatParameters
from lobsurf.agent.optim import AdamScalars, TensorAdam, adam_scalars, flat_adam_
from lobsurf.agent.policy import agreement, alpha_tau_values, pi_loss, value_loss
from lobsurf.agent.replay import (PrioritizedReplay, Sample, Transitions, WritePlan,
                                  n_step_values, priority_values, sample_values, write_plan)
from lobsurf.agent.reward import mark_shaping, reward_pipeline_values
from lobsurf.data.dataset import BookTensors, Window
from lobsurf.data.labels import Labels
from lobsurf.models.feature_table import FeatureRows, book_window
from lobsurf.models.heads import direction_loss, frd_loss, outcome_loss
from lobsurf.models.precision import float_outputs, forward_precision
from lobsurf.sim.env import BatchedLobEnv, StepValues, step_values
from lobsurf.sim.state import SimState, StepResult
from lobsurf.streams import run_beside
from lobsurf.writeback import copy_values_, named_pairs


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


@dataclass
class StepTables:
    """Device constants of the step, made once (not checkpointed: derived from the config).

    order_lots [A] int64 signed lots per action; log_pi_ref [A]; bucket_lower/upper [C]
    FRD bucket bounds in ticks; fee_per_lot, fee_per_value_tick, tick_value 0-d float64.
    """

    order_lots: torch.Tensor
    log_pi_ref: torch.Tensor
    bucket_lower: torch.Tensor
    bucket_upper: torch.Tensor
    fee_per_lot: torch.Tensor
    fee_per_value_tick: torch.Tensor
    tick_value: torch.Tensor


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
    the online net's forward (``train.overlap_target``), and two small independent pieces
    beside the main line: the noise draws beside the replay sample, the learner's
    bookkeeping (priorities, controllers, metrics) beside Adam and Polyak; None: one
    stream, in order."""
    learner_branch: torch.cuda.Stream | None = None
    """A CUDA stream on which the learner's losses and backward run beside collect
    (``train.overlap_collect`` with ``learner.sample_before_collect``); None: in turn."""
    flat_target: FlatParameters | None = None
    """The target network's parameters as one buffer laid out as the optimizer's flat
    online parameters (``train.flat_parameters``): Polyak runs inside the optimizer's flat
    update. None: the per-tensor Polyak step."""


def _state_inputs(ctl: ControllerState, position: torch.Tensor, time_in_trade: torch.Tensor,
                  unrealized_pnl: torch.Tensor, cfg: StepConfig) -> torch.Tensor:
    return agent_state_features(position, time_in_trade, unrealized_pnl, ctl.pnl_magnitude,
                                cfg.position_unit, cfg.network)


def _snapshot(s: SimState) -> tuple[torch.Tensor, ...]:
    """Copies of the envs' (cursor, position, time in trade, unrealized PnL): the simulator
    step overwrites the state. The int64 three are copied as one stack (one kernel)."""
    cursor, position, time_in_trade = torch.stack((s.cursor, s.position, s.time_in_trade))
    return cursor, position, time_in_trade, s.unrealized_pnl.clone()


def _at_least_fp32(dtype: torch.dtype) -> torch.dtype:
    # the heads' outputs leave bf16 autocast as fp32 (lobsurf.models.precision)
    return torch.promote_types(dtype, torch.float32)


def round_trip_cost_ticks(book: BookTensors, row: torch.Tensor, tables: StepTables
                          ) -> torch.Tensor:
    """[B] ticks a one-lot round trip at ``row`` must beat: the spread plus two fees."""
    bid, ask = book.bid_px_ticks[row, 0], book.ask_px_ticks[row, 0]
    mid = (bid + ask).to(torch.float64) / 2
    fee = tables.fee_per_lot + mid * tables.fee_per_value_tick
    return ((ask - bid).to(torch.float64) + 2 * fee / tables.tick_value).to(torch.float32)


def gate(out: AgentOutput, probs: torch.Tensor, z: torch.Tensor, proposed: torch.Tensor,
         book: BookTensors, row: torch.Tensor, tables: StepTables, threshold: torch.Tensor,
         active: torch.Tensor, explore_slots: int, gates: GateConfig) -> GateResult:
    """The confidence gate (Q's profit confidence) and the FRD gate (the FRD head's odds of a
    move beyond costs) on proposed actions; training and evaluation share this."""
    frd_probs = torch.softmax(out.frd_logits[:, gates.frd_horizon_index], dim=-1)
    p_up, p_down = move_probabilities(frd_probs, tables.bucket_lower, tables.bucket_upper,
                                      round_trip_cost_ticks(book, row, tables))
    return apply_gates(proposed, profit_confidence(probs, z), p_up, p_down, tables.order_lots,
                       threshold, active, explore_slots, gates)


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


def observe(s: SimState, book: BookTensors, ctl: ControllerState, cfg: StepConfig
            ) -> Observation:
    """The K-window at each cursor plus the agent's own state (the acting network's input)."""
    row, position, time_in_trade, unrealized = _snapshot(s)
    return Observation(row=row, position=position, time_in_trade=time_in_trade,
                       unrealized_pnl=unrealized,
                       z=support(ctl.v_min, ctl.v_max, cfg.network.num_atoms),
                       window=book_window(book, row, cfg.window),
                       inputs=_state_inputs(ctl, position, time_in_trade, unrealized, cfg))


class Acted(NamedTuple):
    """The acting policy's choice: actions [B] int64 sent to the simulator, gated [B] bool
    (False where no gate ran), and the new values of the controllers it moved (by name)."""

    actions: torch.Tensor
    gated: torch.Tensor
    controllers: dict[str, torch.Tensor]


def thompson_gate(out: AgentOutput, z: torch.Tensor, u: torch.Tensor, book: BookTensors,
                  row: torch.Tensor, tables: StepTables, ctl: ControllerState,
                  step_count: torch.Tensor, explore_slots: int, gates: GateConfig) -> Acted:
    """Thompson samples of Q from their uniforms u [B, A] (drawn outside: a custom generator),
    then the confidence and FRD gates, once the warm-up (the device step counter) is over;
    and the gate threshold's next value. The heads' outputs are taken to fp32 here."""
    out = float_outputs(out)
    probs = torch.softmax(out.q_logits, dim=-1)
    proposed = thompson_from_uniforms(probs, z, u)
    active = step_count >= gates.warmup_steps
    result = gate(out, probs, z, proposed, book, row, tables, ctl.gate_threshold, active,
                  explore_slots, gates)
    return Acted(result.actions, result.gated, gate_threshold_values(ctl, active, gates))


def choose_actions(out: AgentOutput, z: torch.Tensor, state: TrainState, book: BookTensors,
                   row: torch.Tensor, cfg: StepConfig) -> Acted:
    """Training's acting policy (LearnerConfig.acting; the gates only after Thompson).
    ``out`` may be bf16 (``train.precision``): the act kernel takes it to fp32 itself, inside
    its compiled kernels, rather than six eager casts before them."""
    acting = cfg.learner.acting
    if acting == "thompson" and cfg.gates.enabled:
        u = categorical_uniforms(out.q_logits, state.acting_generator, dtype=_at_least_fp32(
            out.q_logits.dtype))
        return state.kernels.act(out, z, u, book, row, state.tables, state.controllers,
                                 state.step_count, exploration_slots(row.shape[0], cfg.gates),
                                 cfg.gates)
    out = float_outputs(out)
    if acting == "pi":
        proposed = pi_actions(out.pi_logits, state.acting_generator)
    elif acting == "greedy":
        proposed = greedy_actions(torch.softmax(out.q_logits, dim=-1), z)
    else:
        proposed = thompson_actions(torch.softmax(out.q_logits, dim=-1), z,
                                    state.acting_generator)
    return Acted(proposed, torch.zeros_like(proposed, dtype=torch.bool), {})


def collect_metrics(result: StepResult, action: torch.Tensor, gated: torch.Tensor,
                    position: torch.Tensor, reward: torch.Tensor
                    ) -> dict[str, torch.Tensor | float]:
    """This step's increments of the collect metric sums (MetricSums)."""
    closed = result.trade_closed
    return {"collect_steps": 1.0, "env_steps": float(action.shape[0]),
            "trades": closed.sum(), "wins": (closed & (result.reward > 0)).sum(),
            "net_pnl": result.reward.sum(), "hold_actions": (action == 0).sum(),
            "gated": gated.sum(), "abs_position": position.abs().to(torch.float64).mean(),
            "reward": reward.to(torch.float64).mean()}


class CollectUpdates(NamedTuple):
    """What one simulator step leaves to write (``collect_updates``): the transitions, the
    replay's write plan, and the new controller values and metric sums by name."""

    batch: Transitions
    replay: WritePlan
    controllers: dict[str, torch.Tensor]
    metrics: dict[str, torch.Tensor]


def collect_updates(obs: Observation, action: torch.Tensor, gated: torch.Tensor,
                    result: StepResult, after: SimState, ctl: ControllerState,
                    tables: StepTables, metrics: MetricSums, replay: PrioritizedReplay,
                    num_actions: int, cfg: StepConfig) -> CollectUpdates:
    """The bookkeeping of one simulator step, pure: the reward pipeline and the KL term,
    the transitions and where they go in replay (with the outcome labels of the trades that
    closed), the post-gate action-histogram controllers and the collect metrics.

    Args:
        obs: the step's ``observe``; action, gated: [B] the actions sent and the gated flags.
        result, after: the simulator step's result and the envs' state after it.
    """
    # Terminal only where the episode ended: a closed trade bootstraps into the flat state
    # after it. Were a close terminal, every per-step cost (the KL term on Hold) would make
    # ending a trade look cheaper than staying flat, and Q would learn to churn.
    done = result.episode_end
    # ---- reward pipeline: shaping -> scale -> clamp -> atom span (every training path
    # comes here), then the KL reference term beta * log pi_ref(a), stored with the reward
    shaping = (mark_shaping(obs.unrealized_pnl, after.unrealized_pnl, done, cfg.learner.gamma)
               if cfg.reward.mark_to_market else None)
    reward, values = reward_pipeline_values(result.reward, result.trade_closed, ctl, cfg.reward,
                                            shaping)
    reward = reward + ctl.kl_beta.to(reward.dtype) * tables.log_pi_ref[action]
    next_row, next_position, next_time_in_trade, next_unrealized = _snapshot(after)
    no = torch.zeros_like(done)
    batch = Transitions(row=obs.row, position=obs.position, time_in_trade=obs.time_in_trade,
                        unrealized_pnl=obs.unrealized_pnl, action=action, reward=reward,
                        done=done, trade_closed=result.trade_closed, next_row=next_row,
                        next_position=next_position, next_time_in_trade=next_time_in_trade,
                        next_unrealized_pnl=next_unrealized, outcome_valid=no, outcome_win=no)
    # (+ outcome labels of the trades that closed, at the transitions that opened them)
    plan = write_plan(replay.pointer, replay.size, replay.max_priority, batch,
                      result.reward > 0, replay.capacity, replay.cfg.alpha)
    # ---- controllers read the actions actually sent (post-gate)
    values |= action_histogram_values(ctl, action, num_actions, cfg.controller_ema_rate)
    sums = added(metrics, collect_metrics(result, action, gated, after.position, reward))
    return CollectUpdates(batch=batch, replay=plan, controllers=values, metrics=sums)


def collect(state: TrainState, book: BookTensors, cfg: StepConfig) -> Transitions:
    """Act in every env once, run the reward pipeline, write the transitions to replay."""
    batch, pending = collect_deferred(state, book, cfg)
    copy_values_(pending)
    return batch


def collect_deferred(state: TrainState, book: BookTensors, cfg: StepConfig
                     ) -> tuple[Transitions, list[tuple[torch.Tensor, torch.Tensor]]]:
    """``collect`` less its last write: the new controllers and metric sums come back as
    (destination, value) pairs for ``copy_values_``, so a learner running beside it reads
    the controllers as they were."""
    env, ctl, kernels = state.env, state.controllers, state.kernels
    # ---- observe: K-window at each cursor plus the agent's own state
    obs = kernels.observe(env.state, book, ctl, cfg)
    with torch.no_grad(), forward_precision(cfg.precision, obs.row.device):
        out = state.online(obs.window, obs.inputs)
    # ---- act: Thompson sample -> confidence gate -> FRD gate -> simulator
    acted = choose_actions(out, obs.z, state, book, obs.row, cfg)
    result = env.step(acted.actions, kernel=kernels.sim_step)
    # ---- rewards, replay write, controllers, metrics
    upd = kernels.collect_updates(obs, acted.actions, acted.gated, result, env.state, ctl,
                                  state.tables, state.metrics, state.replay,
                                  state.online.num_actions, cfg)
    state.replay.write_(upd.replay)
    state.step_count.add_(1)
    return upd.batch, (named_pairs(ctl, acted.controllers | upd.controllers)
                       + named_pairs(state.metrics, upd.metrics))


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


def first_rows(window: Window | FeatureRows, n: int) -> Window | FeatureRows:
    """The first n windows of ``window`` (views)."""
    if isinstance(window, FeatureRows):
        return window.first(n)
    return Window(**{f.name: getattr(window, f.name)[:n] for f in fields(window)})


def learner_inputs(t: Transitions, index: torch.Tensor, storage: Transitions,
                   pointer: torch.Tensor, book: BookTensors, ctl: ControllerState,
                   cfg: StepConfig) -> LearnerInputs:
    """The bootstrap (s' after one step, or s_m after an m-step return, m <= n: read from
    the replay storage and its ring ``pointer``) and every network input of a learning step
    from the sampled transitions ``t`` at storage ``index`` [B]."""
    lc = cfg.learner
    if lc.n_step > 1:
        nstep = n_step_values(storage.reward, storage.done, pointer, index, lc.n_step,
                              lc.gamma, cfg.num_envs)
        k = nstep.bootstrap_index
        boot_row, boot_pos, boot_tit, boot_pnl = (storage.next_row[k], storage.next_position[k],
                                                  storage.next_time_in_trade[k],
                                                  storage.next_unrealized_pnl[k])
        reward, done, gamma = nstep.ret, torch.zeros_like(t.done), nstep.discount
    else:
        boot_row, boot_pos, boot_tit, boot_pnl = (t.next_row, t.next_position,
                                                  t.next_time_in_trade, t.next_unrealized_pnl)
        reward, done, gamma = t.reward, t.done, lc.gamma
    s_inputs = _state_inputs(ctl, t.position, t.time_in_trade, t.unrealized_pnl, cfg)
    # the target net sees s and s' in one batched call
    window = book_window(book, torch.cat((t.row, boot_row)), cfg.window)
    inputs = torch.cat((s_inputs, _state_inputs(ctl, boot_pos, boot_tit, boot_pnl, cfg)))
    return LearnerInputs(z=support(ctl.v_min, ctl.v_max, cfg.network.num_atoms),
                         target_window=window, target_inputs=inputs,
                         online_window=first_rows(window, t.row.shape[0]),
                         online_inputs=s_inputs, reward=reward, done=done, gamma=gamma)


def sampled_inputs(state: TrainState, book: BookTensors, sample: Sample, cfg: StepConfig
                   ) -> LearnerInputs:
    """The networks' inputs and the bootstrap of a replay sample (``learner_inputs``), read
    from the replay and the controllers as they stand now."""
    return state.kernels.learner_inputs(sample.transitions, sample.index, state.replay.storage,
                                        state.replay.pointer, book, state.controllers, cfg)


def losses(state: TrainState, book: BookTensors, sample: Sample, cfg: StepConfig,
           li: LearnerInputs | None = None) -> Losses:
    """All losses of a replay sample (from its inputs ``li`` when given, else read now);
    each a batch mean, so the same batch repeated twice gives the same gradients (the
    original's encoder gradients grew with B)."""
    ctl, t = state.controllers, sample.transitions
    if li is None:
        li = sampled_inputs(state, book, sample, cfg)

    def target_side() -> tuple[torch.Tensor, torch.Tensor]:
        # ---- target net at s (pi's distillation target) and s' (C51 target), one call
        with torch.no_grad():
            with forward_precision(cfg.precision, li.z.device):
                target_q = state.target.q_logits(state.target.embed(li.target_window),
                                                 li.target_inputs)
            return state.kernels.c51_target(target_q, li.reward, li.done, li.gamma, li.z)

    def online_side() -> AgentOutput:
        # ---- online heads at s
        with forward_precision(cfg.precision, li.z.device):
            return state.online(li.online_window, li.online_inputs)

    # the two are independent: beside each other on state.branch (lobsurf.streams)
    (target_mean_s, target), out = run_beside(state.branch, target_side, online_side)
    return Losses(*state.kernels.loss_terms(out, target, target_mean_s, li.z, t,
                                            sample.weight, state.labels,
                                            state.tables.order_lots, ctl, cfg))


def c51_target(target_q: torch.Tensor, reward: torch.Tensor, done: torch.Tensor,
               gamma: float | torch.Tensor, z: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The target side of the learner from the target net's logits on s and s' stacked.

    Args:
        target_q: [2B, A, N] target logits (bf16 under autocast: taken to fp32 here, fused
            with the softmax), the B states s then the B bootstraps s'.
        reward, done, gamma: the bootstrap's return, terminal flag and discount
            (``project_categorical``).
        z: [N] support.

    Returns:
        (E[Q_target(s, .)] [B, A], the C51 projection of Z_target(s', argmax_a E[Q]) [B, N]).
    """
    b = target_q.shape[0] // 2
    target_q = target_q.to(_at_least_fp32(target_q.dtype))
    target_probs_all = torch.softmax(target_q, dim=-1)  # [2B, A, N]
    target_mean_s = expected_value(target_probs_all[:b], z)  # [B, A]
    next_probs = target_probs_all[b:]
    best = expected_value(next_probs, z).argmax(-1)  # [B]
    chosen = next_probs.gather(1, best[:, None, None].expand(-1, 1, next_probs.shape[-1]))
    return target_mean_s, project_categorical(chosen[:, 0], reward, done, gamma, z)


def loss_terms(out: AgentOutput, target: torch.Tensor, target_mean_s: torch.Tensor,
               z: torch.Tensor, t: Transitions, weight: torch.Tensor, labels: Labels,
               order_lots: torch.Tensor, ctl: ControllerState, cfg: StepConfig
               ) -> tuple[torch.Tensor, ...]:
    """Every loss from the online heads' outputs at s: the fields of ``Losses`` in order.
    The outputs are taken to fp32 here (under bf16 autocast the casts and their backward
    then compile into the losses' kernels instead of twelve eager copies). ``target``
    [B, N] and ``target_mean_s`` [B, A] come from ``c51_target``, ``weight`` [B] are the
    importance weights, ``labels`` the whole book's."""
    out = float_outputs(out)
    taken = out.q_logits.gather(1, t.action[:, None, None].expand(-1, 1, z.shape[0]))[:, 0]
    q_per_sample = categorical_cross_entropy(taken, target)  # [B]
    l_q = (weight * q_per_sample).mean()
    l_pi, policy_entropy = pi_loss(out.pi_logits, target_mean_s, ctl, cfg.policy)
    l_v, _advantage = value_loss(out.value, t.reward, t.trade_closed)
    lab = labels.rows(t.row)
    l_frd = frd_loss(out.frd_logits, lab.bucket, lab.bucket_valid)
    long_side = order_lots[t.action] > 0
    side = torch.stack((long_side, ~long_side), dim=1)  # [B, 2]: (long, short)
    outcome_mask = side & t.outcome_valid[:, None]
    l_aux = (cfg.aux.direction_weight
             * direction_loss(out.direction_logits, lab.direction, lab.direction_valid)
             + cfg.aux.outcome_weight * outcome_loss(
                 out.outcome_logits, t.outcome_win[:, None].expand(-1, 2).float(), outcome_mask))
    total = l_q + l_pi + cfg.policy.value_weight * l_v + cfg.aux.frd_weight * l_frd + l_aux
    q_mean = expected_value(torch.softmax(out.q_logits.detach(), -1), z)  # [B, A]
    return (total, l_q, q_per_sample, l_pi, l_v, l_frd, l_aux, policy_entropy,
            agreement(out.pi_logits, q_mean), q_mean.gather(1, t.action[:, None]).mean())


class LearnUpdates(NamedTuple):
    """What one learning step leaves to write (``learn_updates``): the sampled entries' new
    sampling weights [B] and the new max priority, the new controller values and metric sums
    by name."""

    priority_weight: torch.Tensor
    max_priority: torch.Tensor
    controllers: dict[str, torch.Tensor]
    metrics: dict[str, torch.Tensor]


def learn_updates(ls: Losses, grad_norm: torch.Tensor, ctl: ControllerState,
                  metrics: MetricSums, max_priority: torch.Tensor, num_actions: int,
                  cfg: StepConfig) -> LearnUpdates:
    """The bookkeeping of one learning step, pure: priorities from the per-sample C51 loss,
    the learner's controllers (per_beta, alpha, tau) and the learner metrics."""
    weight, new_max = priority_values(ls.q_per_sample, max_priority, cfg.replay)
    values = (per_beta_values(ctl, cfg.replay.beta_start, cfg.replay.beta_anneal_steps)
              | alpha_tau_values(ctl, num_actions, cfg.policy))
    sums = added(metrics, {
        "learn_steps": 1.0, "loss_q": ls.q, "loss_pi": ls.pi, "loss_value": ls.value,
        "loss_frd": ls.frd, "loss_aux": ls.aux, "policy_entropy": ls.policy_entropy,
        "agreement": ls.agreement, "grad_norm": grad_norm, "q_mean": ls.q_taken_mean})
    return LearnUpdates(priority_weight=weight, max_priority=new_max, controllers=values,
                        metrics=sums)


#: the norm clip_grad_norm_ clips (L2) and the epsilon it adds to the norm
_CLIP_NORM_TYPE, _CLIP_EPS = 2.0, 1e-6


def flat_clip_coefficient(grad: torch.Tensor, max_norm: float
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``clip_coefficient`` of a flat gradient buffer (lobsurf.agent.flat): its norm is the
    norm of the per-tensor norms (the gaps are zeros), in one reduction."""
    return clip_coefficient([torch.linalg.vector_norm(grad, _CLIP_NORM_TYPE)], max_norm)


def clip_coefficient(norms: list[torch.Tensor], max_norm: float
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(total gradient norm, the factor that clips it to ``max_norm``, at most 1, and the
    divisor that does the same, at least 1) from the per-tensor norms: the arithmetic of
    torch.nn.utils.clip_grad_norm_, pure. The divisor is for an optimizer that scales the
    gradients inside its own kernel (fused Adam's grad_scale divides)."""
    total = torch.linalg.vector_norm(torch.stack(norms), _CLIP_NORM_TYPE)
    return (total, torch.clamp(max_norm / (total + _CLIP_EPS), max=1.0),
            torch.clamp((total + _CLIP_EPS) / max_norm, min=1.0))


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
    noise: Callable[[torch.Tensor], torch.Tensor] = scaled_noise


class GradientSync(Protocol):
    """The collectives a step needs (lobsurf.train.distributed.Collective; None: one process)."""

    def grads_(self, params: list[torch.Tensor], flat: torch.Tensor | None = None) -> None: ...
    def controllers_(self, ctl: ControllerState) -> None: ...


def learn(state: TrainState, book: BookTensors, cfg: StepConfig,
          sync: GradientSync | None = None) -> Losses:
    """One update from a prioritized sample; returns the (detached) losses."""
    sample, li = draw_sample(state, book, cfg)
    ls, params = gradients(state, book, sample, cfg, li)
    return apply_gradients(state, sample, ls, params, cfg, sync)


def draw_sample(state: TrainState, book: BookTensors, cfg: StepConfig, reserved: int = 0
                ) -> tuple[Sample, LearnerInputs]:
    """The learner's prioritized sample and its networks' inputs, leaving out the
    ``reserved`` ring slots the next write fills (PrioritizedReplay.sample)."""
    sample = state.replay.sample(cfg.batch_size, state.controllers.per_beta,
                                 kernel=state.kernels.sample, reserved=reserved)
    return sample, sampled_inputs(state, book, sample, cfg)


def learn_from(state: TrainState, book: BookTensors, sample: Sample, cfg: StepConfig,
               sync: GradientSync | None = None) -> Losses:
    """The update of ``learn`` from a given sample; with ``sync`` the gradients are averaged
    over the ranks before clipping (data parallel: the same update on every rank)."""
    ls, params = gradients(state, book, sample, cfg)
    return apply_gradients(state, sample, ls, params, cfg, sync)


def gradients(state: TrainState, book: BookTensors, sample: Sample, cfg: StepConfig,
              li: LearnerInputs | None = None) -> tuple[Losses, list[torch.Tensor]]:
    """The first half of a learning step: every loss of the sample and its gradients in
    the online parameters' .grad (returns the losses and the parameters that have one).
    It writes nothing but the gradients."""
    ls = losses(state, book, sample, cfg, li)
    opt = state.optimizer
    if opt.flat is not None:
        return ls, flat_gradients_(ls.total, opt.params, opt.flat)
    opt.zero_grad()
    return ls, accumulate_gradients_(ls.total, opt.params)


def apply_gradients(state: TrainState, sample: Sample, ls: Losses, params: list[torch.Tensor],
                    cfg: StepConfig, sync: GradientSync | None = None) -> Losses:
    """The second half: (rank average,) clip, then Adam and Polyak beside the priorities and
    the learner's controllers and metrics."""
    ctl, lc = state.controllers, cfg.learner
    flat = state.optimizer.flat
    if sync is not None:
        sync.grads_(params, None if flat is None else flat.grad)
    # max_norm inf: measure the norm without clipping (clip disabled)
    max_norm = lc.grad_clip_norm if lc.grad_clip_norm > 0 else float("inf")
    if flat is not None:
        # the flat update divides by the clip's divisor in its own pass
        grad_norm, _, divisor = state.kernels.flat_clip_coefficient(flat.grad, max_norm)
    else:
        # the fused Adam divides by the clip's divisor in its kernel (grad_scale)
        grad_norm, divisor = clip_gradients_(params, max_norm, state.kernels.clip_coefficient,
                                             defer=state.optimizer.fused)

    @torch.no_grad()
    def bookkeeping() -> None:
        # ---- priorities, controllers of the learner (per_beta, alpha, tau), metrics
        upd = state.kernels.learn_updates(ls, grad_norm, ctl, state.metrics,
                                          state.replay.max_priority, state.online.num_actions,
                                          cfg)
        state.replay.write_priorities_(sample.index, upd.priority_weight)
        copy_values_(named_pairs(ctl, upd.controllers) + named_pairs(state.metrics, upd.metrics)
                     + [(state.replay.max_priority, upd.max_priority)])

    def update() -> None:
        if flat is not None:
            # Adam, and Polyak with a flat target, in one pass over the flat buffers
            polyak = None if state.flat_target is None else (state.flat_target, lc.polyak_tau)
            state.optimizer.step_flat(state.kernels.flat_adam, divisor, polyak=polyak)
            if polyak is not None:
                return
        else:
            state.optimizer.step(state.kernels.adam_scalars, grad_divisor=divisor)
        # ---- Polyak: target <- (1 - tau) target + tau online, in place
        with torch.no_grad():
            torch._foreach_lerp_(list(state.target.parameters()),
                                 list(state.online.parameters()), lc.polyak_tau)

    # the bookkeeping reads the losses and the norm only, Adam and Polyak the parameters:
    # beside each other on state.branch
    run_beside(state.branch, bookkeeping, update)
    return ls


def clip_gradients_(params: list[torch.Tensor], max_norm: float,
                    coefficient: Callable[..., tuple[torch.Tensor, ...]] = clip_coefficient,
                    defer: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)`` with its scalar
    arithmetic in ``coefficient`` (``clip_coefficient`` or a compiled copy: one kernel for
    five); the same numbers for gradients of one device and dtype, which the step's are
    (else the torch function runs).

    Returns (the total norm before clipping, None); with ``defer`` the gradients are left
    as they are and the second value is the divisor that clips them, for an optimizer that
    divides in its own kernel (the fused Adam: one multi-tensor pass fewer per step).
    """
    grads = [p.grad for p in params]
    if not grads or len({(g.device, g.dtype) for g in grads}) > 1:
        return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True), None
    with torch.no_grad():
        total, coef, divisor = coefficient(torch._foreach_norm(grads, _CLIP_NORM_TYPE),
                                           max_norm)
        if defer:
            return total, divisor
        torch._foreach_mul_(grads, coef)
    return total, None


def flat_gradients_(loss: torch.Tensor, params: list[torch.Tensor], flat: FlatParameters
                    ) -> list[torch.Tensor]:
    """The gradients of ``loss`` written into ``flat``'s gradient buffer, all at once (one
    concatenation; a parameter the loss does not reach gets a zero gradient, which leaves
    it, with its zero Adam moments, where it is); returns ``params``."""
    flat.write_gradients_(torch.autograd.grad(loss, params, allow_unused=True))
    return params


def accumulate_gradients_(loss: torch.Tensor, params: list[torch.Tensor]) -> list[torch.Tensor]:
    """``loss.backward()`` into ``params``' gradients, with one multi-tensor add where
    backward's AccumulateGrad launches a kernel per parameter; returns the parameters that
    have a gradient. Each .grad += g exactly as backward adds it; a first gradient is kept
    as it comes (backward's steal), in the parameter's layout."""
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    into, add = [], []
    for p, g in zip(params, grads):
        if g is None:
            continue
        if p.grad is None:
            p.grad = g if g.stride() == p.stride() else torch.empty_like(p).copy_(g)
        else:
            into.append(p.grad)
            add.append(g)
    if into:
        torch._foreach_add_(into, add)
    return [p for p in params if p.grad is not None]


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
    without one: the learner's half first). The noise is resampled beside the draw.

    The learner's half reads the replay sample it gathered first (never one of the slots
    this collect overwrites), the networks' parameters and the controllers as they were
    before collect; collect reads the parameters and writes the simulator, the replay and
    (deferred to the join) the controllers and metric sums; neither writes what the other
    reads. After the join: clip, Adam, priorities, the learner's controllers, Polyak.
    """
    # the noise draws touch nothing the sample reads: beside it on state.branch
    _, (sample, li) = run_beside(state.branch, lambda: fresh_noise_(state),
                                 lambda: draw_sample(state, book, cfg, reserved=cfg.num_envs))
    (ls, params), (_, pending) = run_beside(
        state.learner_branch, lambda: gradients(state, book, sample, cfg, li),
        lambda: collect_deferred(state, book, cfg))
    copy_values_(pending)
    if sync is not None:
        sync.controllers_(state.controllers)
    apply_gradients(state, sample, ls, params, cfg, sync)
