"""The Mamba2 mixer's output side under autograd in one kernel each way: z's product, the
gate, the gated RMS norm and the out-projection (``EncoderConfig.gated_out``).

The function, per row of the window (``mamba2.Mamba2Mixer.forward`` where z is projected
apart: the conv + dt backward kernel's path, and the last layer's last row):

    z   = u W_z^T                       u: the block's normalised input [D], W_z [E, D]
    g   = y * SiLU(z)                   y: the scan's output [E]
    n   = g / sqrt(mean(g^2) + eps)     the gated norm without its weight
    out = n W_o^T                       W_o [D, E]: the out-projection with the norm's
                                        weight in its columns (``fold_norm_weights``)

Why: under autograd the PyTorch path runs z's product (z written, [rows, E]), Inductor's
norm (y and z read, n written) and the out-projection (n read) forwards, and in the
backward the out-projection's data gradient (d n written), Inductor's norm and gate
backward (d n, y and z read, d y and d z written) and z's data gradient (d z read, d u
written): at B = 256 windows of 64 rows, E = 256, bf16, 8 MB for each [rows, E] pass. The
thirty-second session found the backward's layers bound by the bytes they move (benchmarks/
RESULTS.md). Here one program per ``ROWS`` rows walks the E channels ``CHANNELS`` at a
time and keeps everything between the products in registers:

- forward, two passes: z's chunk from u and W_z's rows (a tile product), g, and the rows'
  sums of g^2; then z and g again, n (stored: the out-projection's weight gradient needs
  it) and out += n W_o^T over the chunk (a second product); the rows' 1 / rms stored; z is
  never written;
- backward, one pass: the norm's backward needs each row's mean of d n * n over all E
  channels before any channel's d g, and since out = n W_o^T and d n = d out W_o, that sum
  is d out . out, over the D columns the program already holds; then per chunk z again, d
  n = d out W_o (a product), the norm's and the gate's backward, d y and d z stored, and
  d u += d z W_z (a third product), stored at the end.

The two weight gradients (d W_z = d z^T u, d W_o = d out^T n) are cuBLAS products outside
the kernels, where Inductor places them. Per layer at B = 256 (16,384 rows, bf16: 8 MB a
[rows, E] pass, 4 a [rows, D] one) the HBM bytes go from about 48 MB to 24 forward (no z
written or read, n not read back) and from 88 to 64 backward (no d n written or read, no z
read, d z read once, by its weight gradient), counting y's second read in the forward as
an L2 hit.

Statistics, the gate and the norm are fp32; the products take their operands in the
activations' dtype (bf16 under autocast) with fp32 sums, like the PyTorch path's; z and
d n stay fp32 in registers (the PyTorch path rounds z to bf16 before the gate). The PyTorch
ops stay the CPU path and the reference (the tests compare the interpreter's run of these
kernels against float64). Not yet timed on a GPU: off by default.
"""

from __future__ import annotations

import torch

from lobsurf.models.kernels.triton_support import MIN_TILE, is_tile_side, product_flags

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the PyTorch ops run instead
    triton = None

ROWS = 64
"""Rows per program (both kernels). Every program reads both weights (W_z and W_o, 64 KB
each in bf16 at the default shape) from L2, so fewer rows a program means more L2 traffic:
at 64 rows and B = 256, 256 programs read 32 MB backward and 48 forward (W_z twice). At 64
rows, 8 warps, sm_90: bf16 forward 128 registers, backward 255, neither spilling, 32 and 64
KB of shared memory; fp32 (TF32) 64 and 128 KB, the backward spilling 456 bytes (Triton
3.9's compile and ptxas, ``benchmarks/kernel_resources.py``). Not timed."""
CHANNELS = 64
"""Channels per step of the kernels' walk over E (the [ROWS, CHANNELS] tiles of z, y, d n
that a step holds)."""
WARPS_FWD = 8
"""Triton warps per program of the forward kernel."""
WARPS_BWD = 8
"""Triton warps per program of the backward kernel."""
STAGES = 1
"""Triton's software pipelining stages of the walk over E (``num_stages``): more stages
buffer the next steps' weight and y chunks in shared memory (at 2, fp32: 197 and 213 KB,
near the H200's 227 KB a block; at Triton's default 3 beyond it)."""


