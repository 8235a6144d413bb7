"""The report of a seed group (``lobsurf train --seeds N``): the verdict over seeds on one
page, RUN/report/index.html (self-contained, as a single run's).

It sweeps every seed's chosen policy and the baselines once
(``lobsurf.eval.seed_verdict``, the sweep of ``lobsurf eval RUN``), writes the result
beside the page as verdict.json, and shows: the verdict (IQM and mean of net PnL and
capture, of the exact optimum and, where the evaluation has baseline:bayes, of that
ceiling, with their stratified-bootstrap intervals; the probability that the agent beats
each baseline); each seed's learning over training from its validation records
(validation capture against the exact optimum and, where the evaluation has
``baseline:bayes``, the causal ceiling; the training-slice win rate beside the validation
one; the chosen step marked); each seed's held-out equity beside the baselines'; each
seed's chosen policy and held-out metrics with the baselines' rows, and a figure of their
net PnL. Money is in the store's currency (``lobsurf.report.units``). Each seed's own page
(training curves, actions, position): ``lobsurf report RUN/seed_S``.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lobsurf.report.build import INDEX_NAME, REPORT_DIR, Report, ReportConfig
from lobsurf.report.figures import SeedCurves, equity_figure, learning_figure, seeds_figure
from lobsurf.report.page import fmt, image, page, paragraph, section
from lobsurf.report.run_data import load_run_data
from lobsurf.report.units import pnl_unit

VERDICT_NAME = "verdict.json"
#: the causal ceiling's name among the evaluation's policies (baseline:bayes: the best
#: policy for the generator's law given what an agent sees, on synthetic stores)
CAUSAL_CEILING = "bayes"
#: the exact optimum's capture of itself: the ceiling that reads the future
EXACT_OPTIMUM = 1.0


def ceilings(result: dict[str, Any]) -> dict[str, float]:
    """The capture ceilings the learning figure draws: the exact optimum's 1.0 always, and
    baseline:bayes's held-out capture where the evaluation has it."""
    out = {"exact optimum (reads the future)": EXACT_OPTIMUM}
    bayes = result["policies"].get(CAUSAL_CEILING) or {}
    if bayes.get("capture") is not None:
        out["baseline:bayes, held out (causal ceiling)"] = float(bayes["capture"])
    return out


def seed_curves(group: Path, result: dict[str, Any]) -> list[SeedCurves]:
    """Each seed's validation records and chosen.json, in the verdict's seed order."""
    from lobsurf.training.run.seed_group import seed_dir

    out = []
    for s in result["seeds"]["per_seed"]:
        data = load_run_data(seed_dir(group, s["seed"]))
        out.append(SeedCurves(s["seed"], data.validations, data.chosen))
    return out


def group_unit(group: Path, result: dict[str, Any]) -> str:
    """The unit of the group's PnL: the evaluated store's currency (its instrument's, on
    the seeds' own store)."""
    from lobsurf.training.recovery.saved_config import load_run_config
    from lobsurf.training.run.seed_group import seed_dir

    settings = result["settings"]
    instrument = None
    if settings.get("own_store"):
        first = result["seeds"]["per_seed"][0]["seed"]
        instrument = load_run_config(seed_dir(group, first)).data.instrument_id or None
    return pnl_unit(settings["store"], instrument)


#: what the learning figure shows
LEARNING_CAPTION = (
    "Left: each seed's validation capture (its greedy sweep's net PnL as a share of the exact "
    "optimum over the validation rows) at every validation, the chosen step starred and "
    "dotted, the ceilings as horizontal lines: the exact optimum (1.0; it reads the future) "
    "and, on a synthetic store whose evaluation has it, baseline:bayes's held-out capture, "
    "the best a causal policy can do on the generator's law. A curve that peaks and falls "
    "is a learner that decays. Right: each seed's win rate on the validation rows (solid) "
    "beside the same sweep over the simulator's last training rows (dashed): a training "
    "win rate far above the validation one is memorised, not learned.")


def _table(head: tuple[str, ...], rows: list[tuple[Any, ...]], table_id: str,
           text_column: int | None = None) -> str:
    """A table; the cells of ``text_column`` are prose (they wrap, left-aligned)."""
    cells = "".join("<tr>" + "".join(
        f'<td class="text">{c}</td>' if i == text_column else f"<td>{c}</td>"
        for i, c in enumerate(row)) + "</tr>" for row in rows)
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return (f'<table id="{table_id}"><thead><tr>{header}</tr></thead><tbody>{cells}'
            "</tbody></table>")


def _captures(result: dict[str, Any]) -> tuple[str, ...]:
    """The capture columns: of the exact optimum, and of baseline:bayes where the
    evaluation has that ceiling (a synthetic store)."""
    has_bayes = any(m.get("capture_bayes") is not None for m in result["policies"].values())
    return ("capture", "capture_bayes") if has_bayes else ("capture",)


