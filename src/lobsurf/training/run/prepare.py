"""A run's pieces, prepared before its first step, and where its loop starts.

``prepare_run`` applies the fees to the config (the run's, else the store's, else the
default: lobsurf.sim.fees; config.toml keeps them), builds the state (compiled where
``train.compile`` asks), the divergence guard, the checkpoint writer (one process: files
written beside the loop), the validation and model choice (with a validation slice) and
the metrics log: a new run writes its config.toml and the ``run_start`` record, a resumed
run opens its log, a rank other than 0 writes none. They travel together as a
``TrainingRun``; a rollback replaces its state.

``starting_point`` is where the loop starts: step 0 of a new run, or a resumed run's newest
complete checkpoint (lobsurf.training.recovery.resume). A run that ``train.patience`` ended
stays ended (and says so again after its resume). Every rank then takes rank 0's networks
and controllers.
"""

from __future__ import annotations

import dataclasses
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import lobsurf
from lobsurf.agent.controllers import controller_table
from lobsurf.agent.state import StepConfig, TrainState
from lobsurf.devices import device_name
from lobsurf.errors import UserError
from lobsurf.sim.fees import resolve_fees
from lobsurf.training.config import RunConfig, run_config_to_dict, run_config_to_toml
from lobsurf.training.data import TrainingData
from lobsurf.training.distributed.collective import Collective, state_tensors
from lobsurf.training.faults.guard import DivergenceGuard
from lobsurf.training.recovery.checkpoint import CheckpointWriter
from lobsurf.training.recovery.rank_shards import restore_rank_
from lobsurf.training.recovery.resume import resume_from_checkpoint
from lobsurf.training.recovery.run_folder import CONFIG_NAME, METRICS_NAME, MetricsLog, NullLog
from lobsurf.training.run.state import build_run_state, step_config
from lobsurf.training.selection.validate import ModelSelection
from lobsurf.training.speed.compile import compile_config, compile_guard_, compiled_kernels
from lobsurf.training.speed.cuda_graph import GraphedStep, graph_enabled


@dataclass
class TrainingRun:
    """Everything the loop works with (module doc)."""

    cfg: RunConfig
    """the run's config, with the fees it pays."""
    run_dir: Path
    data: TrainingData
    device: torch.device | str
    pretrained: dict[str, torch.Tensor] | None
    coll: Collective
    """this process's rank of the run (one process: a local one)."""
    state: TrainState
    """replaced by a rollback before the first checkpoint."""
    scfg: StepConfig
    guard: DivergenceGuard
    writer: CheckpointWriter
    selection: ModelSelection | None
    """validation and model choice (None: no validation slice)."""
    log: MetricsLog | NullLog
    meta: dict[str, Any]
    """data summary, fees, versions, device: run_start's record and every checkpoint's."""
    config_dict: dict[str, Any]
    graph_on: bool
    """the learning step replays a CUDA graph (lobsurf.training.speed.cuda_graph)."""
    graphed: GraphedStep | None = None
    """that graph once captured (None again after a rollback: captured anew)."""

    @property
    def sync(self) -> Collective | None:
        """The collectives inside the step (None: one process)."""
        return self.coll if self.coll.active else None

    def rebuild(self) -> TrainState:
        """A fresh state for a rollback before the first checkpoint: no validation yet
        either."""
        if self.selection is not None:
            self.selection.restore_({})
        return build_run_state(self.cfg, self.data, self.device, self.pretrained,
                               self.coll.rank, self.coll.world_size)

    def restore(self, state: TrainState, path: Path, payload: dict) -> None:
        """A rollback's checkpoint into ``state``, and its model choice into the selection."""
        restore_rank_(state, path, payload, self.coll.rank)
        if self.selection is not None:
            self.selection.restore_(payload)

    def close(self) -> None:
        try:
            self.writer.wait()  # an error here is the run's own, or follows one raised before
        finally:
            self.log.close()


@dataclass
class Position:
    """Where the loop stands."""

    start: int
    """the step the loop started from (0, or the resumed checkpoint's)."""
    total: int
    """the step it runs to: train.steps (the start for a run that patience ended)."""
    step: int
    rollbacks: int = 0
    """rollbacks so far, the resumed run's included."""
    checkpoint: Path | None = None
    """the newest checkpoint written or resumed from."""
    fresh_bytes: int | None = None
    """metrics.jsonl's size after run_start: a rollback before the first checkpoint cuts
    back to it (None for a resumed run, which always has a checkpoint)."""
    kept_bytes: int = 0
    """end of the newest rollback record: a later rollback to the same checkpoint keeps it."""
    ended_early: bool = False
    """train.patience ended the run."""


