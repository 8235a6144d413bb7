"""Walk-forward evaluation of a run's recipe: fold k trains on segments 0..k-1 and trades
segment k, for k = 1..K (an expanding window rolled forward one segment at a time); for a
24/7 market the segments are K + 1 equal blocks of rows (``lobsurf.data.folds``).

Each fold is a training run of its own, RUN/walk_forward/fold_k/, with the run's config
(``train.steps`` = the fold's steps). Its training book is the rows of segments 0..k-1
before the same purge gap as a run's own split (rows < start of segment k - longest label
horizon, ``lobsurf.training.data``); it is then swept, beside every baseline, over the windows
of segment k (``lobsurf.eval.evaluate``). A fold whose result.json exists is finished and
skipped; one with a checkpoint but no result resumes training from it. The summary,
RUN/walk_forward/summary.json, holds every fold's metrics and, per policy and metric, the
spread over folds (mean, sd, min, max).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lobsurf.backtest.sweep import SweepConfig, tile_rows
from lobsurf.baselines.policies import BaselineConfig, make_baselines
from lobsurf.data.dataset import BookTensors
from lobsurf.data.folds import fold_block, max_folds
from lobsurf.data.split import TimeSplit
from lobsurf.errors import UserError
from lobsurf.eval.evaluate import evaluate_policies
from lobsurf.sim.env import BatchedLobEnv
from lobsurf.training.config import RunConfig
from lobsurf.training.data import TrainingData, head_rows
from lobsurf.training.recovery.run_folder import is_run_folder, prepare_run_folder

WALK_FORWARD_DIR = "walk_forward"
SUMMARY_NAME = "summary.json"
FOLD_RESULT_NAME = "result.json"


@dataclass(frozen=True)
class WalkForwardConfig:
    """How many folds, how long each trains, and how each is evaluated."""

    folds: int
    """K: folds 1..K (fold k trains on segments 0..k-1, trades segment k)."""
    fold_steps: int | None = None
    """training steps per fold; None = the run's train.steps."""
    num_envs: int = SweepConfig().num_envs
    """environments of each fold's evaluation sweep."""
    policy: str = "greedy"
    """the agent's acting policy in the sweeps (greedy | thompson | pi)."""

    def __post_init__(self) -> None:
        if self.folds < 1:
            raise ValueError(f"--walk-forward needs at least 1 fold, got {self.folds}")
        if self.fold_steps is not None and self.fold_steps < 1:
            raise ValueError(f"--fold-steps must be >= 1, got {self.fold_steps}")


def fold_data(cfg: RunConfig, book: BookTensors, store_path: Path, k: int,
              folds: int | None = None) -> TrainingData:
    """The training data of fold k of ``folds``: blocks 0..k-1 to train on, block k held
    out (blocks: segments, or equal runs of rows for a 24/7 market: lobsurf.data.folds).

    The split's test_rows are the windows inside block k (each inside its segment, with its
    shortest label horizon inside it too); train_rows end before the purge gap (t + max
    horizon < start of block k), as in ``lobsurf.data.split.time_split``. ``folds``
    None: as many as the book's segments give.
    """
    start, stop = fold_block(book, k, max_folds(book) if folds is None else folds)
    t = torch.arange(len(book), device=book.device)
    seg = book.segment_of_row
    horizons = cfg.labels.horizons_snapshots
    usable = ((t - cfg.sim.window + 1 >= book.segment_start[seg])
              & (t + min(horizons) < book.segment_stop[seg]))
    train = usable & (t + max(horizons) < start)
    test = usable & (t - cfg.sim.window + 1 >= start) & (t < stop)
    split = TimeSplit(cut_row=start, train_rows=t[train], test_rows=t[test])
    if len(split.train_rows) == 0 or len(split.test_rows) == 0:
        raise UserError(f"walk-forward fold {k}: segments 0..{k - 1} leave "
                        f"{len(split.train_rows)} training and segment {k} leaves "
                        f"{len(split.test_rows)} test windows (window {cfg.sim.window})")
    train_stop = start - cfg.labels.max_horizon
    return TrainingData(store_path=store_path, book=book, split=split, train_stop=train_stop,
                        train_book=head_rows(book, train_stop))


def spread(values: list[float]) -> dict[str, float | None]:
    """mean, sd (ddof 1; None with one value), min and max of the finite values."""
    x = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if len(x) == 0:
        return {"mean": None, "sd": None, "min": None, "max": None, "folds": 0}
    return {"mean": float(x.mean()), "sd": float(x.std(ddof=1)) if len(x) > 1 else None,
            "min": float(x.min()), "max": float(x.max()), "folds": len(x)}


