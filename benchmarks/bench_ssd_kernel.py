"""Fused Triton SSD scan vs the PyTorch chunked scan: agreement and time, forward+backward.

Usage (GPU only): python benchmarks/bench_ssd_kernel.py --out $OUT [--warps-file PATH]

For the two benchmark head layouts (B=1024; K=64, H=4 and K=128, H=8; P=N=64, chunk 64) it
checks that ``ssd_triton.ssd_scan`` and ``ssd.ssd_chunked`` agree (output and gradients, TF32
on both), then times the Triton kernels for each (forward warps, backward warps) choice and
the eager PyTorch scan, with ``triton.testing.do_bench`` (median, ms). The byte floor is the
op's own HBM traffic (xbc, dt read; y written; backward: those plus dy read, d xbc and d dt
written) at 4.3 TB/s. ``--warps-file`` receives the fastest "fwd bwd" pair at the first shape.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch

try:
    import lobsurf  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lobsurf.models.ssd import ssd_chunked  # noqa: E402
from lobsurf.models.kernels.ssd_triton import ssd_scan  # noqa: E402

HBM_BYTES_PER_S = 4.3e12
SHAPES = ((1024, 64, 4), (1024, 128, 8))  # (batch, length, heads); P = N = 64
P = N = CHUNK = 64
WARPS = (4, 8)
AGREE_RTOL = 5e-3  # TF32 dots on both sides


def torch_scan(xbc, dt, A, heads):
    x, B, C = torch.split(xbc, (heads * P, N, N), dim=-1)
    batch, length, _ = xbc.shape
    return ssd_chunked(x.reshape(batch, length, heads, P), dt, A, B, C, CHUNK).reshape(
        batch, length, heads * P)


def fwd_bwd(fn, leaves, dy):
    def run():
        return torch.autograd.grad(fn(*leaves), leaves, dy)
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--warps-file", type=Path, default=None)
    args = parser.parse_args()
    from triton.testing import do_bench
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    rows = []
    for batch, length, heads in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(length)
        xbc = torch.randn(batch, length, heads * P + 2 * N, device="cuda", generator=g)
        dt = torch.nn.functional.softplus(torch.randn(batch, length, heads, device="cuda",
                                                      generator=g) - 3.0)
        A = -torch.rand(heads, device="cuda", generator=g) * 15.0 - 1.0
        leaves = [t.requires_grad_() for t in (xbc, dt, A)]
        dy = torch.randn(batch, length, heads * P, device="cuda", generator=g)
        ref = fwd_bwd(lambda *a: torch_scan(*a, heads), leaves, dy)
        ref_y = torch_scan(*leaves, heads).detach()
        ref_g = ref()
        ms_torch = do_bench(ref, return_mode="median")
        tok = batch * length
        floor_ms = 1e3 * tok * 4 * (2 * (heads * P + 2 * N + heads) + heads * P * 2
                                    + heads * P) / HBM_BYTES_PER_S
        for wf, wb in itertools.product(WARPS, WARPS):
            def tri(*a, wf=wf, wb=wb):
                return ssd_scan(*a, P, N, CHUNK, wf, wb)
            y = tri(*leaves).detach()
            grads = fwd_bwd(tri, leaves, dy)()
            err = [((a - b).norm() / b.norm()).item() for a, b in zip((y, *grads),
                                                                      (ref_y, *ref_g))]
            row = {"batch": batch, "length": length, "heads": heads, "warps_fwd": wf,
                   "warps_bwd": wb, "rel_err_y_dxbc_ddt_dA": err,
                   "ms_fwd": do_bench(lambda: tri(*leaves), return_mode="median"),
                   "ms_fwd_bwd": do_bench(fwd_bwd(tri, leaves, dy), return_mode="median"),
                   "ms_torch_eager_fwd_bwd": ms_torch, "floor_ms_fwd_bwd": floor_ms}
            assert max(err) < AGREE_RTOL, row
            rows.append(row)
            print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_ssd_kernel.json").write_text(json.dumps(rows, indent=1))
    first = [r for r in rows if r["length"] == SHAPES[0][1]]
    best = min(first, key=lambda r: r["ms_fwd_bwd"])
    if args.warps_file:
        args.warps_file.write_text(f"{best['warps_fwd']} {best['warps_bwd']}\n")
    print(f"\n{'B':>5} {'L':>4} {'H':>2} {'wf':>3} {'wb':>3} {'fwd ms':>7} {'f+b ms':>7} "
          f"{'torch f+b':>9} {'floor':>6} {'max err':>8}")
    for r in rows:
        print(f"{r['batch']:5d} {r['length']:4d} {r['heads']:2d} {r['warps_fwd']:3d} "
              f"{r['warps_bwd']:3d} {r['ms_fwd']:7.3f} {r['ms_fwd_bwd']:7.3f} "
              f"{r['ms_torch_eager_fwd_bwd']:9.3f} {r['floor_ms_fwd_bwd']:6.3f} "
              f"{max(r['rel_err_y_dxbc_ddt_dA']):8.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