def prepare_run(cfg: RunConfig, run_dir: Path, data: TrainingData,
                device: torch.device | str, pretrained: dict[str, torch.Tensor] | None,
                init_note: str, coll: Collective, resume: bool) -> TrainingRun:
    """The run's pieces before its first step (module doc)."""
    if cfg.train.reference and coll.active:
        raise UserError("train.reference runs in one process (the readable step has no "
                        "collectives); drop --gpus or train.reference")
    fees = resolve_fees(cfg.sim, data.book)
    cfg = dataclasses.replace(cfg, sim=fees.applied_to(cfg.sim))
    state = build_run_state(cfg, data, device, pretrained, coll.rank, coll.world_size)
    config_dict = run_config_to_dict(cfg)
    meta = {"data": data.summary(), "fees": fees.record(), "versions": versions(),
            "device": device_name(device), "init": init_note, "world_size": coll.world_size}
    guard = DivergenceGuard(device)
    if compiled_kernels(state):
        compile_guard_(guard, compile_config(device))
    selection = (ModelSelection(cfg, data, device, run_dir, config_dict, sweeps=coll.is_main)
                 if data.validation is not None else None)
    sync = coll if coll.active else None
    return TrainingRun(
        cfg=cfg, run_dir=run_dir, data=data, device=device, pretrained=pretrained, coll=coll,
        state=state, scfg=step_config(cfg), guard=guard,
        writer=CheckpointWriter(background=coll.world_size == 1), selection=selection,
        log=_open_log(cfg, run_dir, config_dict, meta, coll, resume), meta=meta,
        config_dict=config_dict,
        graph_on=graph_enabled(cfg, device, sync))


def versions() -> dict[str, str]:
    """The versions a run records: lobsurf, torch, python, numpy, CUDA."""
    return {"lobsurf": lobsurf.__version__, "torch": str(torch.__version__),
            "python": platform.python_version(), "numpy": np.__version__,
            "cuda": str(torch.version.cuda or "none")}


def _mirror(cfg: RunConfig, run_dir: Path):
    """The TensorBoard mirror of the metrics (RUN/tb) when train.tensorboard is on."""
    if not cfg.train.tensorboard:
        return None
    from lobsurf.telemetry.tensorboard import TB_DIR, TensorBoardLog

    return TensorBoardLog(run_dir / TB_DIR)


def _open_log(cfg: RunConfig, run_dir: Path, config_dict: dict[str, Any],
              meta: dict[str, Any], coll: Collective, resume: bool) -> MetricsLog | NullLog:
    """Rank 0's metrics log (a new run: with its config.toml and run_start record)."""
    if not coll.is_main:
        return NullLog()
    if resume:
        return MetricsLog(run_dir / METRICS_NAME, mirror=_mirror(cfg, run_dir))
    try:
        (run_dir / CONFIG_NAME).write_text(run_config_to_toml(cfg))
    except OSError as exc:
        raise UserError(f"cannot write {run_dir / CONFIG_NAME}: {exc.strerror or exc}") from exc
    log = MetricsLog(run_dir / METRICS_NAME, mirror=_mirror(cfg, run_dir))
    log.write({"event": "run_start", "config": config_dict,
               "controllers": controller_table(), **meta})
    return log


def starting_point(run: TrainingRun, resume: bool) -> Position:
    """Where the loop starts (module doc)."""
    if resume:
        restore_choice = run.selection.restore_ if run.selection is not None else None
        found = resume_from_checkpoint(run.state, run.run_dir, run.log, run.cfg.train.steps,
                                       run.coll.rank, restore_choice)
        at = Position(start=found.step, total=run.cfg.train.steps, step=found.step,
                      rollbacks=found.rollbacks, checkpoint=found.checkpoint)
    else:
        at = Position(start=0, total=run.cfg.train.steps, step=0, fresh_bytes=run.log.size())
    if run.selection is not None and run.selection.choice.stopped:
        at.total, at.ended_early = at.start, True
    run.coll.broadcast_(state_tensors(run.state.online, run.state.target,
                                      run.state.controllers))
    return at
