"""The causal conv + SiLU's kernels: Inductor's (``conv_backend = "torch"``) against the
d pre kernel (``"triton_dpre"``) and the forward kernel with it (``"triton_fwd"``), on CUDA.

The default block's conv (C = E + 2N = 384 channels, W = 4, K = 64) on its real input
layout, the in_proj output's slice (row stride 648 in bf16), bf16, every call captured in a
CUDA graph and replayed (GPU time):

- ``torch`` / ``triton_dpre`` / ``triton_fwd``: forward + backward of the conv alone,
  torch.compile'd, with the gradients' agreement (relative max error against the float64
  conv);
- ``nograd_torch`` / ``nograd_fwd``: the forward without autograd (the acting and target
  forwards), compiled, and its output's agreement;
- ``kernel``: ``lobsurf::conv_dpre`` alone per (channels per program, warps); ``fwd``: the
  forward's tile kernel alone per (rows, channels per program, warps); ``walk``: the
  forward's row walk (the default, ``FWD_WALK_ROWS``) alone per (rows a step, channels per
  program, warps, stages), with its output's max relative difference to the tile kernel's;
- ``fwd_bytes_floor_ms``: the forward's bytes (x read once, out written once) at the HBM
  peak (4.8 TB/s).

    python benchmarks/bench_conv_dpre.py --batch 1024 --out OUT
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lobsurf.models.kernels import conv_triton

# benchmarks/ is on sys.path
from micro import graphed_ms, micro_args, report_rows  # noqa: E402

#: (channels per program, warps) of the d pre kernel's row loop tried. Fourteenth session,
#: B = 1024: the row loop 128 x 2 87.5 us, 128 x 1 88.0, 256 x 2 and more up to 97.0; the
#: [64-row] tile kernel it replaced 64 x 4 154 us, 64 x 8 228, 32 x 4 176, 128 x 8 272
TILES = [(128, 2), (128, 1), (64, 2)]
#: (rows, channels per program, warps) of the forward kernel's tiles tried
FWD_TILES = [(64, 64, 4), (64, 32, 4), (32, 64, 4), (64, 128, 4), (64, 128, 8), (32, 128, 4)]
#: (rows a step, channels per program, warps, stages) of the forward's row walk tried
WALKS = [(4, 128, 1, 3), (1, 128, 1, 3), (4, 128, 1, 2), (4, 64, 1, 3), (4, 128, 2, 3),
         (4, 256, 2, 3), (4, 128, 1, 4)]
HBM_TB_S = 4.8
#: the default block: in_proj width (padded), x's first column (E), channels, taps, window
WIDTH, FIRST, CHANNELS, TAPS, WINDOW = 648, 256, 384, 4, 64


def torch_conv(x, weight, bias):
    padded = F.pad(x, (0, 0, weight.shape[0] - 1, 0))
    return conv_triton.torch_conv_silu(padded, weight, bias, x.shape[1])


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b).abs().max() / b.abs().max()).item()


def main() -> None:
    args = micro_args(__doc__, batch="1024")
    rows = []
    for batch in (int(b) for b in args.batch.split(",")):
        g = torch.Generator(device="cuda").manual_seed(batch)
        proj = torch.randn(batch, WINDOW, WIDTH, device="cuda", generator=g).bfloat16()
        proj.requires_grad_()
        weight = (0.5 * torch.randn(TAPS, CHANNELS, device="cuda", generator=g)).bfloat16()
        bias = (0.5 * torch.randn(CHANNELS, device="cuda", generator=g)).bfloat16()
        weight.requires_grad_()
        bias.requires_grad_()
        dout = torch.randn(batch, WINDOW, CHANNELS, device="cuda", generator=g).bfloat16()
        leaves = (proj, weight, bias)
        ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
        out_ref = torch_conv(ref_leaves[0][..., FIRST:FIRST + CHANNELS], *ref_leaves[1:])
        ref_grads = torch.autograd.grad((out_ref * dout.double()).sum(), ref_leaves)
        row = {"batch": batch}
        paths = (("torch", torch_conv), ("triton_dpre", conv_triton.conv_silu_dpre),
                 ("triton_fwd", conv_triton.conv_silu_fwd_dpre))
        for name, conv in paths:
            compiled = torch.compile(conv, dynamic=False)

            def step(compiled=compiled):
                out = compiled(proj[..., FIRST:FIRST + CHANNELS], weight, bias)
                return torch.autograd.grad(out, leaves, dout)

            grads = step()
            row[f"{name}_err"] = max(rel(a, r) for a, r in zip(grads, ref_grads))
            row[f"{name}_ms"] = graphed_ms(step, args.reps)
        x = proj.detach()[..., FIRST:FIRST + CHANNELS]
        w_, b_ = weight.detach(), bias.detach()
        for name, conv in (("torch", torch_conv), ("fwd", conv_triton.conv_silu_fwd_dpre)):
            compiled = torch.compile(conv, dynamic=False)
            with torch.no_grad():
                row[f"nograd_{name}_err"] = rel(compiled(x, w_, b_), out_ref.detach())
                row[f"nograd_{name}_ms"] = graphed_ms(lambda c=compiled: c(x, w_, b_),
                                                      args.reps)
        row["fwd_bytes_floor_ms"] = 2 * x.numel() * x.element_size() / HBM_TB_S / 1e9
        walk_default = (conv_triton.FWD_WALK_ROWS, conv_triton.FWD_WALK_BLOCK_C,
                        conv_triton.FWD_WALK_WARPS, conv_triton.FWD_WALK_STAGES)
        conv_triton.FWD_WALK_ROWS = 0  # the tile kernel
        tile_out = conv_triton._conv_silu_op(x, w_, b_).double()
        for rows_, channels, warps in FWD_TILES:
            conv_triton.FWD_BLOCK_T, conv_triton.FWD_BLOCK_C = rows_, channels
            conv_triton.FWD_WARPS = warps
            row[f"fwd_t{rows_}_c{channels}_w{warps}_ms"] = graphed_ms(
                lambda: conv_triton._conv_silu_op(x, w_, b_), args.reps)
        for walk in WALKS:
            (conv_triton.FWD_WALK_ROWS, conv_triton.FWD_WALK_BLOCK_C,
             conv_triton.FWD_WALK_WARPS, conv_triton.FWD_WALK_STAGES) = walk
            key = "walk_r{}_c{}_w{}_s{}".format(*walk)
            row[f"{key}_err"] = rel(conv_triton._conv_silu_op(x, w_, b_), tile_out)
            row[f"{key}_ms"] = graphed_ms(lambda: conv_triton._conv_silu_op(x, w_, b_),
                                          args.reps)
        (conv_triton.FWD_WALK_ROWS, conv_triton.FWD_WALK_BLOCK_C, conv_triton.FWD_WALK_WARPS,
         conv_triton.FWD_WALK_STAGES) = walk_default
        for channels, warps in TILES:
            conv_triton.DPRE_BLOCK_C, conv_triton.DPRE_WARPS = channels, warps
            row[f"kernel_c{channels}_w{warps}_ms"] = graphed_ms(
                lambda: conv_triton._conv_dpre_op(dout, x, weight.detach(), bias.detach()),
                args.reps)
        rows.append(row)
    report_rows(rows, "ms per call (CUDA graph replay); err = max relative gradient error vs "
                "float64", args.out, "conv_dpre.json")


if __name__ == "__main__":
    main()
