"""The Mamba2 block's pre-norm, in-projection, causal conv + SiLU and dt softplus in one
Triton kernel, for the forwards without autograd (acting on B windows, the target net on 2B).

Per token of a window (the PyTorch block's first ops, ``mamba2.Mamba2Block.forward``):

    u             = RMSNorm(h) * norm.weight                       [D]
    [z, v, dt_r]  = W_in u                                         in_proj, "Order:" in mamba2
    xBC           = SiLU(conv_bias + sum_k conv_w[k] * v[t - (W-1) + k])    zeros before t = 0
    dt            = softplus(dt_r + dt_bias)                       fp32

Why: compiled PyTorch runs these as four kernels over [rows, 648] activations: the norm
writes u, cuBLAS writes the whole projection, the conv reads its [rows, 384] slice and
writes xBC, and dt is one more pass. Here one program per (whole windows, column tile of
[z | xBC | dt]) reads h's rows (from L2 after the first column tile), normalises them, and
writes its columns once; the projection never reaches memory. The conv's shifts are row
gathers of the projection tile (``tl.gather``), so each projection column is computed
once. The projection is rounded to the activation dtype before the conv, as the PyTorch
block's bf16 projection output is.

**Slower on the H200 where it counts, so opt-in** (``EncoderConfig.fused_in_proj``,
default "torch"; benchmarks/RESULTS.md, sixteenth session): at B = 1024 in bf16 the
kernel takes 0.138 ms against 0.107 for the compiled PyTorch ops it replaces (best of the
tiles in ``benchmarks/bench_in_proj_conv.py``; a program per row tile through every
column, 0.148, and the shifts as 0/1-matrix products, 0.164, were slower still and are
gone), and the B = 1024 / 2-layer step fell from 357.6 to 300.7 steps/s with it in the
acting and target forwards. At B = 16, where the step is launch-bound, it is faster:
1,969.4 against 1,866.7 steps/s (226 graph nodes against 240).

Products run in bf16 (under bf16 autocast or for bf16 inputs, fp32 sums) or fp32 (TF32 where
the run enables it), the norm, conv, SiLU and softplus in fp32. No backward: forwards with
autograd keep the PyTorch path. The PyTorch block stays the CPU path and the reference
(tests compare both with a float64 numpy reference). Registered as
``torch.ops.lobsurf.in_proj_conv`` so torch.compile treats it as one opaque call and CUDA
graphs capture it.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # installs without Triton: the PyTorch block runs instead
    triton = None

ROWS = 64
"""Rows per program (whole windows: one window of 64, or several shorter ones)."""
BLOCK_N = 64
"""Projection columns per program (z, xBC in tiles of this many; dt in one tile of its own)."""
WARPS = 4
"""Triton warps per program."""
MAX_WINDOW = 128
"""The longest window the kernel takes (its tile holds whole windows)."""
_DT_TILE = 16  # the smallest tile side tl.dot accepts: the H dt columns padded to it

if triton is not None:
    from lobsurf.models.conv_dt_triton import softplus
    from lobsurf.models.mamba2_fused import _dot, _round_bf16

    @triton.jit
    def _project(u, w_ptr, row0, rows_end, D: tl.constexpr, BN: tl.constexpr,
                 BF16: tl.constexpr, TF32: tl.constexpr):
        # u [ROWS, D] @ W_in[row0:row0 + BN]^T, rows of W_in at or past rows_end read as 0
        d = tl.arange(0, D)
        c = row0 + tl.arange(0, BN)
        w = tl.load(w_ptr + c[None, :] * D + d[:, None], mask=(c < rows_end)[None, :],
                    other=0.0)
        v = _dot(u, w.to(tl.float32) if BF16 != 1 else w, BF16, TF32)
        if BF16:  # the PyTorch block's projection output is in the activation dtype
            v = _round_bf16(v, BF16)
        return v

    @triton.jit
    def _normed_tile(h_ptr, norm_w_ptr, n_windows, L, eps, D: tl.constexpr, KL: tl.constexpr,
                     ROWS_: tl.constexpr, BF16: tl.constexpr):
        # Tile row i holds time t = i % KL of window pid * (ROWS_ // KL) + i // KL; rows
        # with t >= L (a window shorter than its power-of-two slot) or past the last window
        # are masked. A tile starts at a window's first row, so the conv's rows t - j are
        # rows i - j of the same tile wherever t >= j. Returns u = RMSNorm(h) * weight in
        # the products' dtype, and the rows' tile index, time, window, row and validity.
        i = tl.arange(0, ROWS_)
        t = i % KL
        win = tl.program_id(0) * (ROWS_ // KL) + i // KL
        valid = (t < L) & (win < n_windows)
        row = win * L + t  # row of the [B * L, ...] inputs and outputs
        d = tl.arange(0, D)
        hx = tl.load(h_ptr + row[:, None] * D + d[None, :], mask=valid[:, None],
                     other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(hx * hx, axis=1) / D + eps)
        u = hx * rstd[:, None] * tl.load(norm_w_ptr + d).to(tl.float32)[None, :]
        if BF16 == 1:
            u = u.to(tl.bfloat16)
        elif BF16 == 2:
            u = _round_bf16(u, BF16)
        return u, i, t, win, row, valid

    @triton.jit
    def _z_tile(u, w_ptr, z_ptr, n0, t, win, row, valid, L, D: tl.constexpr,
                E: tl.constexpr, BN: tl.constexpr, LAST_ONLY: tl.constexpr,
                BF16: tl.constexpr, TF32: tl.constexpr):
        # the gate z's columns n0.. (each window's last row only, for the last layer)
        cols = n0 + tl.arange(0, BN)
        zv = _project(u, w_ptr, n0, E, D, BN, BF16, TF32)  # rounded to bf16 there
        keep = valid[:, None] & (cols < E)[None, :]
        if LAST_ONLY:
            tl.store(z_ptr + win[:, None] * E + cols[None, :], zv.to(z_ptr.dtype.element_ty),
                     mask=keep & (t == L - 1)[:, None])
        else:
            tl.store(z_ptr + row[:, None] * E + cols[None, :], zv.to(z_ptr.dtype.element_ty),
                     mask=keep)

    @triton.jit
    def _xbc_tile(u, w_ptr, conv_w_ptr, conv_b_ptr, xbc_ptr, n0, i, t, row, valid,
                  D: tl.constexpr, E: tl.constexpr, C: tl.constexpr, WIDTH: tl.constexpr,
                  ROWS_: tl.constexpr, BN: tl.constexpr, BF16: tl.constexpr,
                  TF32: tl.constexpr):
        # xBC's columns n0..: the conv over each column's rows, its shifts gathered from the
        # projection tile
        cols = tl.arange(0, BN)
        c = n0 + cols
        cm = c < C
        v = _project(u, w_ptr, E + n0, E + C, D, BN, BF16, TF32)
        pre = tl.zeros((ROWS_, BN), dtype=tl.float32) \
            + tl.load(conv_b_ptr + c, mask=cm, other=0.0).to(tl.float32)[None, :]
        for j in tl.static_range(WIDTH):
            # tap WIDTH-1-j reads the input j steps back (zero before the window)
            wj = tl.load(conv_w_ptr + (WIDTH - 1 - j) * C + c, mask=cm,
                         other=0.0).to(tl.float32)
            if j == 0:
                pre += wj[None, :] * v
            else:
                src = tl.maximum(i - j, 0)[:, None] + cols[None, :] * 0
                back = tl.gather(v, src, axis=0)
                pre += wj[None, :] * tl.where((t >= j)[:, None], back, 0.0)
        out = pre * tl.sigmoid(pre)
        if BF16 == 2:
            out = _round_bf16(out, BF16)
        tl.store(xbc_ptr + row[:, None] * C + c[None, :], out.to(xbc_ptr.dtype.element_ty),
                 mask=valid[:, None] & cm[None, :])

    @triton.jit
    def _dt_tile(u, w_ptr, dt_bias_ptr, dt_ptr, row, valid, D: tl.constexpr,
                 E: tl.constexpr, C: tl.constexpr, H: tl.constexpr, HT: tl.constexpr,
                 BF16: tl.constexpr, TF32: tl.constexpr):
        # dt = softplus(dt_raw + dt_bias), fp32 (PyTorch's threshold 20)
        hh = tl.arange(0, HT)
        hm = hh < H
        raw = _project(u, w_ptr, E + C, E + C + H, D, HT, BF16, TF32) \
            + tl.load(dt_bias_ptr + hh, mask=hm, other=0.0).to(tl.float32)[None, :]
        dt = softplus(raw)
        tl.store(dt_ptr + row[:, None] * H + hh[None, :], dt,
                 mask=valid[:, None] & hm[None, :])

    @triton.jit
    def _in_proj_conv_kernel(h_ptr, norm_w_ptr, w_ptr, conv_w_ptr, conv_b_ptr, dt_bias_ptr,
                             z_ptr, xbc_ptr, dt_ptr, n_windows, L, eps,
                             D: tl.constexpr, E: tl.constexpr, C: tl.constexpr,
                             H: tl.constexpr, WIDTH: tl.constexpr, KL: tl.constexpr,
                             ROWS_: tl.constexpr, BN: tl.constexpr, HT: tl.constexpr,
                             LAST_ONLY: tl.constexpr, BF16: tl.constexpr,
                             TF32: tl.constexpr):
        # one program per (row tile, column tile of [z | xBC | dt]), each normalising its
        # rows itself (h's tile is read from L2 by every column tile of it)
        u, i, t, win, row, valid = _normed_tile(h_ptr, norm_w_ptr, n_windows, L, eps, D, KL,
                                                ROWS_, BF16)
        NZ: tl.constexpr = (E + BN - 1) // BN
        NX: tl.constexpr = (C + BN - 1) // BN
        n = tl.program_id(1)
        if n < NZ:
            _z_tile(u, w_ptr, z_ptr, n * BN, t, win, row, valid, L, D, E, BN, LAST_ONLY,
                    BF16, TF32)
        elif n < NZ + NX:
            _xbc_tile(u, w_ptr, conv_w_ptr, conv_b_ptr, xbc_ptr, (n - NZ) * BN, i, t, row,
                      valid, D, E, C, WIDTH, ROWS_, BN, BF16, TF32)
        else:
            _dt_tile(u, w_ptr, dt_bias_ptr, dt_ptr, row, valid, D, E, C, H, HT, BF16, TF32)


def supports(d_model: int, length: int) -> bool:
    """Shapes the kernel covers: a power-of-two d_model >= 16, windows of <= MAX_WINDOW."""
    return d_model >= 16 and d_model & (d_model - 1) == 0 and 1 <= length <= MAX_WINDOW


def in_proj_conv(h: torch.Tensor, norm_w: torch.Tensor, eps: float, w_in: torch.Tensor,
                 conv_w: torch.Tensor, conv_b: torch.Tensor, dt_bias: torch.Tensor,
                 d_inner: int, last_only: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(z, xBC, dt) of a Mamba2 block's windows h [B, L, D], without autograd.

    Args:
        h: block inputs (before the pre-norm). norm_w [D], eps: the pre-norm.
        w_in: the in-projection's weight, rows [z (E), x, B, C (C), dt (H), padding].
        conv_w: [W, C] (tap k reads the input W-1-k steps back); conv_b: [C]. dt_bias: [H].
        d_inner: E.
        last_only: z of each window's last row only.

    Returns:
        z [B, L, E] (or [B, E]) and xBC [B, L, C] in the activation dtype (bf16 under bf16
        autocast, else h's), dt [B, L, H] fp32.
    """
    autocast_bf16 = (torch.is_autocast_enabled(h.device.type)
                     and torch.get_autocast_dtype(h.device.type) == torch.bfloat16)
    return _in_proj_conv_op(h, norm_w, eps, w_in, conv_w, conv_b, dt_bias, d_inner,
                            last_only, autocast_bf16)


