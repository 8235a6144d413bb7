"""``train(cfg, run_dir)``: the training run, wired in the order a reader would explain it.

data (store, split, training book) -> network (seeded init, normaliser fitted on training
rows, or a pretrain checkpoint) -> target network -> optimiser -> simulator -> replay ->
controllers -> run folder -> loop of ``lobsurf.agent.step.train_step`` with metrics every
``log_every`` steps (one device-to-host copy with the guard's state, read a step later in one
process: lobsurf.training.run.readout), checkpoints every ``checkpoint_every`` and, with a
validation slice (``data.validation_fraction``), a validation every ``validate_every`` that
keeps the best checkpoint or hold (lobsurf.training.selection.validate; ``train.patience`` ends the run
early, with a final checkpoint).
On CUDA (``train.cuda_graph``, one process) the learning step is one CUDA graph replayed
(lobsurf.training.speed.cuda_graph); the pre-learning steps, metrics and checkpoints stay eager,
between replays on the same stream.

``--resume`` rebuilds the same state from the run's config, copies the newest complete
checkpoint in (a torn or unmarked newer one is skipped with a warning), cuts metrics.jsonl
back to the size it had then, and continues: on CPU, N steps + resume + M steps equal N + M
uninterrupted steps bit for bit, however the first part ended (SIGKILL included).

Faults (docs/reliability.md): every step ends with the divergence guard's device-side check
(lobsurf.training.faults.guard); the loop reads the guard with each readout (a log interval, a
checkpoint), and a NaN/Inf rolls the run back to the last good checkpoint with the learning
rate times ``train.rollback_lr_factor``, at most ``train.max_rollbacks`` times
(lobsurf.training.faults.rollback). SIGINT and
SIGTERM stop the run after the current step with a final checkpoint
(lobsurf.training.faults.interrupts); the metric sums not yet logged travel in it, so the resumed
metrics equal an uninterrupted run's.

Several processes (torchrun, ``lobsurf train --gpus N``; docs/distributed.md): each rank
builds its own state with rank-offset seeds, ``Collective`` averages gradients and
controllers inside the step, rank 0 writes metrics.jsonl and the main checkpoint, every
other rank its shard (lobsurf.training.recovery.rank_shards).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import lobsurf
from lobsurf.agent.c51_triton import c51_target_triton, kernel_applies
from lobsurf.agent.controllers import ControllerState, controller_table
from lobsurf.agent.flat import flatten_parameters_
from lobsurf.agent.metrics import MetricSums
from lobsurf.agent.network import AgentNetwork
from lobsurf.agent.optim import TensorAdam
from lobsurf.agent.policy import reference_log_probs
from lobsurf.agent.replay import PrioritizedReplay
from lobsurf.agent.state import StepConfig, StepTables, TrainState
from lobsurf.agent.reference import reference_step
from lobsurf.agent.step import eager_kernels, train_step
from lobsurf.data.labels import compute_labels
from lobsurf.errors import UserError
from lobsurf.models.kernels.triton_support import use_kernels_
from lobsurf.models.features import last_snapshot
from lobsurf.data.split import evenly_spaced
from lobsurf.progress import step_progress
from lobsurf.sim.env import BatchedLobEnv
from lobsurf.sim.fees import resolve_fees
from lobsurf.sim.reward import money_scalar
from lobsurf.streams import side_stream
from lobsurf.training.recovery import pause_points
from lobsurf.training.recovery.checkpoint import CheckpointWriter, newest_valid_checkpoint, save_checkpoint
from lobsurf.training.speed.compile import (
    compile_config,
    compile_errors,
    compile_failure,
    compile_guard_,
    compile_networks_,
    compile_wanted,
    compiled_kernels,
)
from lobsurf.training.config import RunConfig, run_config_to_dict, run_config_to_toml
from lobsurf.training.speed.cuda_graph import GraphedStep, graph_unsupported, step_generators
from lobsurf.training.data import TrainingData
from lobsurf.training.distributed.collective import RANK_SEED_STRIDE, Collective, check_identical, state_tensors
from lobsurf.training.faults.guard import DivergenceGuard
from lobsurf.training.faults.interrupts import StopOnSignal
from lobsurf.training.recovery.rank_shards import restore_rank_, save_all_ranks
from lobsurf.training.run.readout import Readout
from lobsurf.training.faults.rollback import roll_back
from lobsurf.training.recovery.run_folder import CONFIG_NAME, METRICS_NAME, MetricsLog, NullLog
from lobsurf.training.selection.validate import ModelSelection

#: offsets of the run seed for each generator, so no two draw the same stream
SEED_OFFSETS = {"init": 0, "noise": 1, "acting": 2, "replay": 3}


def step_config(cfg: RunConfig) -> StepConfig:
    return StepConfig(network=cfg.network, replay=cfg.replay, learner=cfg.learner,
                      reward=cfg.reward, policy=cfg.policy, gates=cfg.gates, aux=cfg.aux,
                      window=cfg.sim.window,
                      position_unit=max(cfg.sim.order_sizes_lots), batch_size=cfg.learner_batch,
                      num_envs=cfg.train.envs,
                      precision=cfg.train.precision)


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
        rows = evenly_spaced(data.fit_rows, cfg.data.normalizer_rows)
        x, log_dt = last_snapshot(data.book, rows, cfg.features, cfg.sim.window)
        net.normalizer.fit_(x)
        if cfg.encoder.kind == "cfc":
            net.encoder.fit_time_scale_(log_dt)
    return net


def build_state(cfg: RunConfig, data: TrainingData, device: torch.device | str,
                pretrained: dict[str, torch.Tensor] | None = None, rank: int = 0
                ) -> TrainState:
    """Every piece of a step's state, freshly initialised from the config's seeds; rank r of
    a multi-process run offsets every seed but the network's by r * RANK_SEED_STRIDE."""
    seed = cfg.train.seed + rank * RANK_SEED_STRIDE
    sim = dataclasses.replace(cfg.sim, seed=cfg.sim.seed + rank * RANK_SEED_STRIDE)
    online = build_network(cfg, data, device, pretrained)
    target = copy.deepcopy(online)
    for p in target.parameters():
        p.requires_grad_(False)
    optimizer = TensorAdam(online.parameters(), lr=cfg.learner.lr, eps=cfg.learner.adam_eps)
    # the target's buffer in the online's layout: Polyak inside the flat Adam's pass
    flat_target = flatten_parameters_(target.parameters(), with_grads=False)
    try:
        env = BatchedLobEnv(data.train_book, cfg.train.envs, sim)
    except ValueError as exc:
        raise UserError(f"training rows too few for the simulator: {exc}") from exc
    env.reset()
    replay = PrioritizedReplay(cfg.replay, device, seed + SEED_OFFSETS["replay"])
    noise_generator = _generator(device, seed + SEED_OFFSETS["noise"])
    acting_generator = _generator(device, seed + SEED_OFFSETS["acting"])
    cuda = torch.device(device).type == "cuda"
    if cuda:
        # one generator for every draw of the step: fewer kernels before each graph replay
        # (lobsurf.training.speed.cuda_graph; benchmarks/RESULTS.md, Defaults decided by measurement)
        replay.generator = env.generator = acting_generator = noise_generator
    # train.kernels: the learner's C51 target side as one kernel on CUDA (else the PyTorch
    # one, which train.compile compiles)
    kernels = eager_kernels()
    mode = "auto" if cfg.train.kernels else "off"
    if kernel_applies(mode, device):
        kernels.c51_target = c51_target_triton
    for net in (online, target):  # the encoders' kernels (lobsurf.models.kernels)
        use_kernels_(net, mode)
    return TrainState(
        online=online, target=target, optimizer=optimizer, kernels=kernels,
        controllers=ControllerState.bootstrap(device, {"per_beta": cfg.replay.beta_start}),
        replay=replay, env=env, noise_generator=noise_generator,
        acting_generator=acting_generator,
        metrics=MetricSums.zeros(device),
        step_count=torch.zeros((), dtype=torch.int64, device=device),
        tables=step_tables(cfg, env, device),
        labels=compute_labels(data.train_book, cfg.labels),
        # on CUDA the learner's two side streams at the highest priority: its chain is the
        # step's critical path (lobsurf.streams)
        branch=side_stream(cuda, device, high_priority=True),
        learner_branch=side_stream(cuda, device, high_priority=True),
        flat_target=flat_target)


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
        tick_value=money_scalar(env.tick_value, device),
        loss_seed=torch.ones((), dtype=torch.float32, device=device))


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
    """What ``train`` returns: the run folder, the last metrics record, the step reached,
    the newest checkpoint, the signal that stopped the run early (None: it finished), the
    chosen policy (RUN/chosen.json's content; None without validation) and why training
    ended before train.steps (None: it did not)."""

    run_dir: Path
    last_metrics: dict[str, Any] | None
    step: int
    checkpoint: Path
    interrupted: str | None = None
    chosen: dict[str, Any] | None = None
    stopped_early: str | None = None


