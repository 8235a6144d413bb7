"""``build_report(run_dir)``: RUN/report/index.html and its PNG figures.

The page, top to bottom: what is missing (a run still training), the held-out metrics table
(agent and every baseline, with the bootstrap interval of PnL per trade and each policy's
capture of the exact optimum), the equity and drawdown curves, the action distribution, the
agent's position over a sample of the held-out period, the training curves from
metrics.jsonl, validation and the model choice (training beside validation win rate, the
chosen policy and why), the walk-forward folds (when ``lobsurf eval RUN --walk-forward K``
has run), and the run's config and data summary.

The held-out part sweeps the run's chosen policy once (``lobsurf.eval.run``, the same
sweep as ``lobsurf eval RUN``: the checkpoint chosen on validation, hold when none beat it,
the last checkpoint without validation) and keeps its per-step records for the plots; its
result is written beside the page as heldout.json. A seed group (``lobsurf train --seeds
N``) gets the verdict page of ``lobsurf.report.seeds`` instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lobsurf.backtest.sweep import SweepConfig
from lobsurf.errors import UserError
from lobsurf.report import figures
from lobsurf.report.page import (
    image,
    key_value_table,
    metrics_table,
    page,
    paragraph,
    section,
    spread_table,
)
from lobsurf.report.run_data import RunData, load_run_data
from lobsurf.report.units import CURRENCY, pnl_unit

REPORT_DIR = "report"
INDEX_NAME = "index.html"
HELDOUT_NAME = "heldout.json"


@dataclass(frozen=True)
class ReportConfig:
    """What the report evaluates and draws."""

    store: str | None = None
    """another store to evaluate on (None: the run's own held-out rows)."""
    policy: str = "greedy"
    """the agent's acting policy in the held-out sweep (greedy | thompson | pi)."""
    device: str = "cpu"
    """torch device of the held-out sweep."""
    num_envs: int = SweepConfig().num_envs
    """environments of the held-out sweep."""
    sample_steps: int = 400
    """held-out steps in the position-over-mid-price figure."""
    evaluate: bool = True
    """sweep the chosen policy (False: training curves only)."""

    def __post_init__(self) -> None:
        if self.num_envs < 1 or self.sample_steps < 1:
            raise ValueError("num_envs and sample_steps must be >= 1")


@dataclass
class Report:
    """Attributes:
    path: the index.html written.
    figures: PNG files written, in page order.
    notes: what the report could not show, and why.
    heldout: the held-out evaluation (``lobsurf eval RUN --json``'s dict), or None.
    """

    path: Path
    figures: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    heldout: dict[str, Any] | None = None


def _mid_price(book, rows) -> np.ndarray:
    mid2 = (book.bid_px_ticks[rows, 0].double() + book.ask_px_ticks[rows, 0].double()).cpu()
    return (mid2.numpy() / 2) * book.tick_size + book.price_origin_fixed / 1e9


def _heldout(data: RunData, cfg: ReportConfig, out: Path, report: Report,
             sweep_progress: Callable[[int], Any]) -> list[str]:
    """Sweep the chosen policy; its sections (table, equity, actions, position)."""
    from lobsurf.eval.run import chosen_line, prepare_run_evaluation

    plan = prepare_run_evaluation(data.run_dir, cfg.store, cfg.policy, "heldout", cfg.device,
                                  cfg.num_envs)
    with sweep_progress(plan.steps) as advance:
        result, records, tiling = plan.run_with_records(advance)
    report.heldout = result
    (out / HELDOUT_NAME).write_text(json.dumps(result, indent=1))
    settings, split = result["settings"], result["split"]
    where = "the run's own held-out rows" if settings["own_store"] else settings["store"]
    intro = paragraph(
        f"{split['rows']:,} rows of {where} ({split['mode']} split, {split['ranges']} "
        f"contiguous range(s)), swept once by every policy; agent = {settings['checkpoint']} "
        f"({settings['trained_steps'] or 0:,} steps trained, {settings['policy']} acting; "
        f"{chosen_line(result['chosen'])}). "
        "pnl_per_trade_ci: percentile bootstrap interval of the mean PnL per trade. capture: "
        "net PnL as a share of baseline optimal, the exact best attainable on these rows "
        "(dynamic programming over the position; it reads the future, as does oracle).")
    equity = figures.equity_figure(records, out / "equity.png", _unit(data, result))
    actions = figures.actions_figure(data, records, tuple(result["settings"]["sim"]
                                                           ["order_sizes_lots"]), out / "actions.png")
    position = figures.position_figure(_mid_price(plan.book, tiling.rows), records["agent"],
                                       plan.sim.latency_rows, cfg.sample_steps,
                                       out / "position.png")
    report.figures += [equity, actions, position]
    return [
        section("Held-out metrics", intro, metrics_table(result["policies"])),
        section("Equity and drawdown", image(equity, "equity and drawdown")),
        section("Actions", image(actions, "action distribution", (
            "metrics.jsonl logs no per-action counts: over training it has the Hold and gated "
            "shares; the distribution of every action is taken from the held-out sweep of "
            "the final checkpoint."))),
        section("Position over the mid-price", image(position, "position and fills", (
            "Fills are marked at the mid of the fill row (decision row + latency); the "
            "position is the agent's after each step."))),
    ]


def _validation(data: RunData, out: Path, report: Report) -> str:
    """Training beside validation, and the chosen policy with its reason."""
    from lobsurf.training.selection.choice import NO_EDGE

    fig = figures.validation_figure(data, out / "validation.png", _unit(data, report.heldout))
    report.figures.append(fig)
    chosen = data.chosen
    if chosen is None:
        what = "no policy chosen yet"
    elif chosen["policy"] == "hold":
        what = f"chosen policy: hold ({NO_EDGE}): {chosen['reason']}"
    else:
        what = f"chosen policy: the checkpoint of step {chosen['step']:,}, which {chosen['reason']}"
    text = paragraph(
        f"{len(data.validations)} validations: the greedy agent (what lobsurf eval trades) "
        "swept over the purged validation slice at the end of the training rows, and over as "
        "many of the simulator's last training rows. A training win rate far above the "
        "validation one is memorised, not learned. " + what + ".")
    return section("Validation and model choice", image(fig, "training vs validation"), text)


def _unit(data: RunData, heldout: dict[str, Any] | None) -> str:
    """The unit of the run's PnL: the evaluated store's currency (its config's store and
    instrument without a held-out evaluation)."""
    config = ((data.start or {}).get("config") or {}).get("data") or {}
    own = heldout is None or heldout["settings"]["own_store"]
    store = heldout["settings"]["store"] if heldout is not None else config.get("store")
    if not store:
        return CURRENCY
    return pnl_unit(store, (config.get("instrument_id") or None) if own else None)


def _walk_forward(summary: dict[str, Any], out: Path, report: Report) -> str:
    fig = figures.walk_forward_figure(summary, out / "walk_forward.png")
    report.figures.append(fig)
    text = paragraph(f"{len(summary['folds'])} folds: fold k trains on segments 0..k-1 "
                     f"({summary['fold_steps']:,} steps) and is evaluated on segment k. Each "
                     "cell: mean ± sd over folds, and min .. max.")
    return section("Walk-forward", text, image(fig, "walk-forward folds"),
                   spread_table(summary["spread"]))


def _run_facts(data: RunData, heldout: dict[str, Any] | None) -> str:
    parts = []
    start = data.start or {}
    if start.get("data"):
        parts.append("<h3>Data</h3>" + key_value_table(start["data"], "data-summary"))
    facts = {"device": start.get("device"), **(start.get("versions") or {}),
             "metrics records": len(data.metrics), "checkpoints": len(data.checkpoints),
             "finished": data.finished}
    parts.append("<h3>Run</h3>" + key_value_table(facts, "run-facts"))
    if heldout is not None:
        parts.append("<h3>Held-out split</h3>" + key_value_table(heldout["split"], "split"))
    if data.config_text:
        import html

        parts.append(f"<h3>config.toml</h3><pre>{html.escape(data.config_text)}</pre>")
    return section("Run config and data", *parts)


def build_report(run_dir: Path, cfg: ReportConfig = ReportConfig(),
                 sweep_progress: Callable[[int], Any] | None = None) -> Report:
    """Write RUN/report/index.html and its figures (see module doc).

    Args:
        run_dir: a lobsurf training run (finished or still training).
        cfg: what to evaluate and draw.
        sweep_progress: ``steps -> context manager yielding advance(n)`` (e.g. a bound
            ``lobsurf.progress.step_progress``); None: silent.

    Returns:
        The Report (page path, figures, notes).
    """
    from contextlib import nullcontext

    data = load_run_data(run_dir)
    out = run_dir / REPORT_DIR
    out.mkdir(exist_ok=True)
    report = Report(path=out / INDEX_NAME, notes=list(data.notes))
    progress = sweep_progress or (lambda steps: nullcontext(lambda n=1, **f: None))
    body: list[str] = []
    if data.checkpoints and cfg.evaluate:
        try:
            body += _heldout(data, cfg, out, report, progress)
        except UserError as exc:  # e.g. a checkpoint still being written, a store moved
            report.notes.append(f"no held-out evaluation: {exc}")
    elif data.checkpoints:
        report.notes.append("held-out evaluation skipped (--no-eval)")
    if data.metrics:
        train_fig = figures.training_figure(data, out / "training.png")
        report.figures.append(train_fig)
        body.append(section("Training curves", image(train_fig, "training curves"), paragraph(
            f"{len(data.metrics)} log records up to step {data.metrics[-1]['step']:,}; each "
            "point is the mean over one log interval (docs/metrics.md).", "caption")))
        if data.validations:
            body.append(_validation(data, out, report))
        if report.heldout is None:  # the action panel still has the training half
            actions = figures.actions_figure(data, None, _order_sizes(data), out / "actions.png")
            report.figures.append(actions)
            body.append(section("Actions", image(actions, "action distribution")))
    if data.walk_forward:
        body.append(_walk_forward(data.walk_forward, out, report))
    body.append(_run_facts(data, report.heldout))
    notes = (section("Missing", *(paragraph(n, "note") for n in report.notes))
             if report.notes else "")
    report.path.write_text(page(f"lobsurf report: {run_dir.name}", [notes, *body]))
    return report


def _order_sizes(data: RunData) -> tuple[int, ...]:
    sim = ((data.start or {}).get("config") or {}).get("sim") or {}
    from lobsurf.sim.config import SimConfig

    return tuple(sim.get("order_sizes_lots", SimConfig().order_sizes_lots))
