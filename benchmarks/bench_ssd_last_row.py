"""The one-chunk SSD when only the last row is wanted (the encoder's last layer), on CUDA:
the last-row backward (``ssd_last_row_triton``) against the general backward on the
zero-padded gradient (what ran before it), and the last-row forward as vectors
(``scan_last_row = "vector"``) against the tile kernel, with and without the gate.

For each batch of windows (K = 64, the default block: P 64, N 64, H 4; xbc as conv_dt
writes it, [B, K, 384] contiguous), bf16, every call captured in a CUDA graph and replayed
(GPU time):

- ``padded``: dy [B, H P] placed in a zero [B, K, H P] tensor, then the general backward's
  two kernels (``_ssd_window_bwd_head``, ``_ssd_window_bwd_scores``);
- ``last_w{warps}``: ``ssd_window_bwd_last`` at each number of warps (its rel_diff: d xbc,
  d dt, d A and d D against ``padded``'s);
- ``fwd_bwd``: the op's forward with ``last_only`` and the backward through autograd
  (the last-row kernel, at ``ssd_window``'s default 4 warps) for scale;
- ``fwd_tile`` / ``gated_tile``: the forward's tile kernel (``_ssd_window_fwd``, 4 warps)
  with ``last_only``, without and with the gate (z [B, H P]);
- ``fwd_vector_w{warps}`` / ``gated_vector_w{warps}``: the vector forward at each number of
  warps (rel_diff: against the tile kernel's).

    python benchmarks/bench_ssd_last_row.py --batch 1024,2048 --out OUT
"""

from __future__ import annotations

import torch

from lobsurf.models.kernels import ssd_last_row_triton, ssd_window_triton

# benchmarks/ is on sys.path when this runs as a script
from micro import graphed_ms, micro_args, report_rows  # noqa: E402

#: warps per program of the last-row launches tried (2: the config's
#: ssd_window_warps_bwd_last and ssd_window_warps_fwd_last)
WARPS = (2, 4, 8)
HEADS, HEADDIM, D_STATE, WINDOW = 4, 64, 64, 64


def inputs(batch: int):
    g = torch.Generator(device="cuda").manual_seed(0)
    E = HEADS * HEADDIM
    xbc = torch.randn(batch, WINDOW, E + 2 * D_STATE, device="cuda", generator=g).bfloat16()
    dt = torch.nn.functional.softplus(
        torch.randn(batch, WINDOW, HEADS, device="cuda", generator=g) - 1)
    A = -(torch.rand(HEADS, device="cuda", generator=g) + 0.1)
    D = torch.randn(HEADS, device="cuda", generator=g)
    dy = torch.randn(batch, E, device="cuda", generator=g).bfloat16()
    return xbc, dt, A, D, dy


def _flat(grads) -> torch.Tensor:
    return torch.cat([t.float().flatten() for t in grads])


def rows_of(batch: int, reps: int) -> dict:
    xbc, dt, A, D, dy = inputs(batch)
    row: dict = {"batch": batch}

    def padded():
        full = torch.cat([dy.new_zeros(batch, WINDOW - 1, dy.shape[-1]), dy[:, None]], dim=1)
        return ssd_window_triton._ssd_window_bwd_op(full, xbc, dt, A, D, HEADDIM, D_STATE, 4)

    want = _flat(padded())
    row["padded_ms"] = graphed_ms(padded, reps)
    for warps in WARPS:

        def last(warps=warps):
            return ssd_last_row_triton.ssd_window_bwd_last(dy, xbc, dt, A, D, HEADDIM, D_STATE,
                                                           warps)

        got = _flat(last())
        row[f"last_w{warps}_ms"] = graphed_ms(last, reps)
        row[f"last_w{warps}_rel_diff"] = ((got - want).norm() / want.norm()).item()
    leaves = [t.clone().requires_grad_() for t in (xbc, dt, A, D)]

    def fwd_bwd():
        y = ssd_window_triton.ssd_window(*leaves, HEADDIM, D_STATE, last_only=True)
        return torch.autograd.grad(y, leaves, dy)

    row["fwd_bwd_ms"] = graphed_ms(fwd_bwd, reps)
    forward_rows(row, xbc, dt, A, D, reps)
    return row


def forward_rows(row: dict, xbc, dt, A, D, reps: int) -> None:
    """The last row's forwards, tile against vector, without and with the gate."""
    g = torch.Generator(device="cuda").manual_seed(1)
    z = torch.randn(xbc.shape[0], HEADS * HEADDIM, device="cuda", generator=g).bfloat16()
    w = 1 + 0.1 * torch.randn(HEADS * HEADDIM, device="cuda", generator=g)

    def plain(warps, vector):
        return ssd_window_triton.ssd_window(xbc, dt, A, D, HEADDIM, D_STATE, warps, 2, True,
                                            vector)

    def gated(warps, vector):
        return ssd_window_triton.ssd_window_gated(xbc, dt, A, D, z, w, HEADDIM, D_STATE, warps,
                                                  True, vector)[0]

    with torch.no_grad():
        for name, fn in (("fwd", plain), ("gated", gated)):
            want = fn(4, False).float()
            row[f"{name}_tile_ms"] = graphed_ms(lambda fn=fn: fn(4, False), reps)
            for warps in WARPS:
                got = fn(warps, True).float()
                row[f"{name}_vector_w{warps}_ms"] = graphed_ms(
                    lambda fn=fn, warps=warps: fn(warps, True), reps)
                row[f"{name}_vector_w{warps}_rel_diff"] = (
                    (got - want).norm() / want.norm()).item()


def main() -> None:
    args = micro_args(__doc__)
    rows = [rows_of(int(b), args.reps) for b in args.batch.split(",")]
    report_rows(rows, "ms per call (CUDA graph replay), bf16", args.out, "ssd_last_row.json")


if __name__ == "__main__":
    main()
