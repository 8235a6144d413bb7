"""``train(cfg, run_dir)``: the training run, wired in the order a reader would explain it.

data (store, split, training book) -> network (seeded init, normaliser fitted on training
rows, or a pretrain checkpoint) -> target network -> optimiser -> simulator -> replay ->
controllers -> run folder -> loop of ``lobsurf.agent.step.train_step`` with metrics every
``log_every`` steps (one device-to-host copy) and checkpoints every ``checkpoint_every``.

``--resume`` rebuilds the same state from the run's config, copies the newest checkpoint in,
cuts metrics.jsonl back to the size it had then, and continues: on CPU, N steps + resume +
M steps equal N + M uninterrupted steps bit for bit.
"""

from __future__ import annotations

import copy
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import lobsurf
from lobsurf.agent.controllers import ControllerState, controller_table
from lobsurf.agent.metrics import MetricSums
from lobsurf.agent.network import AgentNetwork
from lobsurf.agent.optim import TensorAdam
from lobsurf.agent.replay import PrioritizedReplay
from lobsurf.agent.policy import reference_log_probs
from lobsurf.agent.step import StepConfig, StepTables, TrainState, train_step
from lobsurf.data.labels import compute_labels
from lobsurf.errors import UserError
from lobsurf.pretrain.loop import last_snapshot
from lobsurf.pretrain.split import evenly_spaced
from lobsurf.progress import step_progress
from lobsurf.sim.env import BatchedLobEnv
from lobsurf.sim.reward import money_scalar
from lobsurf.train.checkpoint import (list_checkpoints, load_payload, restore_state_,
                                      save_checkpoint)
from lobsurf.train.config import RunConfig, run_config_to_dict, run_config_to_toml
from lobsurf.train.data import TrainingData
from lobsurf.train.run_folder import CONFIG_NAME, METRICS_NAME, MetricsLog

#: offsets of the run seed for each generator, so no two draw the same stream
SEED_OFFSETS = {"init": 0, "noise": 1, "acting": 2, "replay": 3}


def step_config(cfg: RunConfig) -> StepConfig:
    return StepConfig(network=cfg.network, replay=cfg.replay, learner=cfg.learner,
                      reward=cfg.reward, policy=cfg.policy, gates=cfg.gates, aux=cfg.aux,
                      window=cfg.sim.window,
                      position_limit=cfg.sim.position_limit_lots, batch_size=cfg.learner_batch,
                      controller_ema_rate=cfg.train.controller_ema_rate)


