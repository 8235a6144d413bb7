"""The report's PNG figures (matplotlib, Agg backend: no display needed).

Each function draws one figure from plain arrays or records and writes it to ``path``:
training curves from metrics.jsonl, training beside validation (the memorisation gauge),
the held-out equity and drawdown of every policy, the
action distribution, the agent's position over a sample of the held-out period, the
walk-forward folds, and for a seed group each seed's learning over training (validation
capture against its ceilings, the memorisation gauge) and the seeds' held-out net PnL.
Money axes name their unit (``lobsurf.report.units``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a window (a server, a test, a CI job)
import matplotlib.pyplot as plt
import numpy as np

from lobsurf.backtest.metrics import BacktestRecord
from lobsurf.report.run_data import RunData

#: resolution of every PNG
DPI = 100
#: width and height of one panel of a grid, inches
PANEL_W, PANEL_H = 4.2, 2.6
#: panels per row of the training-curve grid
GRID_COLUMNS = 4
#: policies that read the future: drawn dashed, and left out of the zoomed equity panel
PEEKING = ("oracle", "optimal")
#: the agent's colour everywhere (baselines take the default cycle)
AGENT_COLOR = "black"
#: the seeds of a group, in order (dark, apart from the baselines' default cycle)
SEED_COLORS = ("black", "darkred", "navy", "darkgreen", "darkmagenta", "saddlebrown",
               "darkslategray", "olive")
#: the agent's and every seed's line width (baselines: 1.0)
AGENT_WIDTH = 1.8


def seed_color(index: int) -> str:
    """The colour of the seed at ``index`` of its group, the same in every figure."""
    return SEED_COLORS[index % len(SEED_COLORS)]


@dataclass(frozen=True)
class Panel:
    """One training-curve panel: a title and the metrics.jsonl keys drawn in it."""

    title: str
    keys: tuple[str, ...]
    log_y: bool = False


#: the training curves, in reading order (keys defined in docs/metrics.md)
TRAINING_PANELS = (
    Panel("Q loss (C51 cross-entropy)", ("l_q",)),
    Panel("policy loss", ("l_pi",)),
    Panel("value loss", ("l_v",)),
    Panel("FRD and auxiliary losses", ("l_frd", "l_aux")),
    Panel("win rate of closed trades", ("win_rate",)),
    Panel("hold and gated fractions", ("hold_fraction", "gated_fraction")),
    Panel("entropies (nats)", ("policy_entropy", "action_entropy")),
    Panel("Q-pi agreement", ("q_pi_agreement",)),
    Panel("alpha (SAC temperature)", ("alpha",)),
    Panel("tau (distillation)", ("tau",)),
    Panel("beta (KL reference)", ("beta",)),
    Panel("atom span v_min .. v_max", ("v_min", "v_max")),
    Panel("reward scale", ("reward_scale",)),
    Panel("gate threshold", ("gate_threshold",)),
    Panel("net PnL per log interval", ("net_pnl",)),
    Panel("steps per second", ("steps_per_s",)),
)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight")  # keeps a legend placed outside
    plt.close(fig)
    return path


def _style(name: str, seed_index: int | None = None) -> dict[str, Any]:
    if name == "agent":
        return {"color": AGENT_COLOR, "linewidth": AGENT_WIDTH, "zorder": 5}
    if seed_index is not None:
        return {"color": seed_color(seed_index), "linewidth": AGENT_WIDTH, "zorder": 5}
    return {"linestyle": "--" if name in PEEKING else "-", "linewidth": 1.0}


def _label(name: str) -> str:
    return name.replace("seed_", "seed ")


def training_figure(data: RunData, path: Path) -> Path:
    """Grid of TRAINING_PANELS over training steps; a panel with no data says so."""
    rows = -(-len(TRAINING_PANELS) // GRID_COLUMNS)
    fig, axes = plt.subplots(rows, GRID_COLUMNS, figsize=(PANEL_W * GRID_COLUMNS, PANEL_H * rows))
    for ax, panel in zip(axes.flat, TRAINING_PANELS):
        drawn = False
        for key in panel.keys:
            steps, values = data.series(key)
            if steps:
                ax.plot(steps, values, marker="." if len(steps) < 30 else None, label=key)
                drawn = True
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel("training step", fontsize=8)
        ax.tick_params(labelsize=8)
        if not drawn:
            ax.text(0.5, 0.5, "not logged yet", ha="center", va="center", transform=ax.transAxes,
                    color="gray")
        elif len(panel.keys) > 1:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(TRAINING_PANELS):]:
        ax.axis("off")
    return _save(fig, path)


def validation_figure(data: RunData, path: Path, unit: str = "currency") -> Path:
    """Left: the win rate of training's closed trades (log intervals), of the greedy agent
    swept over the simulator's last rows and over the validation slice (the memorisation
    gauge: a training win rate far above the validation one is memorised). Right: the two
    sweeps' net PnL; the chosen checkpoint's step is marked, hold's PnL is the zero line."""
    fig, (win_ax, pnl_ax) = plt.subplots(1, 2, figsize=(12, 3.8))
    for ax, keys in ((win_ax, ("train_sweep_win_rate", "val_win_rate")),
                     (pnl_ax, ("train_sweep_net_pnl", "val_net_pnl"))):
        for key, color in zip(keys, ("tab:orange", AGENT_COLOR)):
            steps, values = data.series(key, data.validations)
            label = ("greedy sweep of training rows" if key.startswith("train")
                     else "greedy sweep of validation rows")
            ax.plot(steps, values, marker="o", color=color, label=label)
        ax.set_xlabel("training step", fontsize=8)
    steps, values = data.series("win_rate")
    win_ax.plot(steps, values, color="tab:gray", linewidth=0.8,
                label="training (acting policy, per log interval)")
    chosen = data.chosen or {}
    if chosen.get("policy") == "checkpoint":
        pnl_ax.axvline(chosen["step"], color="tab:green", linestyle="--",
                       label=f"chosen: step {chosen['step']:,}")
    pnl_ax.axhline(0, color="gray", linewidth=0.5, label="hold")
    win_ax.set_title("win rate: training vs validation", fontsize=10)
    pnl_ax.set_title(f"net PnL of the greedy sweeps ({unit})", fontsize=10)
    for ax in (win_ax, pnl_ax):
        ax.legend(fontsize=7)
    return _save(fig, path)


