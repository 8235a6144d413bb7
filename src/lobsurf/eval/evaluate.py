"""``evaluate_policies``: one deterministic sweep of several policies → one JSON-ready dict.

The shape (``lobsurf eval`` prints it with ``--json``; a trained agent joins as one more
policy)::

    {"policies": {"hold": {metric: value, ...}, "imbalance": {...}, ...},
     "split":    {"mode", "rows", "decision_rows", "ranges", "dropped_rows", ...caller's split info},
     "settings": {"sim": {...SimConfig}, "num_envs", "steps", "steps_per_env",
                  "metrics": {...}, ...caller's}}

``steps`` counts decision steps over all envs (= rows swept, = each policy's ``steps``);
``steps_per_env`` is the sweep's length (the longest env's piece). When ``optimal`` (the
exact optimum, ``lobsurf.baselines.optimal``) is among the policies, every policy's
metrics get ``capture``: its net PnL as a fraction of the optimum's (None when the
optimum is not positive); when ``bayes`` (the causal ceiling of a synthetic store,
``lobsurf.baselines.bayes``) is, ``capture_bayes``: the same fraction of the ceiling's.

Metrics are defined in docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from lobsurf.backtest.metrics import BacktestRecord, MetricsConfig, compute_metrics
from lobsurf.backtest.policy import Policy
from lobsurf.backtest.sweep import SweepConfig, Tiling, sweep
from lobsurf.data.dataset import BookTensors
from lobsurf.data.labels import LabelConfig
from lobsurf.sim.config import SimConfig


#: the split modes of ``eval_split``.
SPLIT_MODES = ("heldout", "all")
#: sweeps: warn when fewer rows than this are swept (the metrics' intervals are wide).
WARN_MIN_ROWS = 1000
#: share of rows before the cut of the held-out split (as pretraining's default).
DEFAULT_TRAIN_FRACTION = 0.8


@dataclass
class EvalSplit:
    """Attributes:
    rows: [R] int64 sorted decision rows to sweep.
    train_rows: [n] int64 rows that fitted baselines (and a trained agent) may learn from;
        with mode "all" the same rows as ``rows`` (in-sample).
    info: JSON-ready description, the ``"split"`` part of the result.
    """

    rows: torch.Tensor
    train_rows: torch.Tensor
    info: dict[str, Any]


def eval_split(book: BookTensors, window: int, mode: str = "heldout",
               horizons: Sequence[int] = LabelConfig().horizons_snapshots,
               train_fraction: float = DEFAULT_TRAIN_FRACTION) -> EvalSplit:
    """The rows an evaluation sweeps, and the rows fitting may use.

    Args:
        book: the device dataset.
        window: K, snapshots per observation window.
        mode: "heldout": the end rows after the purged time split of pretraining
            (``lobsurf.data.split.time_split``: purged by the window and the longest
            label horizon); "all": every row with a full window (fitting is in-sample).
        horizons: label horizons (snapshots) the split is purged by.
        train_fraction: target share of rows before the cut.

    Raises:
        lobsurf.errors.UserError: the book is too small to split.
    """
    from lobsurf.data.split import time_split

    if mode == "heldout":
        split = time_split(book, window, min(horizons), max(horizons), train_fraction)
        info = {"mode": mode, "cut_row": split.cut_row, "train_fraction": train_fraction,
                "purge_horizons": list(horizons), "train_rows": len(split.train_rows)}
        return EvalSplit(split.test_rows, split.train_rows, info)
    if mode != "all":
        raise ValueError(f"unknown split mode {mode!r}; choose one of {', '.join(SPLIT_MODES)}")
    t = torch.arange(len(book), device=book.device)
    rows = t[t - (window - 1) >= book.segment_start[book.segment_of_row]]
    return EvalSplit(rows, rows, {"mode": mode, "fitted_in_sample": True})


def evaluate_policies(book: BookTensors, split_rows: torch.Tensor, policies: dict[str, Policy],
                      sim_cfg: SimConfig, sweep_cfg: SweepConfig = SweepConfig(),
                      metrics_cfg: MetricsConfig = MetricsConfig(),
                      split_info: dict[str, Any] | None = None,
                      settings: dict[str, Any] | None = None,
                      progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Sweep ``policies`` over ``split_rows`` together and summarise each.

    Args:
        book: the device dataset.
        split_rows: [R] int64 sorted decision rows, e.g. ``time_split(...).test_rows``.
        policies: name → Policy; every policy trades the same rows on its own envs.
        sim_cfg: simulator settings (``stride`` rows per decision).
        sweep_cfg: environments per policy.
        metrics_cfg: bootstrap and annualisation settings.
        split_info: extra keys for ``"split"`` (e.g. mode, cut_row, train_fraction).
        settings: extra keys for ``"settings"`` (e.g. store, device, baseline settings).
        progress: called with 1 after every sweep step.

    Returns:
        The dict of the module docstring.
    """
    records, tiling = sweep(book, split_rows, policies, sim_cfg, sweep_cfg, progress)
    return summarise(records, tiling, sim_cfg, metrics_cfg, split_info, settings)


#: metric → the policy whose net PnL it measures every policy's against: ``capture`` of the
#: exact optimum, ``capture_bayes`` of the causal ceiling (synthetic stores).
CAPTURE_REFERENCES = {"capture": "optimal", "capture_bayes": "bayes"}


def add_capture(metrics: dict[str, dict[str, Any]]) -> None:
    """Add ``capture`` = net_pnl / the optimum's net_pnl and ``capture_bayes`` = net_pnl /
    the causal ceiling's to every policy's metrics (in place), each where its reference was
    swept; None where the reference's net PnL is not > 0."""
    for key, reference in CAPTURE_REFERENCES.items():
        if reference not in metrics:
            continue
        best = metrics[reference]["net_pnl"]
        for m in metrics.values():
            m[key] = m["net_pnl"] / best if best > 0 else None


def summarise(records: dict[str, BacktestRecord], tiling: Tiling, sim_cfg: SimConfig,
              metrics_cfg: MetricsConfig = MetricsConfig(),
              split_info: dict[str, Any] | None = None,
              settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """``sweep``'s records → the dict of the module docstring (callers that keep the
    per-step records, e.g. ``lobsurf report``, sweep themselves and summarise here)."""
    metrics = {name: compute_metrics(rec, metrics_cfg) for name, rec in records.items()}
    add_capture(metrics)
    return {
        "policies": metrics,
        "split": {**(split_info or {}), "rows": tiling.swept_rows,
                  "decision_rows": len(tiling.rows), "ranges": tiling.ranges,
                  "dropped_rows": tiling.dropped},
        "settings": {**(settings or {}), "sim": asdict(sim_cfg), "num_envs": tiling.num_envs,
                     "steps": len(tiling.rows), "steps_per_env": tiling.steps,
                     "metrics": asdict(metrics_cfg)},
    }

