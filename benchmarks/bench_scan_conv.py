"""The conv + SiLU and dt softplus inside the gated scan's kernel (``encoder.scan_conv``),
on CUDA.

For each batch of windows (K = 64, the default block: P 64, N 64, H 4; x B C, dt and z
strided views of the 648-wide in-projection as in the step), bf16, no autograd, every call
captured in a CUDA graph and replayed (GPU time), every row and the last row only (the
encoder's last layer):

- ``apart``: the conv kernel (``conv_triton.conv_silu``), PyTorch's softplus, then
  ``ssd_window_gated`` (``scan_conv = "torch"``: what the kernel replaces);
- ``fused_{head|window}_w{warps}``: ``ssd_window_gated_conv`` with one program per
  (window, head) or per window (``per_head``), at each number of warps; rel_diff: its
  g w against ``apart``'s.

    python benchmarks/bench_scan_conv.py --batch 1024,2048 --out OUT
"""

from __future__ import annotations

import torch

from lobsurf.models import conv_triton, ssd_window_conv_triton, ssd_window_triton

# benchmarks/ is on sys.path when this runs as a script
from bench_fused_block import graphed_ms, run_batches  # noqa: E402

#: (one program per (window, head), warps) of the fused launches tried
LAUNCHES = ((True, 4), (True, 8), (False, 4), (False, 8))
HEADS, HEADDIM, D_STATE, WINDOW, PROJ, WIDTH = 4, 64, 64, 64, 648, 4


def inputs(batch: int):
    g = torch.Generator(device="cuda").manual_seed(0)
    E = HEADS * HEADDIM
    C = E + 2 * D_STATE
    proj = torch.randn(batch, WINDOW, PROJ, device="cuda", generator=g).bfloat16()
    z, pre, raw = proj[..., :E], proj[..., E:E + C], proj[..., E + C:E + C + HEADS]
    conv_w = (0.5 * torch.randn(WIDTH, C, device="cuda", generator=g)).bfloat16()
    conv_b = (0.1 * torch.randn(C, device="cuda", generator=g)).bfloat16()
    dt_bias = torch.randn(HEADS, device="cuda", generator=g) - 2
    A = -(torch.rand(HEADS, device="cuda", generator=g) + 0.1)
    D = torch.randn(HEADS, device="cuda", generator=g)
    w = 1 + 0.1 * torch.randn(E, device="cuda", generator=g)
    return pre, raw, conv_w, conv_b, dt_bias, A, D, z, w


def rows_of(batch: int, reps: int) -> dict:
    pre, raw, conv_w, conv_b, dt_bias, A, D, z, w = inputs(batch)
    row: dict = {"batch": batch}
    for last in (False, True):
        zz = z[:, -1].contiguous() if last else z
        tag = "last" if last else "all"

        def apart(last=last, zz=zz):
            xbc = conv_triton.conv_silu(pre, conv_w, conv_b)
            dt = torch.nn.functional.softplus(raw + dt_bias)
            return ssd_window_triton.ssd_window_gated(xbc, dt, A, D, zz, w, HEADDIM, D_STATE,
                                                      4, last)

        with torch.no_grad():
            row[f"{tag}_apart_ms"] = graphed_ms(apart, reps)
            want = apart()[0].float()
            for per_head, warps in LAUNCHES:
                name = f"{tag}_fused_{'head' if per_head else 'window'}_w{warps}"

                def fused(warps=warps, last=last, zz=zz, per_head=per_head):
                    return ssd_window_conv_triton.ssd_window_gated_conv(
                        pre, raw, conv_w, conv_b, dt_bias, A, D, zz, w, HEADDIM, D_STATE,
                        warps, last, per_head)

                row[f"{name}_ms"] = graphed_ms(fused, reps)
                got = fused()[0].float()
                row[f"{name}_rel_diff"] = ((got - want).norm() / want.norm()).item()
    return row


def main() -> None:
    run_batches(__doc__, rows_of, "\nms per call (CUDA graph replay), bf16, no autograd; "
                "rel_diff: g w against apart's", "scan_conv.json")


if __name__ == "__main__":
    main()
