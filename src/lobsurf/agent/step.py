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
    greedy action at s' -> online heads at s -> C51 CE x IS weights + pi distillation/entropy
    + V + FRD + direction + outcome (all batch means) -> backward -> clip -> Adam ->
    priorities -> Polyak -> per_beta, alpha, tau

Capture-ready: static shapes, buffers updated in place, no ``.item()``/``.cpu()``/
``.tolist()`` and no Python branch on a device value (tests patch those to raise): the gate
warm-up compares a device step counter. The only Python branches are on static config and on
``learning`` (a host flag of the loop).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from lobsurf.agent.acting import greedy_actions, pi_actions, thompson_actions
from lobsurf.agent.config import (AuxConfig, GateConfig, LearnerConfig, NetworkConfig,
                                  PolicyConfig, ReplayConfig, RewardConfig)
from lobsurf.agent.controllers import ControllerState, action_histogram_update, anneal_per_beta
from lobsurf.agent.distributional import (categorical_cross_entropy, expected_value,
                                          project_categorical, support)
from lobsurf.agent.gates import (GateResult, apply_gates, exploration_slots,
                                 move_probabilities, profit_confidence, update_gate_threshold)
from lobsurf.agent.metrics import MetricSums
from lobsurf.agent.network import AgentNetwork, AgentOutput, agent_state_features
from lobsurf.agent.optim import TensorAdam
from lobsurf.agent.policy import agreement, pi_loss, update_alpha_tau, value_loss
from lobsurf.agent.replay import PrioritizedReplay, Sample, Transitions
from lobsurf.agent.reward import mark_shaping, reward_pipeline
from lobsurf.data.dataset import BookTensors, gather_window
from lobsurf.data.labels import Labels
from lobsurf.models.heads import direction_loss, frd_loss, outcome_loss
from lobsurf.models.precision import float_outputs, forward_precision
from lobsurf.sim.env import BatchedLobEnv


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


def _state_inputs(state: TrainState, position: torch.Tensor, time_in_trade: torch.Tensor,
                  unrealized_pnl: torch.Tensor, cfg: StepConfig) -> torch.Tensor:
    return agent_state_features(position, time_in_trade, unrealized_pnl,
                                state.controllers.pnl_magnitude, cfg.position_unit, cfg.network)


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


