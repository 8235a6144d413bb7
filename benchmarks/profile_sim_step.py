"""Where a simulator step's GPU time goes: top kernels by CUDA time at one batch size.

    python benchmarks/profile_sim_step.py --envs 65536 --out $OUT
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from lobsurf.sim import BatchedLobEnv, SimConfig
from lobsurf.sim.books import random_walk_book


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, default=65536)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path, default=Path("bench_out"))
    args = ap.parse_args()
    book = random_walk_book(args.rows, num_segments=4, seed=0, device="cuda")
    env = BatchedLobEnv(book, args.envs, SimConfig(fee_per_lot=0.5, fee_bps=0.2))
    env.reset()
    action = torch.randint(0, env.cfg.num_actions, (args.envs,), device="cuda")
    for _ in range(5):
        env.step(action)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            env.step(action)
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=25)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"profile_sim_{args.envs}.txt").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