def _per_seed(result: dict[str, Any]) -> str:
    v, pol = result["seeds"], result["policies"]
    captures = _captures(result)
    rows = []
    for s, chosen in zip(v["per_seed"], result["chosen"]):
        what = f"step {s['step']:,}" if s["policy"] == "checkpoint" else "hold (no edge found)"
        rows.append((s["seed"], html.escape(what), fmt("net_pnl", s["net_pnl"]),
                     *(fmt(c, s.get(c)) for c in captures), fmt("trades", s["trades"]),
                     fmt("win_rate", s["win_rate"]), fmt("ci", s["pnl_per_trade_ci"]),
                     html.escape(chosen.get("reason") or chosen.get("note") or "")))
    for name, m in pol.items():
        if not name.startswith("seed_"):
            rows.append(("", html.escape(name), fmt("net_pnl", m["net_pnl"]),
                         *(fmt(c, m.get(c)) for c in captures), fmt("trades", m["trades"]),
                         fmt("win_rate", m["win_rate"]), fmt("ci", m["pnl_per_trade_ci"]), ""))
    head = ("seed", "policy", "net_pnl", *captures, "trades", "win_rate", "PnL per trade CI",
            "why")
    return _table(head, rows, "per-seed", text_column=len(head) - 1)


def _verdict(v: dict[str, Any], captures: tuple[str, ...]) -> str:
    rows = [(metric, fmt(metric, v["iqm"][metric]), fmt(metric, v["iqm_ci"][metric]),
             fmt(metric, v["mean"][metric]), fmt(metric, v["mean_ci"][metric]))
            for metric in ("net_pnl", *captures) if metric in v["iqm"]]
    stats = _table(("held-out", "IQM", "IQM CI", "mean", "mean CI"), rows, "verdict")
    rows = [(html.escape(name), fmt("capture", p["net_pnl"]), fmt("capture", p["net_pnl_ci"]))
            for name, p in v["prob_improvement"].items()]
    improvement = _table(("baseline", "P(agent > baseline)", "CI"), rows, "prob-improvement")
    return stats + improvement


def build_group_report(group: Path, cfg: ReportConfig | None = None,
                       sweep_progress: Callable[[int], Any] | None = None) -> Report:
    """Write RUN/report/index.html of a seed group (module doc)."""
    from contextlib import nullcontext

    from lobsurf.eval.seed_verdict import prepare_group_evaluation, verdict

    cfg = cfg or ReportConfig()

    out = group / REPORT_DIR
    out.mkdir(exist_ok=True)
    report = Report(path=out / INDEX_NAME)
    progress = sweep_progress or (lambda steps: nullcontext(lambda n=1, **f: None))
    plan = prepare_group_evaluation(group, cfg.store, cfg.policy, cfg.device, cfg.num_envs)
    with progress(plan.steps) as advance:
        result, records, _ = plan.run_with_records(advance)
    result["seeds"] = verdict(result, group)
    report.heldout = result
    (out / VERDICT_NAME).write_text(json.dumps(result, indent=1))
    v = result["seeds"]
    unit = group_unit(group, result)
    learning = learning_figure(seed_curves(group, result), ceilings(result),
                               out / "learning.png")
    equity = equity_figure(records, out / "equity.png", unit)
    fig = seeds_figure(result, out / "seeds.png", unit)
    report.figures += [learning, equity, fig]
    level = f"{v['ci_level'] * 100:g} %"
    intro = paragraph(
        f"{v['seeds']} seeds of one config, each seed's chosen policy (the checkpoint chosen "
        f"on one half of its validation slice and confirmed on the other, or hold where none "
        f"was) swept once over "
        f"{result['split']['rows']:,} held-out rows beside every baseline (deterministic: the "
        f"same for every seed). IQM: interquartile mean over seeds; intervals: {level} "
        "stratified bootstrap over seeds (percentile); P(agent > baseline): the share of seeds "
        "whose net PnL beats it, ties counting one half (Agarwal et al. 2021). Each seed's "
        "own page: lobsurf report RUN/seed_S.")
    parts = [intro, _verdict(v, _captures(result))]
    if v["note"]:
        parts.append(paragraph(v["note"], "note"))
    body = [section("Verdict over seeds", *parts),
            section("Learning over training", image(learning, "validation capture and win "
                                                    "rates over training", LEARNING_CAPTION)),
            section("Held-out equity", image(equity, "held-out equity of every seed and "
                                             "baseline", f"Cumulative net PnL ({unit}) of "
                                             "each seed's chosen policy (dark, thick) and "
                                             "every baseline over the held-out sweep; "
                                             "dashed: reads the future.")),
            section("Per seed", _per_seed(result), image(fig, "net PnL per seed"))]
    report.path.write_text(page(f"lobsurf report: {group.name} ({v['seeds']} seeds)", body))
    return report