def equity_figure(records: dict[str, BacktestRecord], path: Path, unit: str = "currency"
                  ) -> Path:
    """Cumulative net PnL and drawdown of every policy over the held-out steps (time order);
    a seed group's ``seed_S`` records are drawn as agents, each in its seed's colour."""
    fig, (all_ax, real_ax, dd_ax) = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    seeds = [n for n in records if n.startswith("seed_")]
    for name, rec in records.items():
        style = _style(name, seeds.index(name) if name in seeds else None)
        equity = np.cumsum(rec.step_pnl)
        all_ax.plot(equity, label=_label(name), **style)
        if name not in PEEKING:
            real_ax.plot(equity, label=_label(name), **style)
            dd_ax.plot(equity - np.maximum.accumulate(np.maximum(equity, 0.0)),
                       label=_label(name), **style)
    all_ax.set_title("equity: cumulative net PnL over the held-out sweep (every policy; "
                     "dashed = reads the future)")
    real_ax.set_title("equity without the future-reading oracle and optimum")
    dd_ax.set_title("drawdown from the running peak (policies that do not read the future)")
    dd_ax.set_xlabel("held-out step (time order; pieces of the sweep laid end to end)")
    for ax in (all_ax, real_ax, dd_ax):
        ax.set_ylabel(f"net PnL ({unit})")
        ax.axhline(0, color="gray", linewidth=0.5)
        ax.legend(fontsize=8, ncol=4)
    return _save(fig, path)


def action_labels(order_sizes_lots: tuple[int, ...]) -> list[str]:
    """Action index -> label (the simulator's convention: hold, buys, then sells)."""
    return (["hold"] + [f"buy {s}" for s in order_sizes_lots]
            + [f"sell {s}" for s in order_sizes_lots])


