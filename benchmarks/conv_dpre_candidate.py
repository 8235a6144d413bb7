"""The next d pre kernel for ``conv_backend = "triton_dpre"``: a candidate, checked and timed
against the one in ``lobsurf.models.conv_triton`` before it replaces it.

The committed kernel takes [64 rows x 64 channels] tiles and sums d weight and d bias over
each tile's rows across threads: 154-156 us per call at B = 1024 on the H200, of which the
row sums are ~95 us (the tile without them: 53-63 us). This one gives a program one window
and 128 channels and walks the rows, keeping the last W-1 inputs in registers and the sums
in each thread's own registers: 87.5 us in the fourteenth session's timing of the same data
flow (benchmarks/RESULTS.md). The copy timed there shared one ``tl.zeros`` among its
loop-carried values, and Triton's code generator finds a loop's carried values by object
identity, so the input shifts x3 = x2, x2 = x1 were dropped on the GPU (d pre ~50 % off;
the CPU interpreter runs plain Python and got it right). Below, every carried value starts
from its own ``tl.zeros``; ``--ttir`` shows the loop's carried values (8: x1, x2, x3, four
tap sums and the bias sum) without a GPU. Not yet run on a GPU in this form:

    python benchmarks/conv_dpre_candidate.py --ttir             # any machine with Triton
    python benchmarks/conv_dpre_candidate.py --batch 1024      # CUDA: agreement and us
"""

from __future__ import annotations

import argparse
import inspect

import torch
import triton
import triton.language as tl

from lobsurf.models import conv_triton

#: channels per program, warps, software-pipelining stages (the fastest of those timed)
BLOCK_C, WARPS, STAGES = 128, 2, 3
#: the default block's conv input: in_proj width (padded), x's first column, channels, taps
WIDTH, FIRST, CHANNELS, TAPS = 648, 256, 384, 4


@triton.jit
def _rows_kernel(x_ptr, w_ptr, b_ptr, dout_ptr, dpre_ptr, part_ptr, L, C, s_b, s_l, s_db,
                 s_dl, s_pb, s_pl, W: tl.constexpr, BC: tl.constexpr, ALIGN: tl.constexpr,
                 STAGES: tl.constexpr):
    # One window's BC channels, row by row: the last W-1 inputs kept in registers (x1 =
    # x[t-1], ...), d pre written once per row, and the window's sums of d weight and
    # d bias accumulated per thread (its own channels), so no cross-thread reduction.
    # W <= 4: tap W-1-j multiplies x[t-j]. x's strides in units of ALIGN elements, as in
    # the production kernel.
    s_b = s_b * ALIGN
    s_l = s_l * ALIGN
    b = tl.program_id(0)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    cm = c < C
    # Every loop-carried value starts from a tl.zeros of its own: Triton's code generator
    # finds the values a loop carries by object identity, so with one shared zero the
    # shifts x3 = x2, x2 = x1 looked unchanged and stayed zero on the GPU (the CPU
    # interpreter runs plain Python and got it right; the GPU test caught it).
    w0 = tl.load(w_ptr + (W - 1) * C + c, mask=cm, other=0.0).to(tl.float32)
    w1 = tl.zeros((BC,), tl.float32)
    w2 = tl.zeros((BC,), tl.float32)
    w3 = tl.zeros((BC,), tl.float32)
    if W >= 2:
        w1 = tl.load(w_ptr + (W - 2) * C + c, mask=cm, other=0.0).to(tl.float32)
    if W >= 3:
        w2 = tl.load(w_ptr + (W - 3) * C + c, mask=cm, other=0.0).to(tl.float32)
    if W >= 4:
        w3 = tl.load(w_ptr + (W - 4) * C + c, mask=cm, other=0.0).to(tl.float32)
    bias = tl.load(b_ptr + c, mask=cm, other=0.0).to(tl.float32)
    x1 = tl.zeros((BC,), tl.float32)  # x[t-1], zero before t = 0
    x2 = tl.zeros((BC,), tl.float32)
    x3 = tl.zeros((BC,), tl.float32)
    a0 = tl.zeros((BC,), tl.float32)
    a1 = tl.zeros((BC,), tl.float32)
    a2 = tl.zeros((BC,), tl.float32)
    a3 = tl.zeros((BC,), tl.float32)
    a_bias = tl.zeros((BC,), tl.float32)
    for t in tl.range(0, L, num_stages=STAGES):
        x0 = tl.load(x_ptr + b * s_b + t * s_l + c, mask=cm, other=0.0).to(tl.float32)
        d = tl.load(dout_ptr + b * s_db + t * s_dl + c, mask=cm, other=0.0).to(tl.float32)
        pre = bias + w0 * x0 + w1 * x1 + w2 * x2 + w3 * x3
        sig = tl.sigmoid(pre)
        g = d * sig * (1.0 + pre * (1.0 - sig))
        tl.store(dpre_ptr + b * s_pb + t * s_pl + c, g.to(dpre_ptr.dtype.element_ty),
                 mask=cm)
        a0 += g * x0
        a1 += g * x1
        a2 += g * x2
        a3 += g * x3
        a_bias += g
        x3 = x2
        x2 = x1
        x1 = x0
    part = part_ptr + b * (W + 1) * C
    tl.store(part + (W - 1) * C + c, a0, mask=cm)
    if W >= 2:
        tl.store(part + (W - 2) * C + c, a1, mask=cm)
    if W >= 3:
        tl.store(part + (W - 3) * C + c, a2, mask=cm)
    if W >= 4:
        tl.store(part + (W - 4) * C + c, a3, mask=cm)
    tl.store(part + W * C + c, a_bias, mask=cm)


