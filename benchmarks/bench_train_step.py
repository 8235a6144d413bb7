"""Eager training-step benchmark: ms per step and transitions learned per second, with the
phase breakdown, at several batch sizes (B envs, learner batch B).

It runs the real step (``lobsurf.agent.step``: the code ``lobsurf train`` runs) on a
synthetic store it makes itself, after a burn-in, with one synchronize per timed region.
Phases are timed in a separate pass, each bracketed by synchronizes (which adds a little
time per phase on CUDA; the total row is measured without them).

    python benchmarks/bench_train_step.py --device cuda --batch 16,256,1024 --json out.json
    python benchmarks/bench_train_step.py --device cpu --batch 16,256 --steps 10
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from lobsurf.agent.collect import collect
from lobsurf.agent.learn import learn
from lobsurf.data.synth import SynthConfig, write_synth_store
from lobsurf.train.config import run_config_from_dict
from lobsurf.train.data import load_training_data
from lobsurf.train.loop import build_state, step_config


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def make_store(root: Path, snapshots: int) -> Path:
    path = root / "store"
    write_synth_store(path, SynthConfig(snapshots_per_day=snapshots, days=2, edge=1.0,
                                        move_prob=0.15))
    return path


def bench_one(store: Path, device: str, batch: int, layers: int, steps: int, warmup: int
              ) -> dict:
    cfg = run_config_from_dict({
        "data": {"store": str(store)}, "encoder": {"n_layers": layers},
        "train": {"envs": batch, "device": "cpu" if device == "cpu" else "cuda"},
        "replay": {"capacity": max(1 << 17, 4 * batch)}})
    data = load_training_data(cfg, device, store)
    state = build_state(cfg, data, device)
    scfg = step_config(cfg)
    book = data.train_book

    def full_step() -> None:
        state.online.resample_noise_(state.noise_generator)
        state.target.resample_noise_(state.noise_generator)
        collect(state, book, scfg)
        learn(state, book, scfg)

    for _ in range(warmup):
        collect(state, book, scfg)  # fill the replay, then warm every kernel
    for _ in range(warmup):
        full_step()
    sync(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(steps):
        full_step()
    sync(device)
    step_ms = (time.perf_counter() - t0) / steps * 1e3
    # phases: noise, collect (act + sim + reward + replay write), learn (sample .. Polyak)
    phases = {"noise": 0.0, "collect": 0.0, "learn": 0.0}
    for _ in range(steps):
        for name, fn in (("noise", lambda: (state.online.resample_noise_(state.noise_generator),
                                            state.target.resample_noise_(state.noise_generator))),
                         ("collect", lambda: collect(state, book, scfg)),
                         ("learn", lambda: learn(state, book, scfg))):
            sync(device)
            t = time.perf_counter()
            fn()
            sync(device)
            phases[name] += (time.perf_counter() - t) / steps * 1e3
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None
    return {"batch": batch, "layers": layers, "ms_per_step": step_ms,
            "steps_per_s": 1e3 / step_ms, "transitions_learned_per_s": batch * 1e3 / step_ms,
            "env_steps_per_s": batch * 1e3 / step_ms,
            "phase_ms": {k: round(v, 3) for k, v in phases.items()},
            "peak_gib": peak}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", default="16,256,1024")
    p.add_argument("--layers", default="2")
    p.add_argument("--steps", type=int, default=30, help="timed steps per configuration")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--snapshots", type=int, default=200_000, help="per synthetic day")
    p.add_argument("--json", default=None, help="write the rows to this file")
    args = p.parse_args()
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.fp32_precision = "tf32"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(Path(tmp), args.snapshots)
        for layers in map(int, args.layers.split(",")):
            for batch in map(int, args.batch.split(",")):
                row = bench_one(store, args.device, batch, layers, args.steps, args.warmup)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"eager train step on {name}, torch {torch.__version__}, "
          f"{time.strftime('%Y-%m-%d')}, K=64 d=128, 11x21 C51")
    print(f"{'B':>6} {'layers':>6} {'ms/step':>9} {'steps/s':>8} {'trans/s':>10} "
          f"{'noise':>7} {'collect':>8} {'learn':>8} {'peak GiB':>8}")
    for r in rows:
        ph = r["phase_ms"]
        peak = f"{r['peak_gib']:.2f}" if r["peak_gib"] is not None else "-"
        print(f"{r['batch']:>6} {r['layers']:>6} {r['ms_per_step']:>9.2f} {r['steps_per_s']:>8.1f} "
              f"{r['transitions_learned_per_s']:>10,.0f} {ph['noise']:>7.2f} {ph['collect']:>8.2f} "
              f"{ph['learn']:>8.2f} {peak:>8}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": name, "rows": rows}, indent=1))
    # the benchmark's own check: every configuration ran and produced a finite time
    assert all(r["ms_per_step"] > 0 for r in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
