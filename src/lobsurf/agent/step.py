"""One training step: ``collect`` (act in the simulator, reward pipeline, replay write) and
``learn`` (replay sample, C51 loss, backward, Adam, Polyak, priorities), over named state.

Read top to bottom, a step is:
    resample noise -> gather the K-windows at the envs' cursors -> features -> encoder -> Q
    -> act (Thompson / greedy) -> simulator step -> reward pipeline -> replay write
    -> controllers (action histogram) -> metrics
    -> [learn] replay sample -> gather windows at s and s' -> target distribution of
    argmax_a E[Q_target(s', a)] -> C51 projection -> online Q(s, a) -> cross-entropy x IS
    weights (batch mean) -> backward -> clip -> Adam -> priorities -> Polyak -> per_beta

Capture-ready: static shapes, buffers updated in place, no ``.item()``/``.cpu()``/
``.tolist()`` and no Python branch on a device value (tests patch those to raise). The only
Python branch is ``learn`` or not, on the host step counter.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lobsurf.agent.acting import greedy_actions, thompson_actions
from lobsurf.agent.config import LearnerConfig, NetworkConfig, ReplayConfig, RewardConfig
from lobsurf.agent.controllers import ControllerState, action_histogram_update, anneal_per_beta
from lobsurf.agent.distributional import (categorical_cross_entropy, expected_value,
                                          project_categorical, support)
from lobsurf.agent.metrics import MetricSums
from lobsurf.agent.network import AgentNetwork, agent_state_features
from lobsurf.agent.optim import TensorAdam
from lobsurf.agent.replay import PrioritizedReplay, Sample, Transitions
from lobsurf.agent.reward import reward_pipeline
from lobsurf.data.dataset import BookTensors, gather_window
from lobsurf.sim.env import BatchedLobEnv


@dataclass(frozen=True)
class StepConfig:
    """The static settings one step reads (parts of the RunConfig)."""

    network: NetworkConfig
    replay: ReplayConfig
    learner: LearnerConfig
    reward: RewardConfig
    window: int
    position_limit: int
    batch_size: int
    """Transitions per learning step (LearnerConfig.batch_size resolved against B)."""
    controller_ema_rate: float
    """EMA rate of the action-histogram controllers (entropy, hold fraction)."""


@dataclass
class TrainState:
    """Everything a step reads and writes (checkpointed whole by lobsurf.train.checkpoint)."""

    online: AgentNetwork
    target: AgentNetwork
    optimizer: TensorAdam
    controllers: ControllerState
    replay: PrioritizedReplay
    env: BatchedLobEnv
    noise_generator: torch.Generator
    acting_generator: torch.Generator
    metrics: MetricSums


def _state_inputs(state: TrainState, position: torch.Tensor, time_in_trade: torch.Tensor,
                  unrealized_pnl: torch.Tensor, cfg: StepConfig) -> torch.Tensor:
    return agent_state_features(position, time_in_trade, unrealized_pnl,
                                state.controllers.reward_scale, cfg.position_limit, cfg.network)


def collect(state: TrainState, book: BookTensors, cfg: StepConfig) -> Transitions:
    """Act in every env once, run the reward pipeline, write the transitions to replay."""
    env, s, ctl = state.env, state.env.state, state.controllers
    # ---- observe: K-window at each cursor plus the agent's own state
    row = s.cursor.clone()
    position, time_in_trade = s.position.clone(), s.time_in_trade.clone()
    unrealized = s.unrealized_pnl.clone()
    z = support(ctl.v_min, ctl.v_max, cfg.network.num_atoms)
    with torch.no_grad():
        logits = state.online(gather_window(book, row, cfg.window),
                              _state_inputs(state, position, time_in_trade, unrealized, cfg))
        probs = torch.softmax(logits, dim=-1)
    # ---- act
    if cfg.learner.acting == "thompson":
        action = thompson_actions(probs, z, state.acting_generator)
    else:
        action = greedy_actions(probs, z)
    result = env.step(action)
    # ---- reward pipeline: scale -> clamp -> atom span (every training path comes here)
    reward = reward_pipeline(result.reward, result.trade_closed, ctl, cfg.reward)
    done = result.trade_closed | result.episode_end
    batch = Transitions(row=row, position=position, time_in_trade=time_in_trade,
                        unrealized_pnl=unrealized, action=action, reward=reward, done=done,
                        next_row=s.cursor.clone(), next_position=s.position.clone(),
                        next_time_in_trade=s.time_in_trade.clone(),
                        next_unrealized_pnl=s.unrealized_pnl.clone())
    state.replay.add(batch)
    action_histogram_update(ctl, action, state.online.num_actions, cfg.controller_ema_rate)
    # ---- metrics (device sums)
    m = state.metrics
    m.collect_steps.add_(1.0)
    m.env_steps.add_(float(action.shape[0]))
    m.trades.add_(result.trade_closed.sum())
    m.wins.add_((result.trade_closed & (result.reward > 0)).sum())
    m.net_pnl.add_(result.reward.sum())
    m.hold_actions.add_((action == 0).sum())
    m.abs_position.add_(s.position.abs().to(torch.float64).mean())
    m.reward.add_(reward.to(torch.float64).mean())
    return batch


@dataclass
class QLoss:
    """The C51 loss of one sample: loss (0-d batch mean), per_sample [B], taken logits [B, N]."""

    loss: torch.Tensor
    per_sample: torch.Tensor
    taken: torch.Tensor
    z: torch.Tensor


def q_loss(state: TrainState, book: BookTensors, sample: Sample, cfg: StepConfig) -> QLoss:
    """Importance-weighted C51 cross-entropy of a replay sample (a batch mean, so the same
    batch repeated twice gives the same gradients)."""
    ctl, lc, t = state.controllers, cfg.learner, sample.transitions
    z = support(ctl.v_min, ctl.v_max, cfg.network.num_atoms)
    # ---- target: distribution of the target net's greedy action at s', projected
    with torch.no_grad():
        next_logits = state.target(
            gather_window(book, t.next_row, cfg.window),
            _state_inputs(state, t.next_position, t.next_time_in_trade, t.next_unrealized_pnl,
                          cfg))
        next_probs = torch.softmax(next_logits, dim=-1)  # [B, A, N]
        best = expected_value(next_probs, z).argmax(-1)  # [B]
        chosen = next_probs.gather(1, best[:, None, None].expand(-1, 1, next_probs.shape[-1]))
        target_probs = project_categorical(chosen[:, 0], t.reward, t.done, lc.gamma, z)
    # ---- online: cross-entropy of Q(s, a), importance-weighted batch mean
    logits = state.online(gather_window(book, t.row, cfg.window),
                          _state_inputs(state, t.position, t.time_in_trade, t.unrealized_pnl, cfg))
    taken = logits.gather(1, t.action[:, None, None].expand(-1, 1, logits.shape[-1]))[:, 0]
    per_sample = categorical_cross_entropy(taken, target_probs)  # [B]
    return QLoss(loss=(sample.weight * per_sample).mean(), per_sample=per_sample, taken=taken, z=z)


def learn(state: TrainState, book: BookTensors, cfg: StepConfig) -> torch.Tensor:
    """One C51 update from a prioritized sample; returns the 0-d batch-mean loss."""
    ctl, lc = state.controllers, cfg.learner
    sample = state.replay.sample(cfg.batch_size, ctl.per_beta)
    q = q_loss(state, book, sample, cfg)
    loss, per_sample, taken, z = q.loss, q.per_sample, q.taken, q.z
    state.optimizer.zero_grad()
    loss.backward()
    params = [p for p in state.online.parameters() if p.grad is not None]
    # max_norm inf: measure the norm without clipping (clip disabled)
    max_norm = lc.grad_clip_norm if lc.grad_clip_norm > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
    state.optimizer.step()
    state.replay.update_priorities(sample.index, per_sample)
    # ---- Polyak: target <- (1 - tau) target + tau online, in place
    with torch.no_grad():
        online_p = list(state.online.parameters())
        torch._foreach_lerp_(list(state.target.parameters()), online_p, lc.polyak_tau)
    anneal_per_beta(ctl, cfg.replay.beta_start, cfg.replay.beta_anneal_steps)
    # ---- metrics
    m = state.metrics
    m.learn_steps.add_(1.0)
    m.q_loss.add_(loss.detach())
    m.grad_norm.add_(grad_norm.detach())
    m.q_mean.add_(expected_value(torch.softmax(taken.detach(), -1), z).mean())
    return loss.detach()


def train_step(state: TrainState, book: BookTensors, cfg: StepConfig, learning: bool) -> None:
    """Resample the noise, collect one step, and learn when ``learning`` (host flag)."""
    state.online.resample_noise_(state.noise_generator)
    state.target.resample_noise_(state.noise_generator)
    collect(state, book, cfg)
    if learning:
        learn(state, book, cfg)
