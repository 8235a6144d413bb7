"""Where one Mamba2 block's forward + backward spends its GPU time, kernel by kernel.

Runs the default block (bench_fused_block.py's shape) at one batch of windows under
torch.profiler, compiled by torch.compile, once per variant: the PyTorch mixer
(``fused_training="torch"``) and the fused core in each grid (``--programs``). Prints each
variant's kernels with their GPU time per step (the profiled steps' mean), largest first,
and writes the tables as JSON under ``--out``.

    python benchmarks/profile_mamba2_block.py --batch 1024 --precision bf16 --out OUT
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from lobsurf.models.config import EncoderConfig
from lobsurf.models.mamba2 import Mamba2Block


def kernel_table(block, h, weight, autocast, steps: int) -> list[tuple[str, float, int]]:
    """(kernel name, GPU µs per step, calls per step), largest first."""

    def step():
        with autocast:
            out = block(h)
        (out.float() * weight).sum().backward()

    for _ in range(3):  # compile and warm up outside the profile
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total / steps, e.count // steps)
            for e in prof.key_averages() if e.device_time_total > 0]
    return sorted(rows, key=lambda r: -r[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--programs", default="window,head")
    ap.add_argument("--warps", type=int, default=8)
    ap.add_argument("--precision", default="bf16", choices=("fp32", "bf16"))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--aligns", default="",
                    help="also the PyTorch mixer with EncoderConfig.cuda_gemm_align_bytes = each "
                         "of these (1: the products' odd widths left unpadded)")
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.manual_seed(0)
    ref = Mamba2Block(EncoderConfig(fused_inference="torch")).cuda()
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    h = torch.randn(args.batch, args.window, ref.mixer.cfg.d_model, device="cuda", dtype=dtype,
                    requires_grad=True)
    weight = torch.randn_like(h, dtype=torch.float32)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "bf16",
                              cache_enabled=False)
    variants = {"torch": ref}
    for align in filter(None, args.aligns.split(",")):
        cfg = dataclasses.replace(ref.mixer.cfg, cuda_gemm_align_bytes=int(align))
        variants[f"torch, cuda_gemm_align_bytes {align}"] = Mamba2Block(cfg).cuda()
    for programs in filter(None, args.programs.split(",")):  # "" or "none": PyTorch only
        if programs == "none":
            continue
        cfg = dataclasses.replace(ref.mixer.cfg, fused_training="triton",
                                  fused_core_programs=programs, fused_warps=args.warps,
                                  fused_head_warps=args.warps)
        block = Mamba2Block(cfg).cuda()
        block.load_state_dict(ref.state_dict())
        variants[programs] = block
    tables = {}
    for name, block in variants.items():
        table = kernel_table(torch.compile(block, dynamic=False), h, weight, autocast,
                             args.steps)
        tables[name] = table
        total = sum(us for _, us, _ in table)
        print(f"\n{name}: {total:.0f} µs of kernels per forward + backward "
              f"(B={args.batch}, {args.precision})")
        for key, us, calls in table[:args.top]:
            print(f"  {us:8.1f} µs  x{calls:<3} {key[:110]}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "profile_mamba2_block.json").write_text(json.dumps(tables, indent=1))


if __name__ == "__main__":
    main()