def summarise_folds(folds: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """policy → metric → spread over folds, for every numeric (non-interval) metric."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in folds[0]["policies"]:
        keys = [k for k, v in folds[0]["policies"][name].items()
                if isinstance(v, (int, float)) or v is None]
        out[name] = {k: spread([f["policies"][name].get(k) for f in folds]) for k in keys}
    return out


def _train_fold(cfg: RunConfig, fold_dir: Path, data: TrainingData, device: str,
                progress: bool) -> None:
    from lobsurf.training.recovery.checkpoint import list_checkpoints, load_payload
    from lobsurf.training.run.loop import train

    resume = is_run_folder(fold_dir) and bool(list_checkpoints(fold_dir))
    if resume and int(load_payload(list_checkpoints(fold_dir)[-1])["step"]) >= cfg.train.steps:
        return  # trained; only its evaluation is missing
    if not resume:
        prepare_run_folder(fold_dir, overwrite=True)  # a fold that never checkpointed restarts
    train(cfg, fold_dir, data, device, resume=resume, progress=progress,
          init_note=f"walk-forward fold of {fold_dir.parent.parent}")


def _evaluate_fold(fold_dir: Path, data: TrainingData, k: int, wf: WalkForwardConfig,
                   device: str, progress: bool) -> dict[str, Any]:
    from lobsurf.progress import step_progress
    from lobsurf.eval.run import RUN_BASELINES, agent_policy, load_run

    cfg, payload, ckpt = load_run(fold_dir)
    rows = data.split.test_rows
    env = BatchedLobEnv(data.book, 1, cfg.sim)
    base = BaselineConfig(momentum_lookback_rows=min(BaselineConfig().momentum_lookback_rows,
                                                     cfg.sim.window - 1))
    policies = make_baselines(RUN_BASELINES, env, base, data.split.train_rows, rows, wf.num_envs)
    policies["agent"] = agent_policy(cfg, payload, env, wf.policy, device)
    info = {"mode": "walk_forward", "fold": k, "train_segments": [0, k], "test_segment": k,
            "train_stop_row": data.train_stop, "train_rows": len(data.split.train_rows)}
    settings = {"run": str(fold_dir), "checkpoint": ckpt.name, "trained_steps": payload["step"],
                "policy": wf.policy, "device": device}
    steps = tile_rows(data.book, rows, cfg.sim, wf.num_envs).steps
    # the bar starts once every policy is built (a fit cannot draw inside it)
    with step_progress(steps, f"fold {k} eval", progress) as advance:
        return evaluate_policies(data.book, rows, policies, cfg.sim, SweepConfig(wf.num_envs),
                                 split_info=info, settings=settings, progress=advance)


def walk_forward(run_dir: Path, cfg: RunConfig, book: BookTensors, store_path: Path,
                 wf: WalkForwardConfig, device: str = "cpu", progress: bool = False,
                 on_fold: Callable[[int, str], None] | None = None) -> dict[str, Any]:
    """Train and evaluate folds 1..K under ``run_dir``/walk_forward (see module doc).

    Args:
        run_dir: the run whose config is the recipe.
        cfg: that config.
        book: the run's book (its store, its instrument) on ``device``.
        store_path: the store's folder (recorded in each fold's data summary).
        wf: folds, steps per fold, evaluation settings.
        device: torch device.
        progress: progress bars of each fold's training.
        on_fold: called with (k, "skipped" | "trained") after each fold (messages).

    Returns:
        The summary (also written to walk_forward/summary.json).
    """
    limit = max_folds(book)
    if limit is not None and wf.folds > limit:
        raise UserError(f"--walk-forward {wf.folds}: the store has {book.num_segments} "
                        f"segment(s), so at most {limit} fold(s)")
    steps = wf.fold_steps or cfg.train.steps
    fold_cfg = replace(cfg, train=replace(cfg.train, steps=steps))
    root = run_dir / WALK_FORWARD_DIR
    root.mkdir(exist_ok=True)
    folds = []
    for k in range(1, wf.folds + 1):
        fold_dir = root / f"fold_{k}"
        result_path = fold_dir / FOLD_RESULT_NAME
        if result_path.is_file():
            folds.append(json.loads(result_path.read_text()))
            if on_fold:
                on_fold(k, "skipped")
            continue
        data = fold_data(fold_cfg, book, store_path, k, wf.folds)
        _train_fold(fold_cfg, fold_dir, data, device, progress)
        result = _evaluate_fold(fold_dir, data, k, wf, device, progress)
        fold = {"fold": k, "train_segments": [0, k], "test_segment": k, **result}
        result_path.write_text(json.dumps(fold))
        folds.append(fold)
        if on_fold:
            on_fold(k, "trained")
    summary = {"folds": folds, "fold_steps": steps, "spread": summarise_folds(folds)}
    (root / SUMMARY_NAME).write_text(json.dumps(summary))
    return summary
