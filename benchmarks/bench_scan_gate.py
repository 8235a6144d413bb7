"""The gated norm's gate inside the one-chunk scan kernel (``encoder.scan_gate``), on CUDA.

For each batch of windows (K = 64, the default block: P 64, N 64, H 4, z a strided view of
the 648-wide in-projection as in the step), bf16, no autograd, every call captured in a CUDA
graph and replayed (GPU time), every row and the last row only (the encoder's last layer):

- ``scan``: the scan alone (y = SSD + D x), what the gate is added to;
- ``scan_norm``: the scan, then the gated norm RMSNorm(y SiLU(z)) w compiled by
  torch.compile (``scan_gate = "torch"``);
- ``gated_w{warps}``: ``ssd_window_gated`` alone (g w and the sums of
  squares) at each number of warps; in the step the per-row 1 / rms is applied after the
  out-projection, in the kernel Inductor writes for the residual add (its rel_diff: the
  normalised rows against ``scan_norm``'s).

    python benchmarks/bench_scan_gate.py --batch 1024,2048 --out OUT
"""

from __future__ import annotations

import torch

from lobsurf.models.kernels import ssd_window_triton
from lobsurf.models.mamba2 import gated_rms_norm

# benchmarks/ is on sys.path when this runs as a script
from micro import graphed_ms, run_batches  # noqa: E402

#: warps per program of the gated launches tried (4: the config's ssd_window_warps_fwd)
WARPS = (4, 8)
HEADS, HEADDIM, D_STATE, WINDOW, PROJ = 4, 64, 64, 64, 648
EPS = 1e-5


def inputs(batch: int):
    g = torch.Generator(device="cuda").manual_seed(0)
    E = HEADS * HEADDIM
    proj = torch.randn(batch, WINDOW, PROJ, device="cuda", generator=g).bfloat16()
    z, xbc = proj[..., :E], proj[..., E:2 * E + 2 * D_STATE]
    dt = torch.nn.functional.softplus(
        torch.randn(batch, WINDOW, HEADS, device="cuda", generator=g) - 1)
    A = -(torch.rand(HEADS, device="cuda", generator=g) + 0.1)
    D = torch.randn(HEADS, device="cuda", generator=g)
    w = 1 + 0.1 * torch.randn(E, device="cuda", generator=g)
    return xbc, dt, A, D, z, w


def rows_of(batch: int, reps: int) -> dict:
    xbc, dt, A, D, z, w = inputs(batch)
    row: dict = {"batch": batch}
    for last in (False, True):
        zz = z[:, -1].contiguous() if last else z
        tag = "last" if last else "all"

        def scan(last=last):
            return ssd_window_triton.ssd_window(xbc, dt, A, D, HEADDIM, D_STATE, 4, 4, last)

        def scan_norm_eager(last=last, zz=zz):
            y = ssd_window_triton.ssd_window(xbc, dt, A, D, HEADDIM, D_STATE, 4, 4, last)
            return gated_rms_norm(y, zz, w, EPS)

        scan_norm = torch.compile(scan_norm_eager, dynamic=False)
        with torch.no_grad():
            row[f"{tag}_scan_ms"] = graphed_ms(scan, reps)
            row[f"{tag}_scan_norm_ms"] = graphed_ms(scan_norm, reps)
            want = scan_norm().float()
            for warps in WARPS:
                name = f"{tag}_gated_w{warps}"

                def gated(warps=warps, last=last, zz=zz):
                    return ssd_window_triton.ssd_window_gated(xbc, dt, A, D, zz, w, HEADDIM,
                                                              D_STATE, warps, last)

                row[f"{name}_ms"] = graphed_ms(gated, reps)
                gw, ss = gated()
                got = gw.float() * torch.rsqrt(ss.sum(-1, keepdim=True) / (HEADS * HEADDIM) + EPS)
                row[f"{name}_rel_diff"] = ((got - want).norm() / want.norm()).item()
    return row


def main() -> None:
    run_batches(__doc__, rows_of, "\nms per call (CUDA graph replay), bf16, no autograd; "
                "rel_diff: the normalised rows against scan_norm's", "scan_gate.json")


if __name__ == "__main__":
    main()
