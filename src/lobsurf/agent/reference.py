"""The training step as a reader would explain it: start here.

``reference_step`` is the whole step (act, gate, simulate, reward pipeline, replay, C51
target, losses, Adam, Polyak, controllers), eager over plain tensors as CleanRL's ``c51.py``,
with none of the production step's code (``lobsurf.agent.step``: streams, graph, flat
buffers, kernels). It runs on the same ``TrainState`` (``train.reference`` trains with it);
``tests/agent/test_reference.py`` holds the two equal from one seed. Shared: the network
and the simulator, each tested against a reference of its own, and the step's constant
tables (order lots, fee constants, FRD bucket bounds, log pi_ref). With passive orders the
agent's state includes its resting orders (lots, queue fraction, age a side), a posted bid
(ask) is gated as a buy (sell) and Hold and the cancels never are. The learner trains
on earlier steps' transitions: it samples the replay and reads the controllers as they were
before this step's collect, which acts with the parameters before this step's Adam update.
Shapes: B envs (= the learner's batch), A actions, N atoms, H horizons, C return buckets.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from lobsurf.agent.controllers import controller_bounds
from lobsurf.agent.state import StepConfig, TrainState
from lobsurf.data.dataset import BookTensors, gather_window

#: what one replay transition holds, in the storage's order
FIELDS = ("row", "position", "time_in_trade", "unrealized_pnl", "action", "reward", "done",
          "trade_closed", "next_row", "next_position", "next_time_in_trade",
          "next_unrealized_pnl", "outcome_valid", "outcome_win")
#: with passive orders, the resting orders at s then at s' (a side each: bid, ask)
ORDER_FIELDS = tuple(f"{at}{side}_{what}" for at in ("", "next_")
                     for what in ("lots", "queue", "age") for side in ("bid", "ask"))


def _sides(sim) -> list[int]:
    # the side each action trades (the gates'): +1 a buy or a posted bid, -1 a sell or a
    # posted ask, 0 Hold and the cancels
    return [(lots > 0) - (lots < 0) + (bid > 0) - (ask > 0)
            for lots, (bid, ask) in zip(sim.signed_order_lots, sim.post_lots)]


def _orders(env, prefix: str = "") -> dict[str, torch.Tensor]:
    # copies of the resting orders as the agent sees them, a [B] tensor a field ({} without)
    if env.passive_state is None:
        return {}
    ps, seen = env.passive_state, {}
    for k, side in enumerate(("bid", "ask")):
        seen[f"{prefix}{side}_lots"] = ps.remaining[:, k].clone()
        seen[f"{prefix}{side}_queue"] = ps.queue_fraction[:, k].float()
        seen[f"{prefix}{side}_age"] = ps.age[:, k].clone()
    return seen


def _support(ctl, cfg: StepConfig) -> torch.Tensor:
    # the C51 atoms z [N], spread evenly over the controllers' [v_min, v_max]
    frac = torch.linspace(0, 1, cfg.network.num_atoms, dtype=torch.float64,
                          device=ctl.v_min.device)
    return (ctl.v_min + (ctl.v_max - ctl.v_min) * frac).float()


def _state_inputs(position, time_in_trade, unrealized, pnl_magnitude, cfg: StepConfig,
                  orders=None, at: str = ""):
    # the agent's own state, each input of order 1: [B, 3]; with the resting orders (their
    # fields named with prefix ``at``) [B, 9]: lots / unit, queue fraction, age as time
    net = cfg.network
    scale = math.log1p(net.state_time_scale_steps)
    pos = position.float() / cfg.position_unit
    tit = torch.log1p(time_in_trade.float()) / scale
    pnl = unrealized / pnl_magnitude.clamp(min=1e-12) if pnl_magnitude > 0 else 0 * unrealized
    x = [pos, tit, pnl.clamp(-net.state_pnl_clip, net.state_pnl_clip).float()]
    if orders:
        x += [orders[f"{at}{side}_lots"].float() / cfg.position_unit for side in ("bid", "ask")]
        x += [orders[f"{at}{side}_queue"].float() for side in ("bid", "ask")]
        x += [torch.log1p(orders[f"{at}{side}_age"].float()) / scale for side in ("bid", "ask")]
    return torch.stack(x, -1)


def _project(next_probs, reward, discount, z):
    # C51 projection of r + discount z_j onto the support (Bellemare et al. 2017, Alg. 1):
    # each atom's mass split between its neighbours l = floor(b), u = ceil(b)    [B, N]
    dz = (z[-1] - z[0]) / (len(z) - 1)
    b = ((reward[:, None] + discount[:, None] * z[None]).clamp(z[0], z[-1]) - z[0]) / dz
    lower, upper = b.floor().long().clamp(0, len(z) - 1), b.ceil().long().clamp(0, len(z) - 1)
    target = torch.zeros_like(next_probs)
    target.scatter_add_(1, lower, next_probs * (upper - b + (lower == upper)))  # l = u: on l
    target.scatter_add_(1, upper, next_probs * (b - lower))
    return target


def _learn(state: TrainState, book: BookTensors, cfg: StepConfig) -> dict:
    ctl, replay, lc, store = state.controllers, state.replay, cfg.learner, state.replay.storage
    # ---- prioritized sample (Schaul et al. 2016): P(i) ~ priority^alpha, never one of the
    # B slots this step's collect is about to fill; importance weights (n P(i))^-beta / max
    weight = replay.weight.clone()
    weight[(replay.pointer + torch.arange(cfg.num_envs, device=weight.device)) % len(weight)] = 0
    cdf = weight.cumsum(0)
    u = torch.rand(cfg.batch_size, dtype=torch.float64, generator=replay.generator,
                   device=weight.device)
    index = (cdf[None, :] <= (u * cdf[-1])[:, None]).sum(1).clamp(max=len(weight) - 1)  # [B]
    iw = (replay.size * (weight[index] / cdf[-1])).clamp(min=1e-300) ** -ctl.per_beta
    iw = (iw / iw.max()).float()
    held = ORDER_FIELDS if state.env.passive_state is not None else ()  # resting orders
    t = {name: getattr(store, name)[index] for name in FIELDS + held}
    # ---- bootstrap after one step, or after an m-step return along the ring (m <= n)
    ret, discount, boot = t["reward"].clone(), lc.gamma * (~t["done"]).float(), index.clone()
    if lc.n_step > 1:
        c, newest = len(weight), (replay.pointer - 1) % len(weight)
        for i in range(len(index)):  # plain loops: one sample, one step at a time
            ahead, alive, ret[i] = int((newest - index[i]) % c) // cfg.num_envs, 1.0, 0.0
            for j in range(min(lc.n_step, ahead + 1)):
                boot[i] = (index[i] + j * cfg.num_envs) % c
                ret[i] += lc.gamma ** j * store.reward[boot[i]]
                if store.done[boot[i]]:
                    alive = 0.0
                    break
            discount[i] = alive * lc.gamma ** min(ahead + 1, lc.n_step)
    s_in = _state_inputs(t["position"], t["time_in_trade"], t["unrealized_pnl"],
                         ctl.pnl_magnitude, cfg, {k: t[k] for k in held[:6]})
    boot_orders = {name: getattr(store, name)[boot] for name in held[6:]}
    next_in = _state_inputs(store.next_position[boot], store.next_time_in_trade[boot],
                            store.next_unrealized_pnl[boot], ctl.pnl_magnitude, cfg,
                            boot_orders, "next_")
    z, b, rows = _support(ctl, cfg), len(index), torch.arange(len(index))
    precision = torch.autocast(z.device.type, torch.bfloat16, enabled=cfg.precision == "bf16")
    # ---- target net at s (pi's distillation target) and s' (the C51 target)
    windows = gather_window(book, torch.cat((t["row"], store.next_row[boot])), cfg.window)
    with torch.no_grad(), precision:
        target_q = state.target.q_logits(state.target.embed(windows),
                                         torch.cat((s_in, next_in)))  # [2B, A, N]
    target_probs = target_q.float().softmax(-1)
    target_mean_s = (target_probs[:b] * z).sum(-1)  # E[Q_target(s, .)]  [B, A]
    best = (target_probs[b:] * z).sum(-1).argmax(-1)  # greedy action at s'  [B]
    target = _project(target_probs[b:][rows, best], ret, discount, z)  # [B, N]
    # ---- online heads at s; every loss a batch mean
    with precision:
        out = state.online(gather_window(book, t["row"], cfg.window), s_in)
    q_logits = out.q_logits.float()
    ce = -(target * q_logits[rows, t["action"]].log_softmax(-1)).sum(-1)  # C51 CE  [B]
    l_q = (iw * ce).mean()
    log_pi = out.pi_logits.float().log_softmax(-1)
    entropy = -(log_pi.exp() * log_pi).sum(-1)
    distill_to = (target_mean_s / ctl.distill_tau.float()).softmax(-1)
    l_pi = (cfg.policy.distill_weight * -(distill_to * log_pi).sum(-1)
            - ctl.sac_alpha.float() * entropy).mean()
    closed = t["trade_closed"].float()
    l_v = (closed * (t["reward"] - out.value.float())).pow(2).sum() / closed.sum().clamp(min=1)
    lab, C = state.labels, out.frd_logits.shape[-1]
    ok = lab.bucket_valid[t["row"]].float()  # [B, H]
    frd_ce = -out.frd_logits.float().log_softmax(-1).gather(
        2, lab.bucket[t["row"]].clamp(0, C - 1)[..., None])[..., 0]
    l_frd = ((frd_ce * ok).sum(0) / ok.sum(0).clamp(min=1)).mean()
    ok = lab.direction_valid[t["row"]].float()
    bce = F.binary_cross_entropy_with_logits(out.direction_logits.float(),
                                             lab.direction[t["row"]], reduction="none")
    l_dir = ((bce * ok).sum(0) / ok.sum(0).clamp(min=1)).mean()
    # a trade's side: that of the position after the transition that opened it
    trade_side = torch.stack((t["next_position"] > 0, t["next_position"] < 0), 1)
    ok = (trade_side & t["outcome_valid"][:, None]).float()  # [B, 2]
    bce = F.binary_cross_entropy_with_logits(
        out.outcome_logits.float(), t["outcome_win"][:, None].float().expand(-1, 2),
        reduction="none")
    l_aux = (cfg.aux.direction_weight * l_dir
             + cfg.aux.outcome_weight * (bce * ok).sum() / ok.sum().clamp(min=1))
    total = l_q + l_pi + cfg.policy.value_weight * l_v + cfg.aux.frd_weight * l_frd + l_aux
    # ---- backward; new priorities |CE| + eps (a repeated index keeps its largest)
    params = state.optimizer.params
    grads = [g if g is not None else torch.zeros_like(p) for p, g in
             zip(params, torch.autograd.grad(total, params, allow_unused=True))]
    priority = ce.detach().double().abs() + cfg.replay.priority_eps
    replay.weight.scatter_reduce_(0, index, priority ** cfg.replay.alpha, "amax",
                                  include_self=False)
    q_mean = (q_logits.detach().softmax(-1) * z).sum(-1)  # E[Q(s, .)]  [B, A]
    pc = log_pi.detach().exp() - log_pi.detach().exp().mean(-1, keepdim=True)
    qc = q_mean - q_mean.mean(-1, keepdim=True)
    corr = (pc * qc).sum(-1) / (pc.norm(dim=-1) * qc.norm(dim=-1)).clamp(min=1e-12)
    return {"grads": grads, "max_priority": priority.max(), "loss_q": l_q, "loss_pi": l_pi,
            "loss_value": l_v, "loss_frd": l_frd, "loss_aux": l_aux,
            "policy_entropy": entropy.mean(), "agreement": corr.mean(),
            "q_mean": q_mean[rows, t["action"]].mean()}


@torch.no_grad()
def _adam_and_polyak(state: TrainState, grads: list[torch.Tensor], cfg: StepConfig):
    # global-norm clip, Adam (Kingma & Ba 2015), target <- (1 - tau) target + tau online
    opt, tau = state.optimizer, cfg.learner.polyak_tau
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
    max_norm = cfg.learner.grad_clip_norm if cfg.learner.grad_clip_norm > 0 else math.inf
    divisor = ((norm + 1e-6) / max_norm).clamp(min=1.0)
    opt.step_count += 1
    bias1, bias2 = 1 - opt.beta1 ** opt.step_count, 1 - opt.beta2 ** opt.step_count
    for p, g, m, v in zip(opt.params, grads, opt.exp_avg, opt.exp_avg_sq):
        g = g / divisor
        m.mul_(opt.beta1).add_((1 - opt.beta1) * g)
        v.mul_(opt.beta2).add_((1 - opt.beta2) * g * g)
        p.sub_(opt.lr / bias1 * m / (v.sqrt() / bias2.sqrt() + opt.eps))
    for tp, p in zip(state.target.parameters(), state.online.parameters()):
        tp.mul_(1 - tau).add_(tau * p)
    return norm


def reference_step(state: TrainState, book: BookTensors, cfg: StepConfig,
                   learning: bool) -> dict[str, torch.Tensor]:
    """One training step (module docstring), in place on ``state``; returns what it did:
    actions [B] (sent), proposed [B] (before the gates), gated [B], stored rewards [B] and,
    when ``learning``, the losses (0-d)."""
    ctl, env, rc, gates, tables = state.controllers, state.env, cfg.reward, cfg.gates, state.tables
    # ---- fresh noise in both networks' noisy layers: f(e) = sign(e) sqrt(|e|), online first
    eps = [e for net in (state.online, state.target) for name, e in net.named_buffers()
           if name.endswith(("eps_in", "eps_out"))]
    draw = torch.randn(sum(e.numel() for e in eps), generator=state.noise_generator,
                       device=eps[0].device)
    with torch.no_grad():
        for e, x in zip(eps, torch.split(draw.sign() * draw.abs().sqrt(), [e.numel() for e in eps])):
            e.copy_(x)
    learned = _learn(state, book, cfg) if learning else None
    # ---- observe: the K-window at each env's cursor and the agent's own state
    s = {k: getattr(env.state, k).clone() for k in ("cursor", "position", "time_in_trade",
                                                      "unrealized_pnl")}
    orders = _orders(env)  # the resting orders (passive orders)
    z, b = _support(ctl, cfg), len(s["cursor"])
    with torch.no_grad(), torch.autocast(z.device.type, torch.bfloat16,
                                         enabled=cfg.precision == "bf16"):
        out = state.online(gather_window(book, s["cursor"], cfg.window), _state_inputs(
            s["position"], s["time_in_trade"], s["unrealized_pnl"], ctl.pnl_magnitude, cfg,
            orders))
    probs = out.q_logits.float().softmax(-1)  # [B, A, N]
    # ---- act: one Thompson sample of each action's return (inverse CDF), then argmax
    if cfg.learner.acting == "greedy":
        action = (probs * z).sum(-1).argmax(-1)
    elif cfg.learner.acting == "pi":
        u = torch.rand(b, generator=state.acting_generator, device=z.device)
        cdf = out.pi_logits.float().softmax(-1).cumsum(-1)
        action = torch.searchsorted(cdf, u[:, None])[:, 0].clamp(max=cdf.shape[1] - 1)
    else:
        u = torch.rand(probs.shape[:2], generator=state.acting_generator, device=z.device)
        atom = torch.searchsorted(probs.cumsum(-1), u[..., None])[..., 0]  # [B, A]
        action = z[atom.clamp(max=len(z) - 1)].argmax(-1)
    # ---- gate: hold unless Q is confident (P(return > 0) >= threshold) and the FRD head
    # gives a move beyond the round-trip cost of its side a chance; the first slots explore
    # ungated
    proposed = action
    gated = torch.zeros(b, dtype=torch.bool, device=z.device)
    active, threshold = state.step_count >= gates.warmup_steps, ctl.gate_threshold.clone()
    if cfg.learner.acting == "thompson" and gates.enabled:
        bid, ask = book.bid_px_ticks[s["cursor"], 0], book.ask_px_ticks[s["cursor"], 0]
        fee = tables.fee_per_lot + (bid + ask).double() / 2 * tables.fee_per_value_tick
        cost = ((ask - bid).double() + 2 * fee / tables.tick_value).float()  # ticks  [B]
        frd = out.frd_logits[:, gates.frd_horizon_index].float().softmax(-1)  # [B, C]
        p_up = (frd * (tables.bucket_lower >= cost[:, None])).sum(-1)
        p_down = (frd * (tables.bucket_upper <= -cost[:, None])).sum(-1)
        side = torch.tensor(_sides(env.cfg), device=z.device)[action]
        blocked = torch.where(side > 0, p_up < gates.frd_min_prob, p_down < gates.frd_min_prob)
        blocked |= (probs * (z > 0)).sum(-1)[torch.arange(b), action] < threshold
        slots = int(b * (1.0 - gates.max_hold_fraction))
        gated = (torch.arange(b, device=z.device) >= slots) & active & (side != 0) & blocked
        action = torch.where(gated, 0, action)
        up = ctl.hold_fraction < gates.target_hold_fraction
        if active:
            threshold = (threshold * (gates.adjust_rate if up else 1 / gates.adjust_rate)
                         ).clamp(*controller_bounds("gate_threshold"))
    # ---- simulate (market orders fill against the book, resting orders against its
    # prints and queues), then the reward pipeline:
    # mark-to-market shaping -> scale -> clamp [-loss, win] -> + beta log pi_ref(a)
    result = env.step(action)
    pnl, closed, done = result.reward, result.trade_closed, result.episode_end
    magnitude = ctl.pnl_magnitude.clone()  # EMA of |net PnL| per closed trade
    if closed.any():
        mean = pnl[closed].abs().mean()
        magnitude = mean if magnitude <= 0 else magnitude + rc.magnitude_ema_rate * (mean - magnitude)
    scale = rc.scaled_magnitude / magnitude if magnitude > 0 else ctl.reward_scale
    shaping = torch.where(done, 0.0, cfg.learner.gamma * env.state.unrealized_pnl)
    step_pnl = pnl + shaping - s["unrealized_pnl"] if rc.mark_to_market else pnl
    reward = (step_pnl * scale).clamp(-rc.loss, rc.win).float()
    reward = reward + ctl.kl_beta.float() * tables.log_pi_ref[action]
    # ---- replay write: B ring slots from the pointer, at the max priority seen; the trades
    # that closed label the transitions that opened them (the outcome head's targets)
    replay, cap = state.replay, state.replay.capacity
    ring = (replay.pointer + torch.arange(b, device=z.device)) % cap
    no = torch.zeros_like(done)
    new = (s["cursor"], s["position"], s["time_in_trade"], s["unrealized_pnl"], action, reward,
           done, closed, env.state.cursor, env.state.position, env.state.time_in_trade,
           env.state.unrealized_pnl, no, no)
    for name, value in [*zip(FIELDS, new), *orders.items(), *_orders(env, "next_").items()]:
        getattr(replay.storage, name)[ring] = value
    replay.weight[ring] = replay.max_priority ** cfg.replay.alpha
    for e in range(b):
        tit = int(s["time_in_trade"][e])
        if closed[e] and 1 <= tit and tit * b <= cap - b:
            opened = (int(replay.pointer) - tit * b + e) % cap
            replay.storage.outcome_valid[opened] = True
            replay.storage.outcome_win[opened] = bool(pnl[e] > 0)
    replay.pointer.copy_((replay.pointer + b) % cap)
    replay.size.copy_((replay.size + b).clamp(max=cap))
    state.step_count += 1
    # ---- controllers the collect moves: reward scale, atom span, action histogram, gate
    p = torch.bincount(action, minlength=probs.shape[1]).double() / b
    entropy, rate = -(p * p.clamp(min=1e-30).log()).sum(), cfg.policy.action_ema_rate
    lo, hi = -max(rc.loss, rc.span_floor), max(rc.win, rc.span_floor)
    for name, value in {
            "pnl_magnitude": magnitude, "reward_scale": scale, "gate_threshold": threshold,
            "v_min": (ctl.v_min + rc.span_ema_rate * (lo - ctl.v_min)).clamp(max=-rc.span_floor),
            "v_max": (ctl.v_max + rc.span_ema_rate * (hi - ctl.v_max)).clamp(min=rc.span_floor),
            "action_entropy": ctl.action_entropy + rate * (entropy - ctl.action_entropy),
            "hold_fraction": ctl.hold_fraction + rate * (p[0] - ctl.hold_fraction)}.items():
        getattr(ctl, name).copy_(value)
    sums = {"collect_steps": 1, "env_steps": b, "trades": closed.sum(),
            "wins": (closed & (pnl > 0)).sum(), "net_pnl": pnl.sum(),
            "hold_actions": (action == 0).sum(), "gated": gated.sum(),
            "abs_position": env.state.position.abs().double().mean(),
            "reward": reward.double().mean()}
    if learned is not None:
        # ---- learn: clip, Adam, Polyak; then the learner's controllers: max priority, PER
        # beta annealed to 1, pi's alpha and tau steered toward the post-gate entropy target
        sums |= {"learn_steps": 1, "grad_norm": _adam_and_polyak(state, learned.pop("grads"), cfg)}
        replay.max_priority.copy_(torch.maximum(replay.max_priority, learned.pop("max_priority")))
        beta = ctl.per_beta + (1 - cfg.replay.beta_start) / cfg.replay.beta_anneal_steps
        ctl.per_beta.copy_(beta.clamp(max=1))
        below = ctl.action_entropy < cfg.policy.entropy_target_fraction * math.log(probs.shape[1])
        for name in ("sac_alpha", "distill_tau"):
            factor = 1 + cfg.policy.ramp_rate if below else 1 - cfg.policy.decay_rate
            getattr(ctl, name).copy_((getattr(ctl, name) * factor).clamp(*controller_bounds(name)))
        sums |= {k: v.detach() for k, v in learned.items()}
    for name, value in sums.items():
        getattr(state.metrics, name).add_(value)
    return {"action": action, "proposed": proposed, "gated": gated, "reward": reward,
            **(learned or {})}