def actions_figure(data: RunData, records: dict[str, BacktestRecord] | None,
                   order_sizes_lots: tuple[int, ...], path: Path) -> Path:
    """Left: hold and gated fractions over training (metrics.jsonl has no per-action counts).
    Right: the distribution of actions in the held-out sweep of the final checkpoint."""
    fig, (train_ax, sweep_ax) = plt.subplots(1, 2, figsize=(12, 3.8))
    for key in ("hold_fraction", "gated_fraction"):
        steps, values = data.series(key)
        if steps:
            train_ax.plot(steps, values, label=key)
    train_ax.set_ylim(0, 1)
    train_ax.set_title("over training: share of Hold actions and of gated (vetoed) trades")
    train_ax.set_xlabel("training step")
    train_ax.legend(fontsize=8)
    labels = action_labels(order_sizes_lots)
    if records:
        names = [n for n in records if records[n].step_action is not None]
        width = 0.8 / max(len(names), 1)
        x = np.arange(len(labels))
        for i, name in enumerate(names):
            share = np.bincount(records[name].step_action, minlength=len(labels)) / max(
                len(records[name].step_action), 1)
            sweep_ax.bar(x + (i - (len(names) - 1) / 2) * width, share, width, label=name,
                         color=AGENT_COLOR if name == "agent" else None)
        sweep_ax.set_xticks(x, labels, fontsize=8)
        sweep_ax.legend(fontsize=7, ncol=2)
    else:
        sweep_ax.text(0.5, 0.5, "no checkpoint yet: no held-out sweep", ha="center",
                      va="center", transform=sweep_ax.transAxes, color="gray")
    sweep_ax.set_title("held-out sweep of the final checkpoint: share of each action")
    return _save(fig, path)


def busiest_window(filled_lots: np.ndarray, length: int) -> int:
    """First step of the ``length``-step window with the most fills (0 when shorter)."""
    if len(filled_lots) <= length:
        return 0
    counts = np.convolve((filled_lots != 0).astype(np.int64), np.ones(length, np.int64), "valid")
    return int(np.argmax(counts))


def position_figure(mid_price: np.ndarray, record: BacktestRecord, latency_rows: int,
                    sample_steps: int, path: Path) -> Path:
    """The agent's position over ``sample_steps`` held-out steps (the busiest window), drawn
    over the mid-price, with its fills marked at the fill row's mid.

    Args:
        mid_price: [R] float64 mid-price (currency per unit) of each swept row, time order.
        record: the agent's record (step_position, step_filled_lots set).
        latency_rows: the fill lands this many rows after the decision row.
        sample_steps: length of the sample.
    """
    filled = record.step_filled_lots
    lo = busiest_window(filled, sample_steps)
    hi = min(lo + sample_steps, len(mid_price))
    steps = np.arange(lo, hi)
    fig, price_ax = plt.subplots(figsize=(11, 4))
    price_ax.plot(steps, mid_price[lo:hi], color="tab:blue", linewidth=1.0, label="mid-price")
    fill_at = np.clip(steps + latency_rows, 0, len(mid_price) - 1)
    for sign, marker, color, label in ((1, "^", "tab:green", "buy fill"),
                                       (-1, "v", "tab:red", "sell fill")):
        hit = np.sign(filled[lo:hi]) == sign
        price_ax.scatter(steps[hit], mid_price[fill_at[hit]], marker=marker, color=color, s=36,
                         label=label, zorder=5)
    price_ax.set_ylabel("mid-price")
    price_ax.set_xlabel("held-out step")
    pos_ax = price_ax.twinx()
    pos_ax.step(steps, record.step_position[lo:hi], where="post", color=AGENT_COLOR,
                linewidth=1.0, alpha=0.6, label="position (lots)")
    pos_ax.set_ylabel("position, lots")
    handles = price_ax.get_legend_handles_labels()[0] + pos_ax.get_legend_handles_labels()[0]
    price_ax.legend(handles=handles, fontsize=8, ncol=len(handles), loc="upper center",
                    bbox_to_anchor=(0.5, -0.18))  # below the axes: never over the lines
    price_ax.set_title(f"agent position over held-out steps {lo:,}..{hi - 1:,} "
                       "(the window with the most fills)")
    return _save(fig, path)


def walk_forward_figure(summary: dict[str, Any], path: Path) -> Path:
    """Net PnL of every policy in every walk-forward fold (grouped bars)."""
    folds = summary["folds"]
    names = list(folds[0]["policies"])
    fig, ax = plt.subplots(figsize=(11, 3.8))
    width = 0.8 / len(names)
    x = np.arange(len(folds))
    for i, name in enumerate(names):
        values = [f["policies"][name]["net_pnl"] for f in folds]
        ax.bar(x + (i - (len(names) - 1) / 2) * width, values, width, label=name,
               color=AGENT_COLOR if name == "agent" else None)
    ax.set_xticks(x, [f"fold {f['fold']}" for f in folds])
    ax.axhline(0, color="gray", linewidth=0.5)
    ax.set_ylabel("net PnL (currency)")
    ax.set_title("walk-forward: net PnL on each fold's test segment")
    ax.legend(fontsize=8, ncol=4)
    return _save(fig, path)


