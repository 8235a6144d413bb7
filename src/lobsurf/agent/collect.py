"""The collect half of a training step: observe the envs, act (Thompson sample of Q, the
confidence and FRD gates), step the simulator, run the reward pipeline and write the
transitions to replay, with the controllers the actions move and the collect metrics.

    K-windows at the envs' cursors -> features -> encoder -> heads -> Thompson sample of Q
    -> confidence gate -> FRD gate -> simulator step -> reward pipeline (mark-to-market
    shaping -> scale -> clamp -> atom span) -> + beta log pi_ref(a) -> replay write
    (+ outcome labels of the trades that closed; terminal only at episode ends)
    -> controllers (post-gate action histogram, gate threshold) -> metrics

The arithmetic between the network call and the writes is in pure functions (``observe``,
``thompson_gate``, ``collect_updates``) that ``lobsurf.agent.step.StepKernels`` holds and
``train.compile`` fuses; ``collect`` does the writes. ``lobsurf.agent.step`` puts it
together with the learner (``lobsurf.agent.learn``).
"""

from __future__ import annotations


import torch

from lobsurf.agent.acting import (categorical_uniforms, greedy_actions, pi_actions,
                                  thompson_actions, thompson_from_uniforms)
from lobsurf.agent.config import GateConfig
from lobsurf.agent.controllers import ControllerState, action_histogram_values
from lobsurf.agent.distributional import support
from lobsurf.agent.gates import (GateResult, apply_gates, exploration_slots,
                                 gate_threshold_values, move_probabilities, profit_confidence)
from lobsurf.agent.metrics import MetricSums, added
from lobsurf.agent.network import AgentOutput, agent_state_features
from lobsurf.agent.replay import PrioritizedReplay, write_plan
from lobsurf.agent.reward import mark_shaping, reward_pipeline_values
from lobsurf.agent.state import (Acted, CollectUpdates, Observation, StepConfig, StepTables,
                                 TrainState)
from lobsurf.agent.transitions import Transitions
from lobsurf.data.dataset import BookTensors
from lobsurf.models.feature_table import book_window
from lobsurf.models.precision import at_least_fp32, float_outputs, forward_precision
from lobsurf.sim.state import SimState, StepResult
from lobsurf.writeback import copy_values_, named_pairs



def state_inputs(ctl: ControllerState, position: torch.Tensor, time_in_trade: torch.Tensor,
                 unrealized_pnl: torch.Tensor, cfg: StepConfig) -> torch.Tensor:
    """The agent-state inputs [B, 3] of the networks (position, time in trade, unrealized
    PnL, scaled: lobsurf.agent.network.agent_state_features)."""
    return agent_state_features(position, time_in_trade, unrealized_pnl, ctl.pnl_magnitude,
                                cfg.position_unit, cfg.network)


def _snapshot(s: SimState) -> tuple[torch.Tensor, ...]:
    """Copies of the envs' (cursor, position, time in trade, unrealized PnL): the simulator
    step overwrites the state. The int64 three are copied as one stack (one kernel)."""
    cursor, position, time_in_trade = torch.stack((s.cursor, s.position, s.time_in_trade))
    return cursor, position, time_in_trade, s.unrealized_pnl.clone()


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


def observe(s: SimState, book: BookTensors, ctl: ControllerState, cfg: StepConfig
            ) -> Observation:
    """The K-window at each cursor plus the agent's own state (the acting network's input)."""
    row, position, time_in_trade, unrealized = _snapshot(s)
    return Observation(row=row, position=position, time_in_trade=time_in_trade,
                       unrealized_pnl=unrealized,
                       z=support(ctl.v_min, ctl.v_max, cfg.network.num_atoms),
                       window=book_window(book, row, cfg.window),
                       inputs=state_inputs(ctl, position, time_in_trade, unrealized, cfg))


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
        u = categorical_uniforms(out.q_logits, state.acting_generator, dtype=at_least_fp32(
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
    values |= action_histogram_values(ctl, action, num_actions, cfg.policy.action_ema_rate)
    sums = added(metrics, collect_metrics(result, action, gated, after.position, reward))
    return CollectUpdates(batch=batch, replay=plan, controllers=values, metrics=sums)


def collect(state: TrainState, book: BookTensors, cfg: StepConfig) -> Transitions:
    """Act in every env once, run the reward pipeline, write the transitions to replay (a
    draw made ahead for the next sample is stale after it: discarded)."""
    state.replay.discard_ahead()
    batch, pending = collect_deferred(state, book, cfg)
    copy_values_(pending)
    return batch


def collect_deferred(state: TrainState, book: BookTensors, cfg: StepConfig,
                     before_write: torch.cuda.Event | None = None
                     ) -> tuple[Transitions, list[tuple[torch.Tensor, torch.Tensor]]]:
    """``collect`` less its last write: the new controllers and metric sums come back as
    (destination, value) pairs for ``copy_values_``, so a learner running beside it reads
    the controllers as they were. ``before_write``: an event the replay write waits for
    (a learner's draw on another stream, which reads the slots and labels it writes)."""
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
    if before_write is not None:
        before_write.wait()
    state.replay.write_(upd.replay)
    state.step_count.add_(1)
    return upd.batch, (named_pairs(ctl, acted.controllers | upd.controllers)
                       + named_pairs(state.metrics, upd.metrics))