def _mirror(cfg: RunConfig, run_dir: Path):
    """The TensorBoard mirror of the metrics (RUN/tb) when train.tensorboard is on."""
    if not cfg.train.tensorboard:
        return None
    from lobsurf.telemetry.tensorboard import TB_DIR, TensorBoardLog

    return TensorBoardLog(run_dir / TB_DIR)


def _start_run(cfg: RunConfig, run_dir: Path, meta: dict[str, Any]) -> MetricsLog:
    """A new run: its config.toml and the run_start record."""
    try:
        (run_dir / CONFIG_NAME).write_text(run_config_to_toml(cfg))
    except OSError as exc:
        raise UserError(f"cannot write {run_dir / CONFIG_NAME}: {exc.strerror or exc}") from exc
    log = MetricsLog(run_dir / METRICS_NAME, mirror=_mirror(cfg, run_dir))
    log.write({"event": "run_start", "config": run_config_to_dict(cfg),
               "controllers": controller_table(), **meta})
    return log


def _resume(state: TrainState, run_dir: Path, log: MetricsLog, steps: int, rank: int,
            selection: ModelSelection | None) -> tuple[Path, int, int]:
    """Copy the newest complete checkpoint into ``state`` (and its model choice into
    ``selection``) and cut metrics.jsonl back to it; returns (checkpoint, its step,
    rollbacks so far)."""
    found = newest_valid_checkpoint(run_dir)
    if found is None:
        raise UserError(f"{run_dir}: no complete checkpoint to resume from; start it again "
                        "with --overwrite")
    path, payload = found
    source = restore_rank_(state, path, payload, rank)
    if source == "fresh":
        print(f"train: rank {rank} is new to {path.name}: a copy of rank 0's replay, a "
              "fresh simulator", file=sys.stderr)
    start = int(payload["step"])
    if selection is not None:
        selection.restore_(payload)
    log.truncate(int(payload["metrics_bytes"]))
    log.write({"event": "resume", "step": start, "checkpoint": path.name, "steps": steps})
    return path, start, int(payload.get("rollbacks", 0))


