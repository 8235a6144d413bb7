"""The learning half of a training step: a prioritized replay sample, every loss, the
backward, the gradient clip, Adam and Polyak, the new priorities and the learner's
controllers and metrics.

    replay sample -> target net on s and s' -> C51 projection of the target's greedy
    action at s' -> online heads at s (on CUDA beside the target side, on a second stream)
    -> C51 CE x IS weights + pi distillation/entropy + V + FRD + direction + outcome (all
    batch means) -> backward (the new priorities beside it) -> clip -> Adam -> Polyak
    -> max priority, per_beta, alpha, tau

``learn`` is one update; ``gradients`` and ``apply_gradients`` are its two halves, so that
``lobsurf.agent.step.learn_beside_collect`` can run the first beside the collect
(``lobsurf.agent.collect``). The arithmetic is in pure functions (``learner_inputs``,
``c51_target``, ``loss_terms``, ``flat_clip_coefficient``, ``learn_updates``,
``priority_weight``) that ``lobsurf.agent.state.StepKernels`` holds and ``train.compile``
fuses. ``lobsurf.agent.reference`` is the same update written plainly.
"""

from __future__ import annotations

from dataclasses import fields

import torch

from lobsurf.agent.collect import state_inputs
from lobsurf.agent.controllers import ControllerState, per_beta_values
from lobsurf.agent.distributional import (categorical_cross_entropy, expected_value,
                                          project_categorical, support)
from lobsurf.agent.flat import FlatParameters
from lobsurf.agent.metrics import MetricSums, added
from lobsurf.agent.network import AgentOutput
from lobsurf.agent.policy import agreement, alpha_tau_values, pi_loss, value_loss
from lobsurf.agent.replay import Sample, n_step_values, priority_values
from lobsurf.agent.state import (GradientSync, LearnerInputs, LearnUpdates, Losses, StepConfig,
                                 TrainState)
from lobsurf.agent.transitions import Transitions
from lobsurf.data.dataset import BookTensors, Window
from lobsurf.data.labels import Labels
from lobsurf.models.feature_table import FeatureRows, book_window
from lobsurf.models.heads import direction_loss, frd_loss, outcome_loss
from lobsurf.models.precision import at_least_fp32, float_outputs, forward_precision
from lobsurf.streams import run_beside
from lobsurf.writeback import copy_values_, named_pairs


def first_rows(window: Window | FeatureRows, n: int) -> Window | FeatureRows:
    """The first n windows of ``window`` (views)."""
    if isinstance(window, FeatureRows):
        return FeatureRows(window.table, window.rows[:n], window.cfg)
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
    s_inputs = state_inputs(ctl, t.position, t.time_in_trade, t.unrealized_pnl, cfg)
    # the target net sees s and s' in one batched call
    window = book_window(book, torch.cat((t.row, boot_row)), cfg.window)
    inputs = torch.cat((s_inputs, state_inputs(ctl, boot_pos, boot_tit, boot_pnl, cfg)))
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
                net = state.target
                target_q = net.q_logits(net.embed(li.target_window), li.target_inputs)
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
    target_q = target_q.to(at_least_fp32(target_q.dtype))
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
    """Every loss from the online heads' outputs at s: the fields of ``Losses`` in order,
    all but ``total`` detached.
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
    # Only total is differentiated. The rest are metrics and priorities, detached here: an
    # output of a compiled function that needs a gradient but gets none is given a zero
    # tangent, one fill kernel each on the backward's critical path.
    watched = (l_q, q_per_sample, l_pi, l_v, l_frd, l_aux, policy_entropy,
               agreement(out.pi_logits, q_mean), q_mean.gather(1, t.action[:, None]).mean())
    return (total, *(x.detach() for x in watched))


def learn_updates(ls: Losses, grad_norm: torch.Tensor, ctl: ControllerState,
                  metrics: MetricSums, max_priority: torch.Tensor, num_actions: int,
                  cfg: StepConfig) -> LearnUpdates:
    """The bookkeeping of one learning step, pure: the max priority from the per-sample C51
    loss, the learner's controllers (per_beta, alpha, tau) and the learner metrics."""
    _, new_max = priority_values(ls.q_per_sample, max_priority, cfg.replay)
    values = (per_beta_values(ctl, cfg.replay.beta_start, cfg.replay.beta_anneal_steps)
              | alpha_tau_values(ctl, num_actions, cfg.policy))
    sums = added(metrics, {
        "learn_steps": 1.0, "loss_q": ls.q, "loss_pi": ls.pi, "loss_value": ls.value,
        "loss_frd": ls.frd, "loss_aux": ls.aux, "policy_entropy": ls.policy_entropy,
        "agreement": ls.agreement, "grad_norm": grad_norm, "q_mean": ls.q_taken_mean})
    return LearnUpdates(max_priority=new_max, controllers=values, metrics=sums)


#: the norm clip_grad_norm_ clips (L2) and the epsilon it adds to the norm
_CLIP_NORM_TYPE, _CLIP_EPS = 2.0, 1e-6


