"""``lobsurf eval RUN`` on a seed group (``lobsurf train --seeds N``): each seed's chosen
policy on the held-out rows, the baselines once, and the verdict over seeds.

One deterministic sweep trades the held-out rows with every seed's chosen policy (hold
where its validation found no edge; ``lobsurf.eval.run.choose_policy``) and every
baseline once: the baselines are deterministic and the same for every seed, as the seeds
share the data, simulator and label settings (checked). The result is
``evaluate_policies``'s dict with seed S's agent under ``policies["seed_S"]`` and

    "seeds":  {"per_seed": [{"seed", "run", "chosen", "policy", "step", "net_pnl", "capture",
                             "capture_bayes", "trades", "win_rate", "pnl_per_trade_ci"}, ...],
               "iqm", "iqm_ci", "mean", "mean_ci": over "net_pnl", "capture" and
                   "capture_bayes" (None without the ceiling),
               "prob_improvement": baseline -> {"net_pnl", "net_pnl_ci"},
               "seeds", "ci_level", "note"}          (lobsurf.eval.aggregate)
    "chosen": [{"seed", "policy", ...}, ...]        each seed's evaluated policy
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from lobsurf.backtest.sweep import SweepConfig
from lobsurf.errors import UserError
from lobsurf.eval.aggregate import AggregateConfig, aggregate
from lobsurf.eval.run import (
    RUN_BASELINES,
    RunEvaluation,
    choose_policy,
    prepare_run_evaluation,
)
from lobsurf.sim.env import BatchedLobEnv
from lobsurf.training.recovery.run_folder import is_run_folder
from lobsurf.training.recovery.saved_config import load_run_config
from lobsurf.training.run.seed_group import read_group, seed_dir

#: spaces between the columns of the per-seed table (each as wide as its widest cell)
GUTTER = 3


def prepare_group_evaluation(group: Path, store: str | None = None, policy: str = "greedy",
                             device: torch.device | str = "cpu",
                             num_envs: int = SweepConfig().num_envs,
                             checkpoint: str = "chosen") -> RunEvaluation:
    """One sweep's plan: every seed's policy (``checkpoint``: chosen, last or a step) and
    the baselines on the held-out rows of the group's data (module doc)."""
    seeds = read_group(group)["seeds"]
    runs = []
    for seed in seeds:
        folder = seed_dir(group, seed)
        if not is_run_folder(folder):
            raise UserError(f"{folder}: seed {seed} has not started; lobsurf train --resume "
                            f"{group} trains it")
        cfg = load_run_config(folder)
        runs.append((seed, folder, cfg, choose_policy(folder, cfg, checkpoint)))
    first = runs[0][2]
    for seed, _, cfg, _ in runs[1:]:
        if (cfg.data, cfg.sim, cfg.labels) != (first.data, first.sim, first.labels):
            raise UserError(f"{group}: seed {seed} trained on other data, simulator or label "
                            f"settings than seed {runs[0][0]}: not one experiment")
    plan = prepare_run_evaluation(runs[0][1], store, policy, "heldout", device, num_envs,
                                  checkpoint)
    env = BatchedLobEnv(plan.book, 1, plan.sim)
    del plan.policies["agent"]
    for seed, _, cfg, pick in runs:
        plan.policies[f"seed_{seed}"] = pick.agent(cfg, env, policy, device)
    plan.chosen = [{"seed": seed, **pick.info} for seed, _, _, pick in runs]
    plan.settings.update(run=str(group), checkpoint=checkpoint,
                         trained_steps=[pick.trained_steps for *_, pick in runs])
    return plan