def _out_shapes(h: torch.Tensor, conv_w: torch.Tensor, dt_bias: torch.Tensor, d_inner: int,
                last_only: bool) -> tuple[tuple[int, ...], ...]:
    batch, length, _ = h.shape
    z = (batch, d_inner) if last_only else (batch, length, d_inner)
    return z, (batch, length, conv_w.shape[1]), (batch, length, dt_bias.shape[0])


@torch.library.custom_op("lobsurf::in_proj_conv", mutates_args=())
def _in_proj_conv_op(h: torch.Tensor, norm_w: torch.Tensor, eps: float, w_in: torch.Tensor,
                     conv_w: torch.Tensor, conv_b: torch.Tensor, dt_bias: torch.Tensor,
                     d_inner: int, last_only: bool, autocast_bf16: bool
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    batch, length, d_model = h.shape
    if not supports(d_model, length):
        raise ValueError(f"in_proj_conv: needs a power-of-two d_model >= 16 and windows of "
                         f"at most {MAX_WINDOW}; got d_model {d_model}, window {length}")
    width, channels = conv_w.shape
    heads = dt_bias.shape[0]
    if w_in.shape[0] < d_inner + channels + heads or w_in.shape[1] != d_model:
        raise ValueError(f"in_proj_conv: in_proj weight {tuple(w_in.shape)} is not "
                         f"[>= {d_inner + channels + heads}, {d_model}]")
    bf16 = autocast_bf16 or h.dtype == torch.bfloat16
    act = torch.bfloat16 if bf16 else h.dtype
    z_shape, xbc_shape, dt_shape = _out_shapes(h, conv_w, dt_bias, d_inner, last_only)
    z = torch.empty(z_shape, device=h.device, dtype=act)
    xbc = torch.empty(xbc_shape, device=h.device, dtype=act)
    dt = torch.empty(dt_shape, device=h.device, dtype=torch.float32)
    slot = max(16, triton.next_power_of_2(length))  # a window's rows in the tile
    rows = max(ROWS, slot)
    tf32 = torch.backends.cuda.matmul.fp32_precision == "tf32"
    columns = triton.cdiv(d_inner, BLOCK_N) + triton.cdiv(channels, BLOCK_N) + 1
    grid = (triton.cdiv(batch, rows // slot), columns)
    _in_proj_conv_kernel[grid](
        h.contiguous(), norm_w.contiguous(), w_in.contiguous(), conv_w.contiguous(),
        conv_b.contiguous(), dt_bias.contiguous(), z, xbc, dt, batch, length, eps,
        D=d_model, E=d_inner, C=channels, H=heads, WIDTH=width, KL=slot, ROWS_=rows,
        BN=BLOCK_N, HT=max(_DT_TILE, triton.next_power_of_2(heads)), LAST_ONLY=last_only,
        BF16=(1 if h.is_cuda else 2) if bf16 else 0,
        TF32=tf32 and not bf16 and h.is_cuda, num_warps=WARPS)
    return z, xbc, dt


@_in_proj_conv_op.register_fake
def _(h, norm_w, eps, w_in, conv_w, conv_b, dt_bias, d_inner, last_only, autocast_bf16):
    act = torch.bfloat16 if autocast_bf16 or h.dtype == torch.bfloat16 else h.dtype
    z_shape, xbc_shape, dt_shape = _out_shapes(h, conv_w, dt_bias, d_inner, last_only)
    return (h.new_empty(z_shape, dtype=act), h.new_empty(xbc_shape, dtype=act),
            h.new_empty(dt_shape, dtype=torch.float32))
