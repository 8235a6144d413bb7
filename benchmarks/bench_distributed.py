"""Data-parallel scaling: transitions learned per second on 1 and on N GPUs, B per GPU.

One run measures every process count in ``--gpus`` (default 1,2): for each it starts that
many processes through torchrun's API (``torch.distributed.run``, the launcher ``lobsurf
train --gpus`` uses), each stepping the real training step (``lobsurf.agent.step.
train_step`` with the gradient and controller all-reduces of
``lobsurf.training.distributed.collective``)
with B envs and learner batch B on its own GPU. Rank 0 times the steps between two
barriers and writes one JSON row; the parent prints the table, the speedup over one GPU and
the scaling efficiency. The store is synthetic (``lobsurf synth``'s generator, 2 days of
``--snapshots``, edge on), written to a temporary folder. Each rank fills its replay with
``--warmup`` collect-only steps and runs ``--warmup`` learning steps before the timed
region, which a synchronize and a barrier open and close. Goal: >= 1.9x on 2 GPUs at
B = 1024. No GPU figure yet (benchmarks/RESULTS.md, Distributed).

    python benchmarks/bench_distributed.py --gpus 1,2,4,8 --batch 1024 --json out.json
    python benchmarks/bench_distributed.py --device cpu --gpus 1,2 --batch 16 --steps 3
        (the script's check on CPU over gloo; its timings mean nothing)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from lobsurf.agent.collect import collect
from lobsurf.agent.step import train_step
from lobsurf.data.synth import SynthConfig, write_synth_store
from lobsurf.training.config import run_config_from_dict
from lobsurf.training.data import load_training_data
from lobsurf.training.distributed.collective import (NVLS_OFF_ENV, init_collective,
                                                     launched_by_torchrun,
                                       shutdown, state_tensors)
from lobsurf.training.run.state import build_state, step_config

#: environment variable that carries the parent's settings into the torchrun workers
_ENV_ARGS = "LOBSURF_BENCH_ARGS"


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def make_store(root: Path, snapshots: int) -> Path:
    """A 2-day synthetic store of ``snapshots`` a day with its edge on, under ``root``."""
    path = root / "store"
    write_synth_store(path, SynthConfig(snapshots_per_day=snapshots, days=2, edge=1.0,
                                        move_prob=0.15))
    return path


def worker(args: dict) -> None:
    """One rank: build, warm up, time ``steps`` synchronised training steps."""
    collective, device = init_collective(args["device"])
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.fp32_precision = "tf32"
    batch = args["batch"]
    cfg = run_config_from_dict({
        "data": {"store": args["store"]}, "train": {"envs": batch,
                                                     "device": args["device"]},
        "replay": {"capacity": max(1 << 17, 4 * batch)}})
    data = load_training_data(cfg, device, Path(args["store"]))
    state = build_state(cfg, data, device, rank=collective.rank)
    collective.broadcast_(state_tensors(state.online, state.target, state.controllers))
    scfg, book = step_config(cfg), data.train_book
    sync_arg = collective if collective.active else None
    for _ in range(args["warmup"]):
        collect(state, book, scfg)  # fill the replay, then warm every kernel
    for _ in range(args["warmup"]):
        train_step(state, book, scfg, learning=True, sync=sync_arg)
    sync(device)
    collective.barrier()
    t0 = time.perf_counter()
    for _ in range(args["steps"]):
        train_step(state, book, scfg, learning=True, sync=sync_arg)
    sync(device)
    collective.barrier()
    seconds = time.perf_counter() - t0
    if collective.is_main:
        world = collective.world_size
        row = {"processes": world, "batch_per_process": batch,
               "ms_per_step": seconds / args["steps"] * 1e3,
               "transitions_learned_per_s": world * batch * args["steps"] / seconds}
        Path(args["out"]).write_text(json.dumps(row))
    shutdown()


def launch(n: int, args: dict) -> dict:
    from torch.distributed.run import parse_args, run

    os.environ.update(NVLS_OFF_ENV)
    os.environ[_ENV_ARGS] = json.dumps(args)
    run(parse_args(["--standalone", f"--nproc-per-node={n}", str(Path(__file__).resolve())]))
    return json.loads(Path(args["out"]).read_text())


def main() -> int:
    if launched_by_torchrun():
        worker(json.loads(os.environ[_ENV_ARGS]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--gpus", default="1,2", help="process counts to measure, one per GPU")
    p.add_argument("--batch", type=int, default=1024, help="envs and learner batch per GPU")
    p.add_argument("--steps", type=int, default=50, help="timed steps per process count")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--snapshots", type=int, default=200_000, help="per synthetic day")
    p.add_argument("--json", default=None, help="write the rows to this file")
    a = p.parse_args()
    counts = [int(n) for n in a.gpus.split(",")]
    if a.device == "cuda" and max(counts) > torch.cuda.device_count():
        print(f"--gpus {max(counts)}: only {torch.cuda.device_count()} CUDA device(s) "
              "available", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(Path(tmp), a.snapshots)
        for n in counts:
            args = {"device": a.device, "store": str(store), "batch": a.batch,
                    "steps": a.steps, "warmup": a.warmup, "out": f"{tmp}/row{n}.json"}
            rows.append(launch(n, args))
            print(json.dumps(rows[-1]), file=sys.stderr)
    base = rows[0]["transitions_learned_per_s"] / rows[0]["processes"]
    name = torch.cuda.get_device_name() if a.device == "cuda" else "cpu (gloo)"
    print(f"data-parallel train step on {name}, torch {torch.__version__}, "
          f"{time.strftime('%Y-%m-%d')}, B={a.batch} per process")
    print(f"{'procs':>5} {'ms/step':>9} {'trans/s':>12} {'speedup':>8} {'efficiency':>10}")
    for r in rows:
        speedup = r["transitions_learned_per_s"] / base
        print(f"{r['processes']:>5} {r['ms_per_step']:>9.2f} "
              f"{r['transitions_learned_per_s']:>12,.0f} {speedup:>7.2f}x "
              f"{speedup / r['processes']:>10.0%}")
    if a.json:
        Path(a.json).write_text(json.dumps({"device": name, "rows": rows}, indent=1))
    assert [r["processes"] for r in rows] == counts and all(
        r["transitions_learned_per_s"] > 0 for r in rows), rows
    return 0


if __name__ == "__main__":
    sys.exit(main())
