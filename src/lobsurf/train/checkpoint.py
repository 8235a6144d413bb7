"""Checkpoints of a training run: everything a step reads, so a resume continues exactly.

One ``torch.save`` file per checkpoint under RUN/checkpoints/step_NNNNNNNN.pt, holding plain
types and tensors only (loadable with ``weights_only=True``):

    format, version    "lobsurf-train", 1
    step               steps completed
    config             RunConfig as a dict
    controllers        {name: value} of every controller, and the registry table
    online, target     network state dicts (normaliser statistics and noise buffers included)
    optimizer          Adam state dict
    replay             storage, priorities, ring pointer, fill count, generator state
    sim_state, sim_stats, env_generator    the simulator's cursors, positions, stats, RNG
    noise_generator, acting_generator      RNG states
    metric_sums        device metric sums not yet logged
    metrics_bytes      size of metrics.jsonl when the checkpoint was taken (a resume cuts
                       the file back to it: no duplicated or torn lines)
    meta               data summary, versions

Writing goes to a temporary file in the same folder, is flushed to disk, then renamed into
place, so a crash never leaves a half-written ``step_*.pt``; the newest ``keep`` are kept.
"""

from __future__ import annotations

import os
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from lobsurf.agent.controllers import controller_table
from lobsurf.agent.step import TrainState
from lobsurf.sim.state import SimState, SimStats

CHECKPOINT_FORMAT = "lobsurf-train"
CHECKPOINT_VERSION = 1
CHECKPOINT_DIR = "checkpoints"
_NAME = re.compile(r"^step_(\d{8})\.pt$")


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINT_DIR / f"step_{step:08d}.pt"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Finished checkpoints of a run, oldest first (temporary files are ignored)."""
    folder = run_dir / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def _cpu(tree: Any) -> Any:
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu().clone()
    if isinstance(tree, dict):
        return {k: _cpu(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_cpu(v) for v in tree)
    return tree


def _fields(obj: SimState | SimStats) -> dict[str, torch.Tensor]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def checkpoint_payload(state: TrainState, step: int, config: dict, metrics_bytes: int,
                       meta: dict) -> dict[str, Any]:
    return _cpu({
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "step": step,
        "config": config,
        "controllers": state.controllers.as_dict(),
        "controller_table": controller_table(),
        "online": state.online.state_dict(),
        "target": state.target.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "replay": state.replay.state_dict(),
        "sim_state": _fields(state.env.state),
        "sim_stats": _fields(state.env.stats),
        "env_generator": state.env.generator.get_state(),
        "noise_generator": state.noise_generator.get_state(),
        "acting_generator": state.acting_generator.get_state(),
        "metric_sums": state.metrics.as_dict(),
        "step_count": state.step_count,
        "metrics_bytes": metrics_bytes,
        "meta": meta,
    })


def save_checkpoint(run_dir: Path, state: TrainState, step: int, config: dict,
                    metrics_bytes: int, meta: dict, keep: int) -> Path:
    """Write step ``step``'s checkpoint atomically and prune to the newest ``keep``."""
    path = checkpoint_path(run_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        torch.save(checkpoint_payload(state, step, config, metrics_bytes, meta), fh)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)
    for old in list_checkpoints(run_dir)[:-keep]:
        old.unlink()
    return path


def load_payload(path: Path) -> dict[str, Any]:
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: not a lobsurf training checkpoint")
    if payload.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"{path}: checkpoint version {payload.get('version')} is not "
                         f"{CHECKPOINT_VERSION}")
    return payload


def restore_state_(state: TrainState, payload: dict[str, Any]) -> None:
    """Copy a checkpoint into a freshly built TrainState, in place."""
    state.online.load_state_dict(payload["online"])
    state.target.load_state_dict(payload["target"])
    state.optimizer.load_state_dict(payload["optimizer"])
    state.controllers.load_(payload["controllers"])
    state.replay.load_state_dict(payload["replay"])
    for name, value in payload["sim_state"].items():
        getattr(state.env.state, name).copy_(value)
    for name, value in payload["sim_stats"].items():
        getattr(state.env.stats, name).copy_(value)
    state.env.generator.set_state(payload["env_generator"])
    state.noise_generator.set_state(payload["noise_generator"])
    state.acting_generator.set_state(payload["acting_generator"])
    state.metrics.load_(payload["metric_sums"])
    state.step_count.copy_(payload["step_count"])
