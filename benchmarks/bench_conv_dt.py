"""The backward kernel of ``conv_backend = "triton_dx"`` (``conv_dt_triton.py``) per tile,
against the d pre kernel of ``"triton_fwd"`` (``conv_triton``) it replaces, on CUDA.

The default layer (384 conv channels, 4 heads, 4 padding columns: the in-projection's
[x | B | C | dt | pad] slice, 392 columns) in bf16, windows of 64, every call captured in a
CUDA graph and replayed (GPU time), per batch of windows:

- ``dpre``: ``conv_triton``'s d pre kernel on the same slice (d pre and the weight sums;
  Inductor then reads d pre back at the conv's shifts and assembles the in-projection
  gradient, not timed here);
- ``dx_r{rows}_c{channels}_w{warps}_s{stages}``: the ``triton_dx`` backward kernel per
  setting (rows whose loads issue together, channels per program, warps, pipelining
  stages), with its gradient's max relative error against the first setting's;
- ``dx_z_ms``: the default setting (its channel block by the batch) with the z columns'
  gradient copied as well (``encoder.one_in_projection``: the whole 648-column
  projection, d z of 256 columns);
- ``bytes_floor_ms``: its bytes (x, d out, d dt read once, d x written once) at the HBM
  peak (4.8 TB/s).

    python benchmarks/bench_conv_dt.py --batch 1024,2048 --out OUT
"""

from __future__ import annotations

import torch

from lobsurf.models.kernels import conv_dt_triton as cdt
from lobsurf.models.kernels import conv_triton

# benchmarks/ is on sys.path
from micro import graphed_ms, micro_args, report_rows  # noqa: E402

#: (rows per step, channels per program, warps, stages) tried
TILES = [(1, 128, 1, 3), (4, 128, 1, 3), (4, 128, 1, 1), (4, 128, 1, 2), (4, 64, 1, 3),
         (4, 128, 2, 3), (4, 256, 2, 3), (4, 64, 1, 1)]
WINDOW, CHANNELS, HEADS, COLUMNS, WIDTH, Z_WIDTH = 64, 384, 4, 392, 4, 256
HBM_TB_S = 4.8


def main() -> None:
    args = micro_args(__doc__)
    torch.manual_seed(0)
    rows = []
    for batch in (int(b) for b in args.batch.split(",")):
        xbcdt = torch.randn(batch, WINDOW, COLUMNS, device="cuda").bfloat16()
        w = torch.randn(WIDTH, CHANNELS, device="cuda").bfloat16()
        b = torch.randn(CHANNELS, device="cuda").bfloat16()
        dt_bias = torch.randn(HEADS, device="cuda")
        dxbc = torch.randn(batch, WINDOW, CHANNELS, device="cuda").bfloat16()
        ddt = torch.randn(batch, WINDOW, HEADS, device="cuda")
        moved = (xbcdt[..., :CHANNELS + HEADS].numel() * 2 + dxbc.numel() * 2
                 + ddt.numel() * 4 + xbcdt.numel() * 2)
        row = {"batch": batch, "bytes_floor_ms": moved / HBM_TB_S / 1e9}
        x = xbcdt[..., :CHANNELS]
        row["dpre_ms"] = graphed_ms(lambda: conv_triton._conv_dpre_op(dxbc, x, w, b), args.reps)
        # a tile's channels apply at every batch (both the small batches' block and the
        # large ones'); restored after
        default = cdt.ROWS_PER_STEP, cdt.BLOCK_C, cdt.BLOCK_C_SMALL, cdt.WARPS, cdt.STAGES

        def bwd():
            return cdt._conv_dt_bwd_op(dxbc, ddt, None, xbcdt, w, b, dt_bias, CHANNELS, 0)

        first = None
        for tile in TILES:
            rows_step, block, warps, stages = tile
            cdt.ROWS_PER_STEP, cdt.BLOCK_C, cdt.BLOCK_C_SMALL = rows_step, block, block
            cdt.WARPS, cdt.STAGES = warps, stages
            key = "dx_r{}_c{}_w{}_s{}".format(*tile)
            got = bwd()[0].double()
            first = got if first is None else first
            row[f"{key}_err"] = ((got - first).abs().max() / first.abs().max()).item()
            row[f"{key}_ms"] = graphed_ms(bwd, args.reps)
        cdt.ROWS_PER_STEP, cdt.BLOCK_C, cdt.BLOCK_C_SMALL, cdt.WARPS, cdt.STAGES = default
        # the default tile with the z columns' gradient copied too (one_in_projection):
        # the whole [z | xBC | dt | pad] projection, d z [rows, E]
        proj = torch.randn(batch, WINDOW, Z_WIDTH + COLUMNS, device="cuda").bfloat16()
        dz = torch.randn(batch, WINDOW, Z_WIDTH, device="cuda").bfloat16()
        row["dx_z_ms"] = graphed_ms(lambda: cdt._conv_dt_bwd_op(
            dxbc, ddt, dz, proj, w, b, dt_bias, CHANNELS, Z_WIDTH), args.reps)
        rows.append(row)
    report_rows(rows, "ms per call (CUDA graph replay), bf16; err = max relative difference "
                "to the first setting", args.out, "conv_dt.json")


if __name__ == "__main__":
    main()
