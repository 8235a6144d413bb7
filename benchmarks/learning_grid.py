"""Learning dynamics over a grid of variants: ``lobsurf train`` runs side by side on one
device, then each run's validation curve (capture of the exact optimum, trades, the
memorisation gauge) and the controllers at each validation, as one table per run.

A variant is one line ``NAME STORE ARGS...`` of a grid file (``#`` starts a comment);
STORE is a store folder, or ``preset:NAME[:key=value,...]`` for a synthetic market made
once into ``--out/stores`` (``preset:tradeable:days=12`` is the bundled market over 12
days). ARGS are ``lobsurf train`` arguments. Every run gets ``--out OUT/runs/NAME`` and is
stopped at ``--limit`` seconds (what it logged so far is still read).

    python benchmarks/learning_grid.py GRID.txt --out grid --limit 520
    python benchmarks/learning_grid.py --report grid          # tables of finished runs

The tables are the evidence behind docs/log.md's entries on learning dynamics.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

#: metrics-record keys shown beside each validation (the record nearest its step)
CONTROLLER_KEYS = ("q_mean", "reward_scale", "v_min", "gate_threshold", "hold_fraction",
                   "mean_abs_position", "l_q")


def make_store(spec: str, root: Path) -> Path:
    """The store of ``preset:NAME[:k=v,...]`` under ``root`` (made once), or the path."""
    if not spec.startswith("preset:"):
        return Path(spec)
    _, name, *rest = spec.split(":")
    folder = root / spec.replace(":", "_").replace(",", "_").replace("=", "-")
    if (folder / "manifest.json").exists():
        return folder
    from lobsurf.data.store.ingest import ingest
    from lobsurf.data.synth import synth_ingest_config, write_synth
    from lobsurf.presets import preset

    cfg = preset(name)
    for pair in (rest[0].split(",") if rest else []):
        key, value = pair.split("=")
        cfg = replace(cfg, **{key: type(getattr(cfg, key))(value)})
    paths = write_synth(folder.with_name(folder.name + "-dbn"), cfg)
    ingest(paths, folder, synth_ingest_config(cfg), overwrite=True)
    return folder


def read_grid(path: Path) -> list[tuple[str, str, list[str]]]:
    rows = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, store, *args = shlex.split(line)
            rows.append((name, store, args))
    return rows


def run_grid(grid: list[tuple[str, str, list[str]]], out: Path, limit_s: float) -> None:
    stores = {spec: make_store(spec, out / "stores") for _, spec, _ in grid}
    procs = []
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for name, spec, args in grid:
        run = out / "runs" / name
        cmd = [sys.executable, "-m", "lobsurf.cli", "train", "--store", str(stores[spec]),
               "--out", str(run), "--overwrite", "--no-progress", *args]
        log = open(out / "logs" / f"{name}.log", "w")
        procs.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                             env=env), log))
    start = time.monotonic()
    while any(p.poll() is None for _, p, _ in procs):
        if time.monotonic() - start > limit_s:
            for _, p, _ in procs:
                if p.poll() is None:
                    p.terminate()
            break
        time.sleep(5)
    for name, p, log in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()
        print(f"{name}: rc {p.returncode}, {time.monotonic() - start:.0f} s", flush=True)


def curve(run: Path) -> list[dict]:
    """One row per validation record of ``run``: its figures and the controllers then."""
    lines = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl"
                                                                  ).exists() else []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a run stopped mid-line
    metrics = [r for r in records if r.get("event") == "metrics"]
    rows = []
    for v in (r for r in records if r.get("event") == "validation"):
        near = min(metrics, key=lambda m: abs(m["step"] - v["step"]), default={})
        train_win, val_win = v.get("train_sweep_win_rate"), v.get("val_win_rate")
        rows.append({
            "step": v["step"], "capture": v.get("val_capture"), "trades": v.get("val_trades"),
            "val_win": val_win, "gauge": (None if train_win is None or val_win is None
                                          else train_win - val_win),
            **{k: near.get(k, near.get("controllers", {}).get(k)) for k in CONTROLLER_KEYS}})
    return rows


def report(out: Path) -> None:
    def fmt(x: object) -> str:
        return "-" if x is None else (f"{x:.4g}" if isinstance(x, float) else str(x))

    keys = ["step", "capture", "trades", "val_win", "gauge", *CONTROLLER_KEYS]
    summary = []
    for run in sorted((out / "runs").iterdir()):
        rows = curve(run)
        print(f"\n## {run.name}")
        print(" | ".join(keys))
        for r in rows:
            print(" | ".join(fmt(r[k]) for k in keys))
        caps = [(r["capture"], r["step"]) for r in rows if r["capture"] is not None]
        if caps:
            peak = max(caps)
            summary.append((run.name, peak[0], peak[1], caps[-1][0], caps[-1][1]))
    print("\nrun | peak capture (step) | last capture (step) | last / peak")
    for name, peak, peak_step, last, last_step in summary:
        ratio = last / peak if peak > 0 else float("nan")
        print(f"{name} | {peak:.3f} ({peak_step}) | {last:.3f} ({last_step}) | {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("grid", nargs="?", type=Path, help="grid file (NAME STORE ARGS...)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit", type=float, default=520.0, help="seconds for all runs")
    parser.add_argument("--report", action="store_true", help="only print the tables")
    args = parser.parse_args()
    if not args.report:
        if args.grid is None:
            parser.error("a grid file is needed unless --report")
        (args.out / "logs").mkdir(parents=True, exist_ok=True)
        run_grid(read_grid(args.grid), args.out, args.limit)
    report(args.out)


if __name__ == "__main__":
    main()