def choose_actions(out: AgentOutput, z: torch.Tensor, state: TrainState, book: BookTensors,
                   row: torch.Tensor, cfg: StepConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Training's acting policy: [B] actions and [B] gated flags (False when no gate ran)."""
    probs = torch.softmax(out.q_logits, dim=-1)
    acting = cfg.learner.acting
    if acting == "greedy":
        proposed = greedy_actions(probs, z)
    elif acting == "pi":
        proposed = pi_actions(out.pi_logits, state.acting_generator)
    else:
        proposed = thompson_actions(probs, z, state.acting_generator)
    if acting != "thompson" or not cfg.gates.enabled:
        return proposed, torch.zeros_like(proposed, dtype=torch.bool)
    active = state.step_count >= cfg.gates.warmup_steps
    result = state.kernels.gate(out, probs, z, proposed, book, row, state.tables,
                                state.controllers.gate_threshold, active,
                                exploration_slots(row.shape[0], cfg.gates), cfg.gates)
    update_gate_threshold(state.controllers, active, cfg.gates)
    return result.actions, result.gated


def collect(state: TrainState, book: BookTensors, cfg: StepConfig) -> Transitions:
    """Act in every env once, run the reward pipeline, write the transitions to replay."""
    env, s, ctl = state.env, state.env.state, state.controllers
    # ---- observe: K-window at each cursor plus the agent's own state
    row = s.cursor.clone()
    position, time_in_trade = s.position.clone(), s.time_in_trade.clone()
    unrealized = s.unrealized_pnl.clone()
    z = support(ctl.v_min, ctl.v_max, cfg.network.num_atoms)
    with torch.no_grad(), forward_precision(cfg.precision, row.device):
        out = state.online(gather_window(book, row, cfg.window),
                           _state_inputs(state, position, time_in_trade, unrealized, cfg))
    out = float_outputs(out)
    # ---- act: Thompson sample -> confidence gate -> FRD gate
    action, gated = choose_actions(out, z, state, book, row, cfg)
    result = env.step(action)
    # Terminal only where the episode ended: a closed trade bootstraps into the flat state
    # after it. Were a close terminal, every per-step cost (the KL term on Hold) would make
    # ending a trade look cheaper than staying flat, and Q would learn to churn.
    done = result.episode_end
    # ---- reward pipeline: shaping -> scale -> clamp -> atom span (every training path
    # comes here), then the KL reference term beta * log pi_ref(a), stored with the reward
    shaping = (mark_shaping(unrealized, s.unrealized_pnl, done, cfg.learner.gamma)
               if cfg.reward.mark_to_market else None)
    reward = reward_pipeline(result.reward, result.trade_closed, ctl, cfg.reward, shaping)
    reward = reward + ctl.kl_beta.to(reward.dtype) * state.tables.log_pi_ref[action]
    no = torch.zeros_like(done)
    batch = Transitions(row=row, position=position, time_in_trade=time_in_trade,
                        unrealized_pnl=unrealized, action=action, reward=reward, done=done,
                        trade_closed=result.trade_closed,
                        next_row=s.cursor.clone(), next_position=s.position.clone(),
                        next_time_in_trade=s.time_in_trade.clone(),
                        next_unrealized_pnl=s.unrealized_pnl.clone(),
                        outcome_valid=no, outcome_win=no)
    pointer_before = state.replay.pointer.clone()
    state.replay.add(batch)
    state.replay.record_outcomes(pointer_before, time_in_trade, result.trade_closed,
                                 result.reward > 0)
    # ---- controllers read the actions actually sent (post-gate)
    action_histogram_update(ctl, action, state.online.num_actions, cfg.controller_ema_rate)
    state.step_count.add_(1)
    # ---- metrics (device sums)
    m = state.metrics
    m.collect_steps.add_(1.0)
    m.env_steps.add_(float(action.shape[0]))
    m.trades.add_(result.trade_closed.sum())
    m.wins.add_((result.trade_closed & (result.reward > 0)).sum())
    m.net_pnl.add_(result.reward.sum())
    m.hold_actions.add_((action == 0).sum())
    m.gated.add_(gated.sum())
    m.abs_position.add_(s.position.abs().to(torch.float64).mean())
    m.reward.add_(reward.to(torch.float64).mean())
    return batch


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


def losses(state: TrainState, book: BookTensors, sample: Sample, cfg: StepConfig) -> Losses:
    """All losses of a replay sample; each a batch mean, so the same batch repeated twice
    gives the same gradients (the original's encoder gradients grew with B)."""
    ctl, lc, t = state.controllers, cfg.learner, sample.transitions
    z = support(ctl.v_min, ctl.v_max, cfg.network.num_atoms)
    # ---- the bootstrap: s' after one step, or s_m after an m-step return (m <= n)
    if lc.n_step > 1:
        nstep = state.replay.n_step_targets(sample.index, lc.n_step, lc.gamma, cfg.num_envs)
        st, k = state.replay.storage, nstep.bootstrap_index
        boot_row, boot_pos, boot_tit, boot_pnl = (st.next_row[k], st.next_position[k],
                                                  st.next_time_in_trade[k],
                                                  st.next_unrealized_pnl[k])
        target_reward, target_done, target_gamma = nstep.ret, torch.zeros_like(t.done), nstep.discount
    else:
        boot_row, boot_pos, boot_tit, boot_pnl = (t.next_row, t.next_position,
                                                  t.next_time_in_trade, t.next_unrealized_pnl)
        target_reward, target_done, target_gamma = t.reward, t.done, lc.gamma
    s_inputs = _state_inputs(state, t.position, t.time_in_trade, t.unrealized_pnl, cfg)
    # ---- target net at s (pi's distillation target) and s' (C51 target), one batched call
    with torch.no_grad():
        rows = torch.cat((t.row, boot_row))
        inputs = torch.cat((s_inputs, _state_inputs(state, boot_pos, boot_tit, boot_pnl, cfg)))
        with forward_precision(cfg.precision, rows.device):
            target_q = state.target.q_logits(state.target.embed(gather_window(
                book, rows, cfg.window)), inputs).float()
        target_mean_s, target = state.kernels.c51_target(target_q, target_reward, target_done,
                                                         target_gamma, z)
    # ---- online heads at s
    with forward_precision(cfg.precision, t.row.device):
        out = state.online(gather_window(book, t.row, cfg.window), s_inputs)
    return Losses(*state.kernels.loss_terms(float_outputs(out), target, target_mean_s, z, t,
                                            sample.weight, state.labels,
                                            state.tables.order_lots, ctl, cfg))


def c51_target(target_q: torch.Tensor, reward: torch.Tensor, done: torch.Tensor,
               gamma: float | torch.Tensor, z: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The target side of the learner from the target net's logits on s and s' stacked.

    Args:
        target_q: [2B, A, N] float32 target logits, the B states s then the B bootstraps s'.
        reward, done, gamma: the bootstrap's return, terminal flag and discount
            (``project_categorical``).
        z: [N] support.

    Returns:
        (E[Q_target(s, .)] [B, A], the C51 projection of Z_target(s', argmax_a E[Q]) [B, N]).
    """
    b = target_q.shape[0] // 2
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
    """Every loss from the online heads' (fp32) outputs at s: the fields of ``Losses`` in
    order. ``target`` [B, N] and ``target_mean_s`` [B, A] come from ``c51_target``,
    ``weight`` [B] are the importance weights, ``labels`` the whole book's."""
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


@dataclass
class StepKernels:
    """The pure tensor functions the step calls through ``TrainState.kernels``: this
    module's eager functions by default (the reference and the CPU path);
    ``lobsurf.train.compile`` replaces them with compiled versions of the same functions."""

    gate: Callable[..., GateResult] = gate
    c51_target: Callable[..., tuple[torch.Tensor, torch.Tensor]] = c51_target
    loss_terms: Callable[..., tuple[torch.Tensor, ...]] = loss_terms


class GradientSync(Protocol):
    """The collectives a step needs (lobsurf.train.distributed.Collective; None: one process)."""

    def grads_(self, params: list[torch.Tensor]) -> None: ...
    def controllers_(self, ctl: ControllerState) -> None: ...


def learn(state: TrainState, book: BookTensors, cfg: StepConfig,
          sync: GradientSync | None = None) -> Losses:
    """One update from a prioritized sample; returns the (detached) losses."""
    sample = state.replay.sample(cfg.batch_size, state.controllers.per_beta)
    return learn_from(state, book, sample, cfg, sync)


def learn_from(state: TrainState, book: BookTensors, sample: Sample, cfg: StepConfig,
               sync: GradientSync | None = None) -> Losses:
    """The update of ``learn`` from a given sample; with ``sync`` the gradients are averaged
    over the ranks before clipping (data parallel: the same update on every rank)."""
    ctl, lc = state.controllers, cfg.learner
    ls = losses(state, book, sample, cfg)
    state.optimizer.zero_grad()
    ls.total.backward()
    params = [p for p in state.online.parameters() if p.grad is not None]
    if sync is not None:
        sync.grads_(params)
    # max_norm inf: measure the norm without clipping (clip disabled)
    max_norm = lc.grad_clip_norm if lc.grad_clip_norm > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
    state.optimizer.step()
    state.replay.update_priorities(sample.index, ls.q_per_sample)
    # ---- Polyak: target <- (1 - tau) target + tau online, in place
    with torch.no_grad():
        torch._foreach_lerp_(list(state.target.parameters()), list(state.online.parameters()),
                             lc.polyak_tau)
    # ---- controllers of the learner
    anneal_per_beta(ctl, cfg.replay.beta_start, cfg.replay.beta_anneal_steps)
    update_alpha_tau(ctl, state.online.num_actions, cfg.policy)
    # ---- metrics
    m = state.metrics
    m.learn_steps.add_(1.0)
    m.loss_q.add_(ls.q.detach())
    m.loss_pi.add_(ls.pi.detach())
    m.loss_value.add_(ls.value.detach())
    m.loss_frd.add_(ls.frd.detach())
    m.loss_aux.add_(ls.aux.detach())
    m.policy_entropy.add_(ls.policy_entropy)
    m.agreement.add_(ls.agreement)
    m.grad_norm.add_(grad_norm.detach())
    m.q_mean.add_(ls.q_taken_mean)
    return ls


def train_step(state: TrainState, book: BookTensors, cfg: StepConfig, learning: bool,
               sync: GradientSync | None = None) -> None:
    """Resample the noise, collect one step, and learn when ``learning`` (host flag).

    With ``sync`` (several processes) the controllers are averaged over the ranks right
    after ``collect``, the only place they move on local data, so ``learn`` and its
    controller updates read the same values on every rank; then the gradients are averaged.
    """
    state.online.resample_noise_(state.noise_generator)
    state.target.resample_noise_(state.noise_generator)
    collect(state, book, cfg)
    if sync is not None:
        sync.controllers_(state.controllers)
    if learning:
        learn(state, book, cfg, sync)
