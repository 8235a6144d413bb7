"""The no-grad forwards' pre-norm + in-projection + conv + dt: the PyTorch ops compiled
(``fused_in_proj = "torch"``, with the default conv backend) against the one kernel
(``in_proj_conv_triton.py``), on CUDA.

The default block (D 128, E 256, N 64, H 4, W 4, K 64) under bf16 autocast, every call
captured in a CUDA graph and replayed (GPU time), per batch of windows:

- ``torch``: RMSNorm, the aligned in-projection GEMM, the conv + SiLU and the dt softplus
  as the mixer runs them, torch.compile'd;
- ``kernel_r{rows}_n{cols}_w{warps}``: the kernel per tile (rows and projection columns
  per program, warps), with its outputs' agreement against ``torch`` (max
  relative error over z, xBC, dt);
- ``block_torch`` / ``block_kernel``: the whole block's no-grad forward, compiled, each
  way (``last`` = the last layer's last-row-only call).

    python benchmarks/bench_in_proj_conv.py --batch 1024,2048 --out OUT
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from lobsurf.models import in_proj_conv_triton as ipc
from lobsurf.models.align import device_multiple, linear_padded_out
from lobsurf.models.config import EncoderConfig
from lobsurf.models.mamba2 import Mamba2Block, rms_norm

# benchmarks/ is on sys.path
from bench_fused_block import graphed_ms, micro_args, report_rows  # noqa: E402

#: (rows per program, columns per program, warps) tried, one program per (row tile, column
#: tile). Sixteenth session, H200, B = 1024 (ms): 64 x 64 x 4 0.138, x 8 0.164, 64 x 128 x
#: 8 0.177, 128 x 64 x 8 0.185, 64 x 32 x 4 0.170; the compiled PyTorch ops 0.107-0.109.
#: Dropped variants: one program per row tile through every column (64 x 32 x 8 0.148, the
#: rest 0.152-0.299) and the conv's shifts as 0/1-matrix products (0.164-0.226)
TILES = [(64, 64, 4), (64, 64, 8), (64, 128, 8), (128, 64, 8), (64, 32, 4)]
WINDOW = 64


def torch_path(block: Mamba2Block, h: torch.Tensor):
    m = block.mixer
    u = rms_norm(block.norm, h)
    proj = linear_padded_out(u, m.in_proj.weight, device_multiple(u, m.cfg.cuda_gemm_align_bytes))
    z, xbc, dt = m._split_proj(proj)
    xbc, _ = m._conv(xbc, None)
    return z, xbc, F.softplus(dt + m.dt_bias)


def kernel_path(block: Mamba2Block, h: torch.Tensor):
    m = block.mixer
    return ipc.in_proj_conv(h, block.norm.weight, block.norm.eps, m.in_proj.weight,
                            m.conv_weight, m.conv_bias, m.dt_bias, m.cfg.d_inner)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


def main() -> None:
    args = micro_args(__doc__)
    torch.manual_seed(0)
    cfg = EncoderConfig(fused_in_proj="torch")
    block = Mamba2Block(cfg).cuda()
    fused = Mamba2Block(dataclasses.replace(cfg, fused_in_proj="triton")).cuda()
    fused.load_state_dict(block.state_dict())
    rows = []
    for batch in (int(b) for b in args.batch.split(",")):
        h = torch.randn(batch, WINDOW, cfg.d_model, device="cuda").bfloat16()
        row = {"batch": batch}
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            compiled = torch.compile(lambda x: torch_path(block, x), dynamic=False)
            want = compiled(h)
            row["torch_ms"] = graphed_ms(lambda: compiled(h), args.reps)
            default = ipc.ROWS, ipc.BLOCK_N, ipc.WARPS
            for rows_, cols, warps in TILES:
                ipc.ROWS, ipc.BLOCK_N, ipc.WARPS = rows_, cols, warps
                got = kernel_path(block, h)
                key = f"kernel_r{rows_}_n{cols}_w{warps}"
                row[f"{key}_err"] = max(rel(a, b) for a, b in zip(got, want))
                row[f"{key}_ms"] = graphed_ms(lambda: kernel_path(block, h), args.reps)
            ipc.ROWS, ipc.BLOCK_N, ipc.WARPS = default
            for name, blk in (("torch", block), ("kernel", fused)):
                for last in (False, True):
                    fn = torch.compile(lambda x, b=blk, lo=last: b(x, last_only=lo),
                                       dynamic=False)
                    out = fn(h)
                    tag = f"block_{name}{'_last' if last else ''}"
                    row[f"{tag}_ms"] = graphed_ms(lambda f=fn: f(h), args.reps)
                    row[f"{tag}_out"] = out
        for last in ("", "_last"):
            row[f"block{last}_err"] = rel(row.pop(f"block_kernel{last}_out"),
                                          row.pop(f"block_torch{last}_out"))
        rows.append(row)
    report_rows(rows, "ms per call (CUDA graph replay), bf16; err = max relative error "
                "against torch", args.out, "in_proj_conv.json")


if __name__ == "__main__":
    main()