def seeds_figure(result: dict[str, Any], path: Path, unit: str = "currency") -> Path:
    """Held-out net PnL of each seed's chosen policy (black) beside every baseline's, with
    the IQM over seeds and its interval (a seed group's verdict, lobsurf.report.seeds)."""
    v, pol = result["seeds"], result["policies"]
    names = [f"seed {s['seed']}" for s in v["per_seed"]] + [
        n for n in pol if not n.startswith("seed_")]
    values = [s["net_pnl"] for s in v["per_seed"]] + [
        pol[n]["net_pnl"] for n in pol if not n.startswith("seed_")]
    fig, ax = plt.subplots(figsize=(11, 0.35 * len(names) + 1.6))
    y = np.arange(len(names))
    colors = [seed_color(i) for i in range(len(v["per_seed"]))] + ["tab:gray"] * (
        len(names) - len(v["per_seed"]))
    ax.barh(y, values, color=colors, height=0.6)
    lo, hi = v["iqm_ci"]["net_pnl"]
    ax.axvspan(lo, hi, color="tab:green", alpha=0.15,
               label=f"IQM over seeds, {v['ci_level'] * 100:g} % interval")
    ax.axvline(v["iqm"]["net_pnl"], color="tab:green")
    ax.axvline(0, color="gray", linewidth=0.5)
    ax.set_yticks(y, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"held-out net PnL ({unit})")
    ax.set_title("held-out net PnL: each seed's chosen policy (dark) beside every baseline "
                 "(grey; oracle and optimal read the future)")
    ax.legend(fontsize=8)
    return _save(fig, path)


@dataclass(frozen=True)
class SeedCurves:
    """One seed's validations over training and its chosen policy (chosen.json)."""

    seed: int
    validations: list[dict[str, Any]] = field(default_factory=list)
    chosen: dict[str, Any] | None = None


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    pairs = [(r["step"], float(r[key])) for r in records
             if isinstance(r.get(key), (int, float))]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def learning_figure(seeds: list[SeedCurves], ceilings: dict[str, float], path: Path) -> Path:
    """A seed group's learning over training. Left: each seed's validation capture (net PnL
    as a share of the exact optimum over the validation rows), its chosen step starred (no
    star: hold was chosen), and ``ceilings`` (label -> capture) as horizontal lines. Right:
    each seed's validation win rate (solid) beside its training-slice sweep's (dashed): the
    memorisation gauge. Both panels mark each chosen step with a dotted line."""
    fig, (cap_ax, win_ax) = plt.subplots(1, 2, figsize=(13, 4.4))
    for i, s in enumerate(seeds):
        color = seed_color(i)
        chosen = s.chosen or {}
        step = chosen.get("step") if chosen.get("policy") == "checkpoint" else None
        steps, capture = _series(s.validations, "val_capture")
        label = f"seed {s.seed}: " + (f"step {step:,} chosen" if step is not None
                                      else "hold chosen")
        cap_ax.plot(steps, capture, marker="o", markersize=3, color=color, label=label)
        for ax, key, style in ((win_ax, "val_win_rate", "-"),
                               (win_ax, "train_sweep_win_rate", "--")):
            ax.plot(*_series(s.validations, key), linestyle=style, marker="o", markersize=3,
                    color=color)
        if step is not None:
            for ax in (cap_ax, win_ax):
                ax.axvline(step, color=color, linestyle=":", linewidth=1.0)
            if step in steps:
                cap_ax.plot([step], [capture[steps.index(step)]], marker="*", markersize=15,
                            color=color, markeredgecolor="gold", zorder=6, linestyle="none")
    for (name, value), style in zip(ceilings.items(), ("--", "-.", ":")):
        cap_ax.axhline(value, color="tab:purple", linestyle=style, linewidth=1.2,
                       label=f"{name}: {value:.2f}")
    cap_ax.axhline(0, color="gray", linewidth=0.5, label="hold: 0")
    cap_ax.set_title("validation capture of the exact optimum over training", fontsize=10)
    cap_ax.set_ylabel("capture")
    win_ax.plot([], [], color="gray", linestyle="-", label="validation sweep")
    win_ax.plot([], [], color="gray", linestyle="--",
                label="training-slice sweep (memorisation gauge)")
    win_ax.set_title("win rate: validation vs the simulator's last training rows", fontsize=10)
    win_ax.set_ylabel("win rate")
    for ax in (cap_ax, win_ax):
        ax.set_xlabel("training step")
        # below the axes: never over the curves
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    return _save(fig, path)