def supports(d_inner: int, d_model: int) -> bool:
    """Whether the kernels take this shape: power-of-two E and D of at least ``MIN_TILE``
    (each program holds whole rows as tl.dot tiles), with Triton importable."""
    return triton is not None and is_tile_side(d_inner) and is_tile_side(d_model)


if triton is not None:
    from lobsurf.models.kernels.triton_support import as_stored as _kept
    from lobsurf.models.kernels.triton_support import tile_dot as _dot

    @triton.jit
    def _z_chunk(u, wz_ptr, ec, D: tl.constexpr, BF16: tl.constexpr, PREC: tl.constexpr):
        # (z = u W_z^T on the channels ec, fp32 [BM, EC]; those rows of W_z [EC, D])
        d = tl.arange(0, D)
        wz = tl.load(wz_ptr + ec[:, None] * D + d[None, :])
        return _dot(u, tl.trans(wz), BF16, PREC), wz

    @triton.jit
    def _gated_out_fwd_kernel(u_ptr, y_ptr, wz_ptr, wo_ptr, out_ptr, n_ptr, rstd_ptr, rows,
                              s_u, s_y, eps, E: tl.constexpr, D: tl.constexpr,
                              BM: tl.constexpr, EC: tl.constexpr, BF16: tl.constexpr,
                              PREC: tl.constexpr):
        # two passes over the channels, EC at a time: the rows' sums of g^2, then n and the
        # out-projection (z recomputed, y read again from L2: the whole [BM, E] row tiles
        # would not fit in registers beside the products')
        r = tl.program_id(0) * BM + tl.arange(0, BM)
        rm = r < rows
        d = tl.arange(0, D)
        u = tl.load(u_ptr + r[:, None] * s_u + d[None, :], mask=rm[:, None], other=0.0)
        ss = tl.zeros((BM,), dtype=tl.float32)
        for c0 in tl.range(0, E, EC):
            ec = c0 + tl.arange(0, EC)
            z, _wz = _z_chunk(u, wz_ptr, ec, D, BF16, PREC)
            y = tl.load(y_ptr + r[:, None] * s_y + ec[None, :], mask=rm[:, None], other=0.0)
            g = y.to(tl.float32) * z * tl.sigmoid(z)
            ss += tl.sum(g * g, 1)
        rstd = tl.rsqrt(ss / E + eps)
        tl.store(rstd_ptr + r, rstd, mask=rm)
        out = tl.zeros((BM, D), dtype=tl.float32)
        for c0 in tl.range(0, E, EC):
            ec = c0 + tl.arange(0, EC)
            z, _wz = _z_chunk(u, wz_ptr, ec, D, BF16, PREC)
            y = tl.load(y_ptr + r[:, None] * s_y + ec[None, :], mask=rm[:, None], other=0.0)
            n = _kept(y.to(tl.float32) * z * tl.sigmoid(z) * rstd[:, None], BF16)
            tl.store(n_ptr + r[:, None] * E + ec[None, :], n.to(n_ptr.dtype.element_ty),
                     mask=rm[:, None])
            wo = tl.load(wo_ptr + d[:, None] * E + ec[None, :])  # W_o's columns ec, [D, EC]
            out += _dot(n, tl.trans(wo), BF16, PREC)
        tl.store(out_ptr + r[:, None] * D + d[None, :], _kept(out, BF16).to(out_ptr.dtype.element_ty),
                 mask=rm[:, None])

    @triton.jit
    def _gated_out_bwd_kernel(dout_ptr, out_ptr, u_ptr, y_ptr, wz_ptr, wo_ptr, rstd_ptr, dy_ptr,
                              dz_ptr, du_ptr, rows, s_do, s_u, s_y, E: tl.constexpr,
                              D: tl.constexpr, BM: tl.constexpr, EC: tl.constexpr,
                              BF16: tl.constexpr, PREC: tl.constexpr):
        # one pass over the channels, EC at a time. The norm's backward needs each row's
        # mean of d n * n over all E channels before any channel's d g; since out = n W_o^T
        # and d n = d out W_o, that sum is d out . out, over D columns the program holds
        r = tl.program_id(0) * BM + tl.arange(0, BM)
        rm = r < rows
        d = tl.arange(0, D)
        dout = tl.load(dout_ptr + r[:, None] * s_do + d[None, :], mask=rm[:, None], other=0.0)
        out = tl.load(out_ptr + r[:, None] * D + d[None, :], mask=rm[:, None], other=0.0)
        mean_dn_n = tl.sum(dout.to(tl.float32) * out.to(tl.float32), 1) / E
        rstd = tl.load(rstd_ptr + r, mask=rm, other=0.0)
        u = tl.load(u_ptr + r[:, None] * s_u + d[None, :], mask=rm[:, None], other=0.0)
        du = tl.zeros((BM, D), dtype=tl.float32)
        for c0 in tl.range(0, E, EC):
            ec = c0 + tl.arange(0, EC)
            z, wz = _z_chunk(u, wz_ptr, ec, D, BF16, PREC)
            wo = tl.load(wo_ptr + d[:, None] * E + ec[None, :])  # [D, EC]
            dn = _dot(dout, wo, BF16, PREC)
            y = tl.load(y_ptr + r[:, None] * s_y + ec[None, :], mask=rm[:, None],
                        other=0.0).to(tl.float32)
            sig = tl.sigmoid(z)
            silu = z * sig
            # RMS norm: d g = rstd (d n - n mean(d n * n))
            dg = rstd[:, None] * (dn - y * silu * rstd[:, None] * mean_dn_n[:, None])
            dy = _kept(dg * silu, BF16)
            dz = _kept(dg * y * sig * (1.0 + z * (1.0 - sig)), BF16)
            tl.store(dy_ptr + r[:, None] * E + ec[None, :], dy.to(dy_ptr.dtype.element_ty),
                     mask=rm[:, None])
            tl.store(dz_ptr + r[:, None] * E + ec[None, :], dz.to(dz_ptr.dtype.element_ty),
                     mask=rm[:, None])
            du += _dot(dz, wz, BF16, PREC)
        tl.store(du_ptr + r[:, None] * D + d[None, :], _kept(du, BF16).to(du_ptr.dtype.element_ty),
                 mask=rm[:, None])