def rows_dpre(dout: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
              bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What ``conv_triton._conv_dpre_op`` returns (d pre, d weight, d bias), by the candidate."""
    batch, length, channels = x.shape
    width = weight.shape[0]
    align = conv_triton._row_alignment(x)
    dout = dout.contiguous()
    dpre = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    part = torch.empty(batch, width + 1, channels, device=x.device, dtype=torch.float32)
    _rows_kernel[(batch, triton.cdiv(channels, BLOCK_C))](
        x, weight.contiguous(), bias.contiguous(), dout, dpre, part, length, channels,
        x.stride(0) // align, x.stride(1) // align, dout.stride(0), dout.stride(1),
        dpre.stride(0), dpre.stride(1), W=width, BC=BLOCK_C, ALIGN=align, STAGES=STAGES,
        num_warps=WARPS)
    return dpre, part[:, :width].sum(0).to(weight.dtype), part[:, width].sum(0).to(bias.dtype)


def carried_values() -> str:
    """The row loop's scf.for line of the kernel compiled for sm_90 (no GPU needed)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    consts = {"W": TAPS, "BC": BLOCK_C, "ALIGN": 8, "STAGES": STAGES}
    sig = {name: "constexpr" if name in consts else
           ("*fp32" if name == "part_ptr" else "*bf16") if name.endswith("_ptr") else "i32"
           for name in inspect.signature(_rows_kernel.fn).parameters}
    compiled = triton.compile(ASTSource(_rows_kernel, sig, consts),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": WARPS})
    return next(line.strip() for line in compiled.asm["ttir"].splitlines() if "scf.for" in line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ttir", action="store_true", help="print the row loop's carried values")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    if args.ttir:
        print(carried_values()[:400])
        return
    from bench_fused_block import graphed_ms  # noqa: E402  (benchmarks/ is on sys.path)

    g = torch.Generator(device="cuda").manual_seed(args.batch)
    proj = torch.randn(args.batch, 64, WIDTH, device="cuda", generator=g).bfloat16()
    x = proj[..., FIRST:FIRST + CHANNELS]
    weight = (0.5 * torch.randn(TAPS, CHANNELS, device="cuda", generator=g)).bfloat16()
    bias = (0.5 * torch.randn(CHANNELS, device="cuda", generator=g)).bfloat16()
    dout = torch.randn(args.batch, 64, CHANNELS, device="cuda", generator=g).bfloat16()
    want = conv_triton._conv_dpre_op(dout, x, weight, bias)
    got = rows_dpre(dout, x, weight, bias)
    for name, a, b in zip(("d pre", "d weight", "d bias"), got, want):
        err = ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
        print(f"{name}: max relative difference to the committed kernel {err:.1e}")
    print(f"committed kernel {graphed_ms(lambda: conv_triton._conv_dpre_op(dout, x, weight, bias), args.reps) * 1e3:.1f} us, "
          f"candidate {graphed_ms(lambda: rows_dpre(dout, x, weight, bias), args.reps) * 1e3:.1f} us")


if __name__ == "__main__":
    main()