def _generator(device: torch.device | str, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def build_network(cfg: RunConfig, data: TrainingData, device: torch.device | str,
                  pretrained: dict[str, torch.Tensor] | None = None) -> AgentNetwork:
    """Seeded network on ``device``; normaliser from training rows or the pretrain weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.train.seed + SEED_OFFSETS["init"])
        net = AgentNetwork(cfg.features, cfg.encoder, cfg.network, cfg.labels,
                           cfg.sim.num_actions)
    net = net.to(device)
    if pretrained is not None:
        net.load_pretrained_(pretrained)
    else:
        rows = evenly_spaced(data.split.train_rows, cfg.data.normalizer_rows)
        x, log_dt = last_snapshot(data.book, rows, cfg.features, cfg.sim.window)
        net.normalizer.fit_(x)
        if cfg.encoder.kind == "cfc":
            net.encoder.fit_time_scale_(log_dt)
    return net


def build_state(cfg: RunConfig, data: TrainingData, device: torch.device | str,
                pretrained: dict[str, torch.Tensor] | None = None) -> TrainState:
    """Every piece of a step's state, freshly initialised from the config's seeds."""
    seed = cfg.train.seed
    online = build_network(cfg, data, device, pretrained)
    target = copy.deepcopy(online)
    for p in target.parameters():
        p.requires_grad_(False)
    optimizer = TensorAdam(online.parameters(), lr=cfg.learner.lr, eps=cfg.learner.adam_eps)
    try:
        env = BatchedLobEnv(data.train_book, cfg.train.envs, cfg.sim)
    except ValueError as exc:
        raise UserError(f"training rows too few for the simulator: {exc}") from exc
    env.reset()
    return TrainState(
        online=online, target=target, optimizer=optimizer,
        controllers=ControllerState.bootstrap(device, {"per_beta": cfg.replay.beta_start}),
        replay=PrioritizedReplay(cfg.replay, device, seed + SEED_OFFSETS["replay"]),
        env=env,
        noise_generator=_generator(device, seed + SEED_OFFSETS["noise"]),
        acting_generator=_generator(device, seed + SEED_OFFSETS["acting"]),
        metrics=MetricSums.zeros(device),
        step_count=torch.zeros((), dtype=torch.int64, device=device),
        tables=step_tables(cfg, env, device),
        labels=compute_labels(data.train_book, cfg.labels))


def step_tables(cfg: RunConfig, env: BatchedLobEnv, device: torch.device | str) -> StepTables:
    """The step's device constants: order table, pi_ref, FRD bucket bounds, fee constants."""
    edges = torch.tensor(cfg.labels.bucket_edges_ticks, dtype=torch.float32, device=device)
    inf = torch.full((1,), float("inf"), device=device)
    return StepTables(
        order_lots=env.order_table,
        log_pi_ref=reference_log_probs(cfg.sim.num_actions, cfg.policy, device),
        bucket_lower=torch.cat((-inf, edges)), bucket_upper=torch.cat((edges, inf)),
        fee_per_lot=money_scalar(env.fee_model.per_lot, device),
        fee_per_value_tick=money_scalar(env.fee_model.per_value_tick, device),
        tick_value=money_scalar(env.tick_value, device))


def versions() -> dict[str, str]:
    return {"lobsurf": lobsurf.__version__, "torch": str(torch.__version__),
            "python": platform.python_version(), "numpy": np.__version__,
            "cuda": str(torch.version.cuda or "none")}


def device_name(device: torch.device | str) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


@dataclass
class RunResult:
    """What ``train`` returns: the run folder, the last metrics record, the step reached."""

    run_dir: Path
    last_metrics: dict[str, Any] | None
    step: int
    checkpoint: Path


def _metrics_record(state: TrainState, step: int, wall_s: float, interval_s: float,
                    interval_steps: int, envs: int) -> dict[str, Any]:
    means = state.metrics.read_and_reset()  # the deliberate host sync of a log interval
    ctl = {k: v for k, v in zip(state.controllers.as_dict(),
                                torch.stack(list(state.controllers.as_dict().values())).tolist())}
    steps_per_s = interval_steps / interval_s if interval_s > 0 else float("nan")
    return {"event": "metrics", "step": step, "wall_s": round(wall_s, 3),
            "steps_per_s": steps_per_s, "env_steps_per_s": steps_per_s * envs, **means,
            "action_entropy": ctl["action_entropy"], "v_min": ctl["v_min"],
            "v_max": ctl["v_max"], "reward_scale": ctl["reward_scale"],
            "alpha": ctl["sac_alpha"], "tau": ctl["distill_tau"], "beta": ctl["kl_beta"],
            "gate_threshold": ctl["gate_threshold"], "controllers": ctl}


def train(cfg: RunConfig, run_dir: Path, data: TrainingData, device: torch.device | str,
          resume: bool = False, pretrained: dict[str, torch.Tensor] | None = None,
          progress: bool = True, init_note: str = "") -> RunResult:
    """Run (or continue) training in ``run_dir`` up to ``cfg.train.steps`` total steps."""
    # ---- state: fresh, or the newest checkpoint copied into a fresh build
    state = build_state(cfg, data, device, pretrained)
    scfg = step_config(cfg)
    config_dict = run_config_to_dict(cfg)
    meta = {"data": data.summary(), "versions": versions(), "device": device_name(device),
            "init": init_note}
    log = None
    start = 0
    try:
        if resume:
            found = list_checkpoints(run_dir)
            if not found:
                raise UserError(f"{run_dir}: no checkpoint to resume from")
            payload = load_payload(found[-1])
            restore_state_(state, payload)
            start = int(payload["step"])
            log = MetricsLog(run_dir / METRICS_NAME)
            log.truncate(int(payload["metrics_bytes"]))
            log.write({"event": "resume", "step": start, "checkpoint": found[-1].name,
                       "steps": cfg.train.steps})
        else:
            (run_dir / CONFIG_NAME).write_text(run_config_to_toml(cfg))
            log = MetricsLog(run_dir / METRICS_NAME)
            log.write({"event": "run_start", "config": config_dict,
                       "controllers": controller_table(), **meta})
        last_path = found[-1] if resume else None
        last_record = None
        t0 = time.perf_counter()
        t_log, s_log = t0, start
        total = cfg.train.steps
        with step_progress(total, "train", progress) as advance:
            advance(start)
            for step in range(start, total):
                # ---- collect (+ learn once the replay holds learning_starts steps)
                train_step(state, data.train_book, scfg,
                           learning=step >= cfg.learner.learning_starts)
                done_steps = step + 1
                # ---- log: one host copy of the device sums every log_every steps
                if done_steps % cfg.train.log_every == 0 or done_steps == total:
                    now = time.perf_counter()
                    last_record = _metrics_record(state, done_steps, now - t0, now - t_log,
                                                  done_steps - s_log, cfg.train.envs)
                    log.write(last_record)
                    t_log, s_log = now, done_steps
                    advance(0, **_bar_fields(last_record))
                # ---- checkpoint (the metrics file size goes with it)
                if done_steps % cfg.train.checkpoint_every == 0 or done_steps == total:
                    last_path = save_checkpoint(run_dir, state, done_steps, config_dict,
                                                log.size(), meta, cfg.train.keep_checkpoints)
                advance(1)
        if start < total:
            log.write({"event": "run_end", "step": total,
                       "wall_s": round(time.perf_counter() - t0, 3)})
        return RunResult(run_dir=run_dir, last_metrics=last_record, step=max(start, total),
                         checkpoint=last_path)
    finally:
        if log is not None:
            log.close()


def _bar_fields(record: dict[str, Any]) -> dict[str, str]:
    def fmt(v: Any, spec: str) -> str:
        return "-" if v is None or v != v else format(v, spec)

    return {"steps/s": fmt(record["steps_per_s"], ".1f"), "win": fmt(record["win_rate"], ".2f"),
            "hold": fmt(record["hold_fraction"], ".2f"), "pnl": fmt(record["net_pnl"], ",.0f")}