def flat_clip_coefficient(grad: torch.Tensor, max_norm: float
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """(the gradient's global L2 norm, the divisor that clips it to ``max_norm``, at least
    1) of a flat gradient buffer (lobsurf.agent.flat; the gaps are zeros): the arithmetic
    of torch.nn.utils.clip_grad_norm_, pure, for an update that divides in its own pass."""
    total = torch.linalg.vector_norm(grad, _CLIP_NORM_TYPE)
    return total, torch.clamp((total + _CLIP_EPS) / max_norm, min=1.0)


def learn(state: TrainState, book: BookTensors, cfg: StepConfig,
          sync: GradientSync | None = None) -> Losses:
    """One update from a prioritized sample drawn now; returns the (detached) losses."""
    sample, li = draw_sample(state, book, cfg)
    return apply_gradients(state, gradients(state, book, sample, cfg, li), cfg, sync)


def draw_sample(state: TrainState, book: BookTensors, cfg: StepConfig, reserved: int = 0
                ) -> tuple[Sample, LearnerInputs]:
    """The learner's prioritized sample and its networks' inputs, leaving out the
    ``reserved`` ring slots the next write fills (PrioritizedReplay.sample)."""
    sample = state.replay.sample(cfg.batch_size, state.controllers.per_beta,
                                 kernel=state.kernels.sample, reserved=reserved)
    return sample, sampled_inputs(state, book, sample, cfg)


def drawn_sample(state: TrainState, book: BookTensors, cfg: StepConfig
                 ) -> tuple[Sample, LearnerInputs]:
    """``draw_sample(..., reserved=B)`` from the draw made ahead (``draw_next_``), its
    importance weights with the beta of now; where none waits (the first learning step
    after collects alone) the draw is made first, here."""
    if not state.replay.drawn_ahead:
        draw_next_(state, cfg)
    sample = state.replay.sample_drawn(state.controllers.per_beta,
                                       kernel=state.kernels.sample_at)
    return sample, sampled_inputs(state, book, sample, cfg)


def draw_next_(state: TrainState, cfg: StepConfig) -> None:
    """The next learning step's replay draw, made now (``PrioritizedReplay.draw_ahead_``),
    leaving out the B ring slots the next write fills."""
    state.replay.draw_ahead_(cfg.batch_size, cfg.num_envs, kernel=state.kernels.draw)


def learn_from(state: TrainState, book: BookTensors, sample: Sample, cfg: StepConfig,
               sync: GradientSync | None = None) -> Losses:
    """The update of ``learn`` from a given sample; with ``sync`` the gradients are averaged
    over the ranks before clipping (data parallel: the same update on every rank)."""
    return apply_gradients(state, gradients(state, book, sample, cfg), cfg, sync)


def gradients(state: TrainState, book: BookTensors, sample: Sample, cfg: StepConfig,
              li: LearnerInputs | None = None,
              priorities_done: torch.cuda.Event | None = None) -> Losses:
    """The first half of a learning step: every loss of the sample and their gradients in
    the optimizer's flat gradient buffer (returns the losses), and, beside the backward (on
    ``state.branch``), the sampled entries' new sampling weights in the replay. It writes
    nothing else: the rest of the bookkeeping waits for the gradient norm
    (``apply_gradients``). ``priorities_done`` is recorded once the priorities are written."""
    ls = losses(state, book, sample, cfg, li)
    opt = state.optimizer

    @torch.no_grad()
    def new_priorities() -> None:
        # nothing of the backward or the update reads them, and the collect writes only the
        # slots a sample leaves out: in beside the backward, off the step's tail
        state.replay.write_priorities_(sample.index, state.kernels.priority_weight(
            ls.q_per_sample, cfg.replay))
        if priorities_done is not None:
            priorities_done.record()

    def backward() -> None:
        flat_gradients_(ls.total, opt.params, opt.flat, state.tables.loss_seed)

    run_beside(state.branch, new_priorities, backward)
    return ls


def apply_gradients(state: TrainState, ls: Losses, cfg: StepConfig,
                    sync: GradientSync | None = None) -> Losses:
    """The second half: (rank average,) clip, then Adam and Polyak beside the max priority
    and the learner's controllers and metrics."""
    ctl, lc, opt = state.controllers, cfg.learner, state.optimizer
    if sync is not None:
        sync.grads_(opt.params, opt.flat.grad)
    # max_norm inf: measure the norm without clipping (clip disabled); the flat update
    # divides by the clip's divisor in its own pass
    max_norm = lc.grad_clip_norm if lc.grad_clip_norm > 0 else float("inf")
    grad_norm, divisor = state.kernels.flat_clip_coefficient(opt.flat.grad, max_norm)

    @torch.no_grad()
    def bookkeeping() -> None:
        # ---- max priority, controllers of the learner (per_beta, alpha, tau), metrics
        upd = state.kernels.learn_updates(ls, grad_norm, ctl, state.metrics,
                                          state.replay.max_priority, state.online.num_actions,
                                          cfg)
        copy_values_(named_pairs(ctl, upd.controllers) + named_pairs(state.metrics, upd.metrics)
                     + [(state.replay.max_priority, upd.max_priority)])

    def update() -> None:
        # Adam, and Polyak (target <- (1 - tau) target + tau online), in one pass over the
        # flat buffers
        opt.step(state.kernels.flat_adam, divisor,
                      polyak=(state.flat_target, lc.polyak_tau))

    # the bookkeeping reads the losses and the norm only, Adam and Polyak the parameters:
    # beside each other on state.branch
    run_beside(state.branch, bookkeeping, update)
    return ls


def flat_gradients_(loss: torch.Tensor, params: list[torch.Tensor], flat: FlatParameters,
                    seed: torch.Tensor | None = None) -> list[torch.Tensor]:
    """The gradients of ``loss`` written into ``flat``'s gradient buffer, all at once (one
    multi-tensor copy; a parameter the loss does not reach gets a zero gradient, which leaves
    it, with its zero Adam moments, where it is); returns ``params``. ``seed``: d loss / d
    loss, a 0-d one made once (None: autograd makes one)."""
    flat.write_gradients_(torch.autograd.grad(loss, params, grad_outputs=seed,
                                              allow_unused=True))
    return params