def train(cfg: RunConfig, run_dir: Path, data: TrainingData, device: torch.device | str,
          resume: bool = False, pretrained: dict[str, torch.Tensor] | None = None,
          progress: bool = True, init_note: str = "", collective: Collective | None = None
          ) -> RunResult:
    """Run (or continue) training in ``run_dir`` up to ``cfg.train.steps`` total steps
    (``collective``: this process's rank of a multi-process run; None: one process)."""
    coll = collective or Collective.local()
    sync = coll if coll.active else None
    if cfg.train.reference and sync is not None:
        raise UserError("train.reference runs in one process (the readable step has no "
                        "collectives); drop --gpus or train.reference")
    # ---- fees: the run's, else the store's, else the default; config.toml keeps them
    fees = resolve_fees(cfg.sim, data.book)
    cfg = dataclasses.replace(cfg, sim=fees.applied_to(cfg.sim))
    # ---- state: fresh, or the newest complete checkpoint copied into a fresh build
    state = _build(cfg, data, device, pretrained, coll.rank, coll.world_size)
    scfg = step_config(cfg)
    tc = cfg.train
    config_dict = run_config_to_dict(cfg)
    meta = {"data": data.summary(), "fees": fees.record(), "versions": versions(),
            "device": device_name(device), "init": init_note, "world_size": coll.world_size}
    guard = DivergenceGuard(device)
    if compiled_kernels(state):
        compile_guard_(guard, compile_config(device))
    log = None
    progress = progress and coll.is_main
    # one process: checkpoint files written beside the loop (the payload is copied first)
    writer = CheckpointWriter(background=coll.world_size == 1)
    selection = (ModelSelection(cfg, data, device, run_dir, config_dict, sweeps=coll.is_main)
                 if data.validation is not None else None)
    try:
        if not coll.is_main:
            log = NullLog()
        else:
            log = (MetricsLog(run_dir / METRICS_NAME, mirror=_mirror(cfg, run_dir)) if resume
                   else _start_run(cfg, run_dir, meta))
        if resume:
            last_path, start, rollbacks = _resume(state, run_dir, log, tc.steps, coll.rank,
                                                  selection)
            fresh_bytes = None  # a resumed run always has a checkpoint to roll back to
        else:
            last_path, start, rollbacks, fresh_bytes = None, 0, 0, log.size()
        # a run that train.patience ended stays ended (and says so again after its resume)
        stopped_before = selection is not None and selection.choice.stopped
        total = start if stopped_before else tc.steps
        coll.broadcast_(state_tensors(state.online, state.target, state.controllers))
        # end of the newest rollback record: a later rollback to the same checkpoint keeps it
        kept_bytes = 0
        last_record = None
        graph_on = _graph_enabled(cfg, device, sync)
        graphed = None
        # one process: a log step's readout is finished a step later (lobsurf.training.run.readout)
        defer = not coll.active
        pending: Readout | None = None
        t0 = time.perf_counter()
        t_log, s_log = t0, start
        step, stopping, ended_early = start, False, stopped_before
        bar: dict[str, str] = {}
        with StopOnSignal() as stop, step_progress(total, "train", progress) as advance:
            advance(start)
            while step < total:
                # ---- collect (+ learn once the replay holds learning_starts steps), then
                # the guard's device-side finiteness check (no host sync); the learning
                # step replays one CUDA graph where it can (train.cuda_graph)
                learning = step >= cfg.learner.learning_starts
                try:
                    if graph_on and learning:
                        if graphed is None:  # said even without the bar: it can take a minute
                            print("train: capturing the learning step as a CUDA graph"
                                  + (", compiling it first (train.compile, about a minute)"
                                     if compiled_kernels(state) else ""), file=sys.stderr)
                            graphed = _graphed_step(state, data.train_book, scfg, guard, device)
                        graphed()
                    else:
                        _guarded_step(state, data.train_book, scfg, guard, learning, sync,
                                      tc.reference)
                except compile_errors() as exc:
                    raise UserError(compile_failure(exc)) from exc
                step += 1
                pause_points.pause_point("step")
                # a signal during the last step changes nothing: the run ends normally
                stopping = coll.any_(stop.requested is not None, device) and step < total
                log_now = step % tc.log_every == 0 or step == total
                save_now = step % tc.checkpoint_every == 0 or step == total or stopping
                if sync is not None and save_now:
                    # the ranks must hold one model before it is saved (docs/distributed.md)
                    check_identical(coll, list(state.online.parameters()), state.controllers,
                                    step)
                validate_now = selection is not None and selection.due(step, total)
                # ---- readouts: the previous log step's (taken without a sync, finished
                # now that this step is launched: lobsurf.training.run.readout), then this step's
                due = [] if pending is None else [pending]
                pending = None
                if log_now or save_now or validate_now:
                    writer.check()  # a failed background write stops the run here
                    if log_now:
                        coll.metric_sums_(state.metrics)  # rank 0 logs every rank's steps
                    taken = Readout(state, guard, step, with_metrics=log_now)
                    if log_now and not (save_now or validate_now) and defer:
                        pending = taken
                    else:
                        due.append(taken)  # a checkpoint or a validation needs the guard's
                                           # verdict first
                rolled_back = False
                for readout in due:
                    bad = readout.finish().bad
                    # ---- divergence: roll back to the newest good checkpoint
                    if coll.any_(bad is not None, device) and bad is None:
                        bad = (readout.step, "value on another rank")
                    if bad is not None:
                        writer.wait()  # the newest checkpoint complete on disk first
                        rollbacks += 1
                        state, good = roll_back(
                            state, cfg.train, run_dir, log, kept_bytes, fresh_bytes, bad,
                            rollbacks,
                            rebuild=lambda: _rebuild(cfg, data, device, pretrained, coll,
                                                     selection),
                            restore=lambda st, path, payload: _restore(st, path, payload,
                                                                       coll.rank, selection))
                        kept_bytes = log.size()
                        guard.reset_()
                        graphed = None  # a rebuilt state: capture again
                        pending = None  # taken from the state rolled away from
                        step, last_path = good.step, good.checkpoint or last_path
                        t_log, s_log = time.perf_counter(), step
                        rolled_back = True
                        break
                    # ---- log: the record of a readout with metrics
                    if readout.means is not None:
                        now = time.perf_counter()
                        last_record = readout.record(now - t0, now - t_log,
                                                     readout.step - s_log,
                                                     tc.envs * coll.world_size)
                        log.write(last_record)
                        t_log, s_log = now, readout.step
                        bar.update(_bar_fields(last_record))
                        advance(0, **bar)
                if rolled_back:
                    if stopping:
                        break
                    continue
                # ---- validate: sweep the greedy agent, keep the best checkpoint or hold
                if validate_now:
                    ended_early = coll.any_(selection.validate(state, step, log), device)
                    save_now = save_now or ended_early
                    bar.update(selection.bar_fields())
                    advance(0, **bar)
                if stopping:
                    log.write({"event": "interrupted", "step": step,
                               "signal": stop.requested.name})
                # ---- checkpoint (the metrics file size goes with it)
                if save_now:
                    extra = {"rollbacks": rollbacks, "world_size": coll.world_size}
                    if selection is not None:
                        extra["model_choice"] = selection.state_dict()
                    last_path = save_all_ranks(run_dir, state, step, coll, functools.partial(
                        save_checkpoint, run_dir, state, step, config_dict, log.flushed_size(),
                        meta, tc.keep_checkpoints, extra=extra, writer=writer,
                        before_write=log.sync))
                advance(1)
                if stopping or ended_early:
                    break
            interrupted = stop.requested.name if stopping else None
        writer.wait()
        chosen = selection.choice.info() if selection is not None else None
        early = selection.choice.stop_reason() if selection and selection.choice.stopped else None
        if interrupted is None and (start < total or ended_early):
            log.write({"event": "run_end", "step": step,
                       "wall_s": round(time.perf_counter() - t0, 3),
                       "stopped": "patience" if ended_early else "steps",
                       **({"reason": early} if ended_early else {}),
                       **({"chosen": chosen} if chosen is not None else {})})
        return RunResult(run_dir=run_dir, last_metrics=last_record, step=max(step, start),
                         checkpoint=last_path, interrupted=interrupted, chosen=chosen,
                         stopped_early=early)
    finally:
        try:
            writer.wait()  # an error here is the run's own, or follows the one raised above
        finally:
            if log is not None:
                log.close()