def _rows(t: torch.Tensor) -> torch.Tensor:
    # t [..., width] as [rows, width] with unit column stride (a view where one exists)
    flat = t.reshape(-1, t.shape[-1])
    return flat if flat.stride(-1) == 1 else flat.contiguous()


def gated_out(u: torch.Tensor, y: torch.Tensor, w_z: torch.Tensor, w_o: torch.Tensor,
              eps: float) -> torch.Tensor:
    """out = RMSNorm(y * SiLU(u W_z^T)) W_o^T over the last axis, in y's dtype.

    Args:
        u: [..., D] the block's normalised input (with its norm's weight folded into W_z,
            or applied); y: [..., E] the scan's output (with the D skip), the same leading
            shape; w_z: [E, D] z's rows of the in-projection; w_o: [D, E] the out-projection
            with the gated norm's weight in its columns. u and the weights are cast to y's
            dtype (what autocast gives the PyTorch path's products).

    Returns:
        [..., D]. Differentiable in u, y, w_z and w_o.
    """
    if y.shape[:-1] != u.shape[:-1]:
        raise ValueError(f"gated_out: u {tuple(u.shape)} and y {tuple(y.shape)} rows differ")
    E, D = y.shape[-1], u.shape[-1]
    if w_z.shape != (E, D) or w_o.shape != (D, E):
        raise ValueError(f"gated_out: w_z {tuple(w_z.shape)} must be {(E, D)} and w_o "
                         f"{tuple(w_o.shape)} {(D, E)}")
    if not supports(E, D):
        raise ValueError(f"gated_out: E {E} and D {D} must be powers of two >= {MIN_TILE}")
    dtype = y.dtype
    out = _gated_out_op(_rows(u.to(dtype)), _rows(y),
                        w_z.to(dtype).contiguous(), w_o.to(dtype).contiguous(), eps)[0]
    return out.view(*y.shape[:-1], D)