def verdict(result: dict[str, Any], group: Path,
            cfg: AggregateConfig = AggregateConfig()) -> dict[str, Any]:
    """The ``seeds`` part of the result (module doc) from a group sweep's result; ``cfg``:
    the bootstrap over seeds (its level is the intervals')."""
    per_seed = []
    for chosen in result["chosen"]:
        m = result["policies"][f"seed_{chosen['seed']}"]
        per_seed.append({"seed": chosen["seed"], "run": str(seed_dir(group, chosen["seed"])),
                         "chosen": chosen, "policy": chosen["policy"],
                         "step": chosen.get("step"),
                         **{k: m.get(k) for k in ("net_pnl", "capture", "capture_bayes",
                                                  "trades", "win_rate", "pnl_per_trade_ci")}})
    scores = {k: [s[k] for s in per_seed] for k in ("net_pnl", "capture", "capture_bayes")}
    baselines = {name: result["policies"][name]["net_pnl"] for name in RUN_BASELINES
                 if name in result["policies"]}
    return {"per_seed": per_seed, **aggregate(scores, baselines, cfg)}


def evaluate_seed_group(group: Path, store: str | None = None, policy: str = "greedy",
                        device: torch.device | str = "cpu",
                        num_envs: int = SweepConfig().num_envs,
                        progress: Callable[[int], None] | None = None,
                        checkpoint: str = "chosen",
                        aggregate_cfg: AggregateConfig = AggregateConfig()) -> dict[str, Any]:
    """Sweep every seed's policy and the baselines; the result with its verdict."""
    plan = prepare_group_evaluation(group, store, policy, device, num_envs, checkpoint)
    result = plan.run(progress)
    return {**result, "seeds": verdict(result, group, aggregate_cfg)}


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _ci(ci: list[float] | None, cell: Callable[[float | None], str]) -> str:
    return "-" if ci is None else f"[{cell(ci[0])}, {cell(ci[1])}]"


def columns(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows of cells as text lines: each column right-aligned to its widest cell, GUTTER
    spaces apart (an interval never runs into the cell beside it)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [(" " * GUTTER).join(f"{c:>{w}}" for c, w in zip(row, widths)).rstrip()
            for row in rows]


def print_verdict(result: dict[str, Any]) -> None:
    """The per-seed table, the baselines and the verdict over seeds, as text."""
    v, pol = result["seeds"], result["policies"]
    split = result["split"]
    print(f"{result['settings']['run']}: {v['seeds']} seeds, each seed's chosen policy on "
          f"{split['rows']:,} held-out rows beside every baseline")
    rows = [("seed", "policy", "net_pnl", "capture", "capture_bayes", "trades", "win_rate",
             "PnL/trade CI")]
    for s in v["per_seed"]:
        what = f"step {s['step']:,}" if s["policy"] == "checkpoint" else "hold"
        rows.append((str(s["seed"]), what, _money(s["net_pnl"]), _share(s["capture"]),
                     _share(s["capture_bayes"]), f"{s['trades']:,}", _share(s["win_rate"]),
                     _ci(s["pnl_per_trade_ci"], _money)))
    for name in (n for n in RUN_BASELINES if n in pol):
        m = pol[name]
        rows.append(("", name, _money(m["net_pnl"]), _share(m.get("capture")),
                     _share(m.get("capture_bayes")), f"{m['trades']:,}", _share(m["win_rate"]),
                     _ci(m["pnl_per_trade_ci"], _money)))
    print("\n".join(columns(rows)))
    level = f"{v['ci_level'] * 100:g} %"
    print(f"verdict over {v['seeds']} seeds ({level} stratified-bootstrap intervals):")
    for metric, cell in (("net_pnl", _money), ("capture", _share), ("capture_bayes", _share)):
        if metric == "capture_bayes" and v["iqm"][metric] is None:
            continue  # no ceiling: real data, or a ceiling that does not make money
        print(f"  {metric:<13} IQM {cell(v['iqm'][metric])} {_ci(v['iqm_ci'][metric], cell)}"
              f"   mean {cell(v['mean'][metric])} {_ci(v['mean_ci'][metric], cell)}")
    for name, p in v["prob_improvement"].items():
        print(f"  P(agent > {name}) = {p['net_pnl']:.2f} {_ci(p['net_pnl_ci'], _share)}")
    hold = [str(c["seed"]) for c in result["chosen"] if c["policy"] == "hold"]
    if hold:
        print(f"no edge found on validation by seed(s) {', '.join(hold)}: hold was chosen "
              "(zero trades)")
    if v["note"]:
        print(f"note: {v['note']}")