def _build(cfg: RunConfig, data: TrainingData, device: torch.device | str,
           pretrained: dict[str, torch.Tensor] | None, rank: int, processes: int = 1
           ) -> TrainState:
    """build_state, then the networks compiled where train.compile asks for it."""
    state = build_state(cfg, data, device, pretrained, rank)
    if compile_wanted(cfg.train, device, processes):
        compile_networks_(state, compile_config(device))
    return state


def _rebuild(cfg: RunConfig, data: TrainingData, device: torch.device | str,
             pretrained: dict[str, torch.Tensor] | None, coll: Collective,
             selection: ModelSelection | None) -> TrainState:
    """A fresh state for a rollback before the first checkpoint: no validation yet either."""
    if selection is not None:
        selection.restore_({})
    return _build(cfg, data, device, pretrained, coll.rank, coll.world_size)


def _restore(state: TrainState, path: Path, payload: dict, rank: int,
             selection: ModelSelection | None) -> None:
    """A rollback's checkpoint into ``state``, and its model choice into ``selection``."""
    restore_rank_(state, path, payload, rank)
    if selection is not None:
        selection.restore_(payload)


def _guarded_step(state: TrainState, book, scfg: StepConfig, guard: DivergenceGuard,
                  learning: bool, sync=None, reference: bool = False) -> None:
    """One step (the production step, or with ``reference`` the readable one:
    lobsurf.agent.reference), then the divergence guard's device-side check."""
    if reference:
        reference_step(state, book, scfg, learning)
    else:
        train_step(state, book, scfg, learning=learning, sync=sync)
    guard.check_(state)