def _programs(rows: int) -> tuple[int]:
    return (triton.cdiv(rows, ROWS),)


@torch.library.custom_op("lobsurf::gated_out", mutates_args=())
def _gated_out_op(u: torch.Tensor, y: torch.Tensor, w_z: torch.Tensor, w_o: torch.Tensor,
                  eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # (out [rows, D], n [rows, E] in y's dtype, 1 / rms [rows] fp32)
    rows, E = y.shape
    D = u.shape[1]
    out, n, rstd = _outputs_like(u, y)
    if rows:
        _gated_out_fwd_kernel[_programs(rows)](
            u, y, w_z, w_o, out, n, rstd, rows, u.stride(0), y.stride(0), eps, E=E, D=D,
            BM=ROWS, EC=min(E, CHANNELS), **product_flags(y, "gated_out"),
            num_warps=WARPS_FWD, num_stages=STAGES)
    return out, n, rstd


def _outputs_like(u: torch.Tensor, y: torch.Tensor):
    rows, E = y.shape
    return (y.new_empty(rows, u.shape[1]), y.new_empty(rows, E),
            y.new_empty(rows, dtype=torch.float32))


@_gated_out_op.register_fake
def _(u, y, w_z, w_o, eps):
    return _outputs_like(u, y)


@torch.library.custom_op("lobsurf::gated_out_bwd", mutates_args=())
def _gated_out_bwd_op(dout: torch.Tensor, out: torch.Tensor, u: torch.Tensor, y: torch.Tensor,
                      w_z: torch.Tensor, w_o: torch.Tensor, rstd: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # (d u [rows, D], d y [rows, E], d z [rows, E]) in y's dtype
    rows, E = y.shape
    D = u.shape[1]
    dout = dout.to(y.dtype)
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    du, dy, dz = _grads_like(u, y)
    if rows:
        _gated_out_bwd_kernel[_programs(rows)](
            dout, out, u, y, w_z, w_o, rstd, dy, dz, du, rows, dout.stride(0), u.stride(0),
            y.stride(0), E=E, D=D, BM=ROWS, EC=min(E, CHANNELS),
            **product_flags(y, "gated_out"), num_warps=WARPS_BWD, num_stages=STAGES)
    return du, dy, dz


def _grads_like(u: torch.Tensor, y: torch.Tensor):
    rows, E = y.shape
    return (y.new_empty(rows, u.shape[1]), y.new_empty(rows, E), y.new_empty(rows, E))


@_gated_out_bwd_op.register_fake
def _(dout, out, u, y, w_z, w_o, rstd):
    return _grads_like(u, y)


def _setup_context(ctx, inputs, output):
    u, y, w_z, w_o, _eps = inputs
    out, n, rstd = output
    ctx.save_for_backward(out, u, y, w_z, w_o, n, rstd)
    ctx.mark_non_differentiable(n, rstd)


def _backward(ctx, dout, _dn, _drstd):
    out, u, y, w_z, w_o, n, rstd = ctx.saved_tensors
    du, dy, dz = _gated_out_bwd_op(dout, out, u, y, w_z, w_o, rstd)
    # the weight gradients as products over the rows (cuBLAS, outside the op, where
    # Inductor schedules them): d W_z = d z^T u, d W_o = d out^T n
    dw_z = dz.t().mm(u)
    dw_o = dout.to(y.dtype).t().mm(n)
    return du, dy, dw_z, dw_o, None


_gated_out_op.register_autograd(_backward, setup_context=_setup_context)
