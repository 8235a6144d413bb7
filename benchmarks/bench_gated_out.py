"""The output side of a Mamba2 layer under autograd (``encoder.gated_out``,
``gated_out_triton.py``) against the PyTorch path it replaces, on CUDA.

The default layer (d_model 128, E 256) in bf16 over windows of 64 rows, each call captured
in a CUDA graph and replayed (GPU time), per batch of windows:

- ``torch_fwd_ms`` / ``torch_fwd_bwd_ms``: z = u W_z^T, the gated norm and the
  out-projection as the mixer's PyTorch code writes them (``mamba2.gated_rms_norm``),
  compiled by Inductor, forward alone and forward + backward (the gradients of u, y, W_z
  and W_o);
- ``kernel_fwd_ms`` / ``kernel_fwd_bwd_ms``: the same through ``gated_out_triton.gated_out``
  (its two weight-gradient products included);
- ``kernel_bwd_err``: the largest relative difference of the kernel's gradients from the
  compiled PyTorch ones (both bf16);
- ``r{rows}_c{channels}_w{fwd warps}/{bwd warps}_s{stages}_ms``: forward + backward with
  the kernels' module settings (``gated_out_triton.ROWS``, ``CHANNELS``, ``WARPS_FWD``,
  ``WARPS_BWD``, ``STAGES``) set to each of ``TILES`` (``_err``: the gradients' largest
  relative difference from the defaults'; a setting that does not launch records its
  error);
- ``floor_fwd_ms`` / ``floor_bwd_ms``: the kernels' HBM bytes at the peak (4.8 TB/s).

    python benchmarks/bench_gated_out.py --batch 256,1024 --out OUT
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lobsurf.models.kernels import gated_out_triton
from lobsurf.models.mamba2 import gated_rms_norm

# benchmarks/ is on sys.path
from micro import graphed_ms, run_batches  # noqa: E402

WINDOW, D_MODEL, D_INNER, EPS = 64, 128, 256, 1e-5
#: (rows a program, channels a step, forward warps, backward warps, stages) tried
TILES = [(64, 64, 8, 8, 1), (32, 64, 4, 8, 1), (128, 64, 8, 8, 1), (64, 32, 8, 8, 1),
         (64, 128, 8, 8, 1), (64, 64, 4, 4, 1), (64, 64, 8, 8, 2), (32, 32, 4, 4, 2)]
SETTINGS = ("ROWS", "CHANNELS", "WARPS_FWD", "WARPS_BWD", "STAGES")
HBM_TB_S = 4.8
BYTES = 2  # bf16


def torch_side(u, y, w_z, w_o):
    """The mixer's PyTorch output side (z apart, norm weight folded into w_o)."""
    return F.linear(gated_rms_norm(y, F.linear(u, w_z), None, EPS), w_o)


def kernel_side(u, y, w_z, w_o):
    return gated_out_triton.gated_out(u, y, w_z, w_o, EPS)


def _fwd_bwd(side, leaves, dout):
    def run():
        out = side(*leaves)
        return torch.autograd.grad(out, leaves, dout)
    return run


def row_of(batch: int, reps: int) -> dict:
    torch.manual_seed(0)
    rows = batch * WINDOW
    leaves = [torch.randn(batch, WINDOW, D_MODEL, device="cuda").bfloat16().requires_grad_(),
              torch.randn(batch, WINDOW, D_INNER, device="cuda").bfloat16().requires_grad_(),
              (torch.randn(D_INNER, D_MODEL, device="cuda") / D_MODEL ** 0.5).bfloat16()
              .requires_grad_(),
              (torch.randn(D_MODEL, D_INNER, device="cuda") / D_INNER ** 0.5).bfloat16()
              .requires_grad_()]
    dout = torch.randn(batch, WINDOW, D_MODEL, device="cuda").bfloat16()
    compiled = torch.compile(torch_side)
    row = {"batch": batch}
    with torch.no_grad():
        row["torch_fwd_ms"] = graphed_ms(lambda: compiled(*leaves), reps)
        row["kernel_fwd_ms"] = graphed_ms(lambda: kernel_side(*leaves), reps)
    row["torch_fwd_bwd_ms"] = graphed_ms(_fwd_bwd(compiled, leaves, dout), reps)
    row["kernel_fwd_bwd_ms"] = graphed_ms(_fwd_bwd(kernel_side, leaves, dout), reps)
    want = _fwd_bwd(compiled, leaves, dout)()
    got = _fwd_bwd(kernel_side, leaves, dout)()
    row["kernel_bwd_err"] = max(((g.double() - w.double()).norm() / w.double().norm()).item()
                                for g, w in zip(got, want))
    default = tuple(getattr(gated_out_triton, name) for name in SETTINGS)
    for tile in TILES:
        key = "r{}_c{}_w{}/{}_s{}".format(*tile)
        for name, value in zip(SETTINGS, tile):
            setattr(gated_out_triton, name, value)
        try:
            grads = _fwd_bwd(kernel_side, leaves, dout)()
            row[f"{key}_err"] = max(((g.double() - w.double()).norm()
                                     / w.double().norm()).item() for g, w in zip(grads, got))
            row[f"{key}_ms"] = graphed_ms(_fwd_bwd(kernel_side, leaves, dout), reps)
        except Exception as exc:  # a setting past the GPU's registers or shared memory
            row[f"{key}_ms"] = f"failed: {type(exc).__name__}"
        finally:
            for name, value in zip(SETTINGS, default):
                setattr(gated_out_triton, name, value)
    # forward: u, y read; n, out written. backward: d out, out, u, y read; d y, d z, d u
    # written; the weight gradients read d z, u, d out, n
    wide, narrow = rows * D_INNER * BYTES, rows * D_MODEL * BYTES
    row["floor_fwd_ms"] = (narrow + wide + wide + narrow) / HBM_TB_S / 1e9
    row["floor_bwd_ms"] = (3 * narrow + wide + 2 * wide + narrow
                           + wide + narrow + narrow + wide) / HBM_TB_S / 1e9
    return row


if __name__ == "__main__":
    run_batches(__doc__, row_of, "ms per call (CUDA graph replay), bf16; err = relative "
                "difference of the kernel's gradients from compiled PyTorch's",
                "gated_out.json")