def _graph_enabled(cfg: RunConfig, device: torch.device | str, sync) -> bool:
    """train.cuda_graph on a device that can graph, one process (else eager, said once
    where it was asked for on CUDA)."""
    if not cfg.train.cuda_graph or torch.device(device).type != "cuda":
        return False
    if cfg.train.reference:
        print("train: CUDA graph off: train.reference runs the readable step eagerly",
              file=sys.stderr)
        return False
    why = graph_unsupported(device) or ("several processes (collectives inside the step)"
                                        if sync is not None else None)
    if why is not None:
        print(f"train: CUDA graph off: {why}; the step runs eagerly", file=sys.stderr)
    return why is None


def _graphed_step(state: TrainState, book, scfg: StepConfig, guard: DivergenceGuard,
                  device: torch.device | str) -> GraphedStep:
    """The learning step plus the guard's check as one graph over this state."""
    return GraphedStep(functools.partial(_guarded_step, state, book, scfg, guard, True),
                       (state, guard), step_generators(state), device)


def _bar_fields(record: dict[str, Any]) -> dict[str, str]:
    def fmt(v: Any, spec: str) -> str:
        return "-" if v is None or v != v else format(v, spec)

    return {"steps/s": fmt(record["steps_per_s"], ".1f"), "win": fmt(record["win_rate"], ".2f"),
            "hold": fmt(record["hold_fraction"], ".2f"), "pnl": fmt(record["net_pnl"], ",.0f")}
