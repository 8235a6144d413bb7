"""The per-rank part of a multi-process checkpoint, and a rank's restore from one.

Rank 0 writes the main file RUN/checkpoints/step_N.pt as a single-process run does (its
own replay, simulator and generators included, plus ``world_size``). Every other rank R
writes ``step_N.rankR.pt`` beside it, with its own complete-marker, holding only what it
owns: replay, simulator state and statistics, the simulator's, noise and acting generators
and its metric sums not yet logged. The shards are written before the main file (a
barrier between), so a verified main file always has its shards complete.

A resume with any number of processes takes networks, optimizer, controllers and the step
counter from the main file on every rank. Rank 0 takes its replay and simulator from the
main file; rank R > 0 takes its shard when there is one, and otherwise (the run grows,
e.g. 1 -> 2 processes) starts from a copy of rank 0's replay with its own freshly seeded
sampling generator and a fresh, rank-seeded simulator and generators. Shards of ranks
beyond the new world size (the run shrinks) are not read: their replay and episodes end.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lobsurf.agent.state import TrainState
from lobsurf.training.distributed.collective import Collective
from lobsurf.training.recovery.checkpoint import (CorruptCheckpoint, checkpoint_path, local_payload,
                                      rank_shard_path, restore_local_, restore_shared_,
                                      verify_checkpoint, write_marked)
from lobsurf.training.recovery.checkpoint_file import unpack_file

SHARD_FORMAT = "lobsurf-train-rank"
SHARD_VERSION = 1


def save_shard(run_dir: Path, state: TrainState, step: int, rank: int) -> Path:
    """Write rank ``rank``'s shard of step ``step`` and its marker atomically."""
    path = rank_shard_path(checkpoint_path(run_dir, step), rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_marked(path, {"format": SHARD_FORMAT, "version": SHARD_VERSION, "step": step,
                        "rank": rank, **local_payload(state)})
    return path


def load_shard(path: Path, step: int, rank: int) -> dict[str, Any]:
    """The verified shard at ``path``; ValueError when it belongs to another step or rank."""
    verify_checkpoint(path)
    payload = unpack_file(path)
    if (not isinstance(payload, dict) or payload.get("format") != SHARD_FORMAT
            or payload.get("version") != SHARD_VERSION):
        raise ValueError(f"{path.name}: not a lobsurf rank shard of version {SHARD_VERSION}")
    if payload["step"] != step or payload["rank"] != rank:
        raise ValueError(f"{path.name}: holds step {payload['step']} rank {payload['rank']}")
    return payload


def restore_rank_(state: TrainState, path: Path, payload: dict[str, Any], rank: int) -> str:
    """Copy main checkpoint ``path`` (``payload``) and this rank's shard into a freshly built
    ``state``; returns where the local part came from ("main", "shard" or "fresh")."""
    restore_shared_(state, payload)
    if rank == 0:
        restore_local_(state, payload)
        return "main"
    shard = rank_shard_path(path, rank)
    try:
        restore_local_(state, load_shard(shard, int(payload["step"]), rank))
        return "shard"
    except (OSError, CorruptCheckpoint, ValueError, RuntimeError, EOFError) as exc:
        if shard.exists():
            print(f"warning: rank {rank}: ignoring {shard.name} ({exc})", file=sys.stderr)
    # a rank the checkpoint did not have: rank 0's transitions, this rank's own draws
    own_sampling = state.replay.generator.get_state()
    state.replay.load_state_dict(payload["replay"])
    state.replay.generator.set_state(own_sampling)
    return "fresh"


def save_all_ranks(run_dir: Path, state: TrainState, step: int, collective: Collective,
                   save_main: Callable[[], Path]) -> Path:
    """Every rank's part of step ``step``'s checkpoint: shards first, then (after a barrier)
    rank 0's main file through ``save_main``; returns the main file's path on every rank."""
    if not collective.is_main:
        save_shard(run_dir, state, step, collective.rank)
    collective.barrier()
    return save_main() if collective.is_main else checkpoint_path(run_dir, step)
