"""The report of a seed group (``lobsurf train --seeds N``): the verdict over seeds on one
page, RUN/report/index.html (self-contained, as a single run's).

It sweeps every seed's chosen policy and the baselines once
(``lobsurf.eval.seed_verdict``, the sweep of ``lobsurf eval RUN``), writes the result
beside the page as verdict.json, and shows: each seed's chosen policy and its held-out
metrics, the baselines' rows, the verdict (IQM and mean of net PnL and capture with their
stratified-bootstrap intervals, the probability that the agent beats each baseline), and a
figure of the seeds' net PnL beside the baselines'. Each seed's own page (training curves,
validation, equity): ``lobsurf report RUN/seed_S``.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lobsurf.report.build import INDEX_NAME, REPORT_DIR, Report, ReportConfig
from lobsurf.report.figures import seeds_figure
from lobsurf.report.page import fmt, image, page, paragraph, section

VERDICT_NAME = "verdict.json"


def _table(head: tuple[str, ...], rows: list[tuple[Any, ...]], table_id: str) -> str:
    cells = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return (f'<table id="{table_id}"><thead><tr>{header}</tr></thead><tbody>{cells}'
            "</tbody></table>")


def _per_seed(result: dict[str, Any]) -> str:
    v, pol = result["seeds"], result["policies"]
    rows = []
    for s, chosen in zip(v["per_seed"], result["chosen"]):
        what = f"step {s['step']:,}" if s["policy"] == "checkpoint" else "hold (no edge found)"
        rows.append((s["seed"], html.escape(what), fmt("net_pnl", s["net_pnl"]),
                     fmt("capture", s["capture"]), fmt("trades", s["trades"]),
                     fmt("win_rate", s["win_rate"]), fmt("ci", s["pnl_per_trade_ci"]),
                     html.escape(chosen.get("reason") or chosen.get("note") or "")))
    for name, m in pol.items():
        if not name.startswith("seed_"):
            rows.append(("", html.escape(name), fmt("net_pnl", m["net_pnl"]),
                         fmt("capture", m.get("capture")), fmt("trades", m["trades"]),
                         fmt("win_rate", m["win_rate"]), fmt("ci", m["pnl_per_trade_ci"]), ""))
    head = ("seed", "policy", "net_pnl", "capture", "trades", "win_rate", "PnL per trade CI",
            "why")
    return _table(head, rows, "per-seed")


def _verdict(v: dict[str, Any]) -> str:
    rows = [(metric, fmt(metric, v["iqm"][metric]), fmt(metric, v["iqm_ci"][metric]),
             fmt(metric, v["mean"][metric]), fmt(metric, v["mean_ci"][metric]))
            for metric in ("net_pnl", "capture")]
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
        result = plan.run(advance)
    result["seeds"] = verdict(result, group)
    report.heldout = result
    (out / VERDICT_NAME).write_text(json.dumps(result, indent=1))
    v = result["seeds"]
    fig = seeds_figure(result, out / "seeds.png")
    report.figures.append(fig)
    level = f"{v['ci_level'] * 100:g} %"
    intro = paragraph(
        f"{v['seeds']} seeds of one config, each seed's chosen policy (the checkpoint that "
        f"validated best, or hold where none beat hold on its validation slice) swept once over "
        f"{result['split']['rows']:,} held-out rows beside every baseline (deterministic: the "
        f"same for every seed). IQM: interquartile mean over seeds; intervals: {level} "
        "stratified bootstrap over seeds (percentile); P(agent > baseline): the share of seeds "
        "whose net PnL beats it, ties counting one half (Agarwal et al. 2021). Each seed's "
        "own page: lobsurf report RUN/seed_S.")
    parts = [intro, _verdict(v)]
    if v["note"]:
        parts.append(paragraph(v["note"], "note"))
    body = [section("Verdict over seeds", *parts),
            section("Per seed", _per_seed(result), image(fig, "net PnL per seed"))]
    report.path.write_text(page(f"lobsurf report: {group.name} ({v['seeds']} seeds)", body))
    return report
