"""Triton kernels of the SSD over windows of one chunk (L <= chunk_size), with the D skip.

Same function as ``ssd.ssd_chunked`` plus ``D * x`` for a window with no initial state
that fits in one chunk (the default model: K = 64 = chunk_size). That PyTorch path stays
the CPU path, the reference and the fallback. The Mamba2 mixer runs these kernels on CUDA
(its ``kernels`` mode, ``triton_support``), the last layer's last-row call (``last_only``)
included, whose forward and backward are ``ssd_last_row_triton``'s.

What it removes from the compiled PyTorch scan: the [B, H, Q, Q] masked weights and the
head-major copies of dt x, y and dy that cuBLAS's batched products need, written to HBM and
read back (in the backward too). Here the [Q, Q] tiles live in registers, except one per
(window, head) that the backward stages for the sum over heads:

- forward, one program per (window b, head h): scores = C B^T, the decay
  exp(cum_i - cum_j) masked to j <= i, y = (scores o decay) (dt x) + D x, stored
  token-major straight into y [B, L, H P]; in forwards without autograd
  (``ssd_window_gated``) the same program also applies the gated norm's gate SiLU(z) and
  weight and stores each row's sum of squares per head, so the norm's own pass over y and
  z is gone; on every row it can compute z = u W_z^T itself from the block's normalised
  input (``ssd_window_gated_projected``), so the in-projection never writes z;
- backward in two kernels: one program per (window, head) computes d(dt x), d cum (row
  minus column sums of d m o m, then the reverse cumsum), d dt, d x and the head's partial
  sums of d A and d D, and stores its d scores term [Q, Q]; then one program per window sums
  those over heads in a fixed order (no atomics) and forms d C = dS B and d B = dS^T C.
  d x, d B and d C are written into one d xbc [B, L, E + 2N] in the input's layout.
  (A single program per window looping over the heads, d scores kept in registers, was
  slower: 255 registers with spills.)

Products take their operands in the input dtype (bf16 under autocast) and accumulate in
fp32; the decay, its cumsum and exp are fp32. fp32 inputs use TF32 dots when
torch.backends.cuda.matmul.fp32_precision is "tf32", IEEE fp32 otherwise.

Registered as ``torch.ops.lobsurf.ssd_window`` (a custom op with autograd) so torch.compile
treats it as one opaque call and CUDA graphs capture it. Runs on CUDA, and on CPU tensors
under Triton's interpreter (TRITON_INTERPRET=1), which the tests use.
"""

from __future__ import annotations

import torch

from lobsurf.models.kernels import conv_triton, ssd_last_row_triton
from lobsurf.models.kernels.ssd_window_shared import grad_buffers, partial_grads_like, tile_flags
from lobsurf.models.kernels.triton_support import MIN_TILE, is_tile_side

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the PyTorch scan is used instead
    triton = None

# Launch constants (benchmarks/RESULTS.md, Defaults decided by measurement).
#: Triton warps per (window, head) program of the forward kernel (``_ssd_window_fwd``: the
#: scan, the gated scan, the projected gate); 4 ran faster than 8
WARPS_FWD = 4
#: Triton warps per program of the backward's two kernels (per (window, head), per window)
WARPS_BWD = 4
#: columns of u per step of the projected gate's z product (``ssd_window_gated_projected``):
#: at d_model 128, sm_90, bf16, 4 warps, ptxas gives the whole [Q, 128] product 198
#: registers, steps of 32 columns 168, of 64 128 (as the gated scan without it)
Z_PROJ_COLUMNS = 64


def triton_available() -> bool:
    """True when Triton imports (the kernels can then run on CUDA tensors)."""
    return triton is not None


def supports(headdim: int, d_state: int, length: int, chunk: int) -> bool:
    """Whether the kernels take this shape: power-of-two headdim and d_state >= 16 (tl.dot
    tiles) and a window of one chunk (L <= chunk_size, so the scan has no inter-chunk pass)."""

    return (triton is not None and is_tile_side(headdim) and is_tile_side(d_state)
            and length <= chunk)


if triton is not None:
    # the tile products and the stores every kernel here takes (triton_support: the
    # interpreter's bf16 emulated)
    from lobsurf.models.kernels.triton_support import as_stored as _stored
    from lobsurf.models.kernels.triton_support import round_bf16
    from lobsurf.models.kernels.triton_support import tile_dot as _mma

    @triton.jit
    def _window_decay(dt_ptr, b, h, s_dtb, s_dtl, A, L, Q: tl.constexpr):
        # dt [Q] of head h (0 past the window) with its cum and decay (``decay_of``)
        i = tl.arange(0, Q)
        valid = i < L
        dt = tl.load(dt_ptr + b * s_dtb + i * s_dtl + h, mask=valid, other=0.0).to(tl.float32)
        cum, decay = decay_of(dt, A, Q)
        return dt, cum, decay

    @triton.jit
    def decay_of(dt, A, Q: tl.constexpr):
        # cum [Q] = cumsum(dt A) and the masked decay [Q, Q] = exp(cum_i - cum_j) for j <= i,
        # else 0 (masked before the exp)
        i = tl.arange(0, Q)
        cum = tl.cumsum(dt * A, 0)
        causal = i[:, None] >= i[None, :]
        seg = tl.where(causal, cum[:, None] - cum[None, :], float("-inf"))
        return cum, tl.exp(seg)

    @triton.jit
    def _ssd_window_fwd(xbc_ptr, dt_ptr, a_ptr, d_ptr, y_ptr, z_ptr, w_ptr, ss_ptr, wz_ptr, L,
                        H, s_b, s_l, s_dtb, s_dtl, s_yb, s_yl, s_zb, s_zl, s_ssb, s_ssl,
                        E: tl.constexpr, N: tl.constexpr, P: tl.constexpr, Q: tl.constexpr,
                        GATED: tl.constexpr, ZALIGN: tl.constexpr, ZPROJ: tl.constexpr,
                        ZK: tl.constexpr, BF16: tl.constexpr, PREC: tl.constexpr):
        # y of window b, head h, every row, into y [B, L, H P].
        # GATED: g = y SiLU(z) instead, stored times the norm weight w, with the row's sum
        # of g^2 over the head's P channels into ss [B, L, H] (the gated norm's statistic).
        # z's strides come in units of ZALIGN elements, so that Triton, which specializes an
        # integer only when it is a multiple of 16, sees rows of the in-projection (648 wide)
        # 16-byte aligned and loads them in vectors, not 2 bytes at a time.
        # ZPROJ > 0: z_ptr is the block's normalised input u [B, L, ZPROJ] and z = u Wz^T is
        # computed here from wz [E, ZPROJ] (the in-projection's z rows), so the in-projection
        # never writes z and this kernel never reads it back; its product runs over ZK
        # columns of u at a time
        pid = tl.program_id(0)
        b = pid // H
        h = pid % H
        i = tl.arange(0, Q)
        p = tl.arange(0, P)
        n = tl.arange(0, N)
        valid = (i < L)[:, None]
        row = xbc_ptr + b * s_b + i[:, None] * s_l
        x = tl.load(row + h * P + p[None, :], mask=valid, other=0.0)  # [Q, P] input dtype
        Bm = tl.load(row + E + n[None, :], mask=valid, other=0.0)  # [Q, N]
        Cm = tl.load(row + E + N + n[None, :], mask=valid, other=0.0)  # [Q, N]
        A = tl.load(a_ptr + h).to(tl.float32)
        Dh = tl.load(d_ptr + h).to(tl.float32)
        dt, _cum, decay = _window_decay(dt_ptr, b, h, s_dtb, s_dtl, A, L, Q)
        scores = _mma(Cm, tl.trans(Bm), BF16, PREC)  # [Q, Q] fp32
        _scan_out(x, scores, dt, decay, Dh, y_ptr, z_ptr, w_ptr, ss_ptr, wz_ptr, b, h, L,
                  s_yb, s_yl, s_zb, s_zl, s_ssb, s_ssl, P, Q, GATED, ZALIGN, ZPROJ, ZK, BF16,
                  PREC)

    @triton.jit
    def _scan_out(x, scores, dt, decay, Dh, y_ptr, z_ptr, w_ptr, ss_ptr, wz_ptr, b, h, L,
                  s_yb, s_yl, s_zb, s_zl, s_ssb, s_ssl, P: tl.constexpr, Q: tl.constexpr,
                  GATED: tl.constexpr, ZALIGN: tl.constexpr, ZPROJ: tl.constexpr,
                  ZK: tl.constexpr, BF16: tl.constexpr, PREC: tl.constexpr):
        # y = (scores o decay) (dt x) + D x of window b, head h from its [Q, P] x tile (zero
        # past the window), the window's scores C B^T and D_h, stored as ``_ssd_window_fwd``
        # says
        i = tl.arange(0, Q)
        p = tl.arange(0, P)
        xf = x.to(tl.float32)
        y = _mma(scores * decay, xf * dt[:, None], BF16, PREC) + Dh * xf
        kept = (i < L)[:, None]
        if GATED:
            if ZPROJ > 0:
                z = _z_projected(z_ptr, wz_ptr, b, h, s_zb, s_zl, kept, ZALIGN, ZPROJ, ZK, P,
                                 Q, BF16, PREC)
            else:
                z = tl.load(z_ptr + (b * s_zb + i[:, None] * s_zl) * ZALIGN + h * P
                            + p[None, :], mask=kept, other=0.0).to(tl.float32)
            y = y * z * tl.sigmoid(z)
            # the sums kept as a [Q, 1] column stay in the product's layout (a [Q] vector
            # was converted through shared memory first: 19 against 15 barriers, sm_90 PTX)
            tl.store(ss_ptr + b * s_ssb + i[:, None] * s_ssl + h,
                     tl.sum(y * y, 1, keep_dims=True), mask=kept)
            y = y * tl.load(w_ptr + h * P + p).to(tl.float32)[None, :]
        tl.store(y_ptr + b * s_yb + i[:, None] * s_yl + h * P + p[None, :],
                 _stored(y, BF16).to(y_ptr.dtype.element_ty), mask=kept)

    @triton.jit
    def _z_projected(u_ptr, wz_ptr, b, h, s_ub, s_ul, kept, ZALIGN: tl.constexpr,
                     DM: tl.constexpr, ZK: tl.constexpr, P: tl.constexpr, Q: tl.constexpr,
                     BF16: tl.constexpr, PREC: tl.constexpr):
        # z [Q, P] of window b, head h = u [Q, DM] (u's strides in units of ZALIGN) times the
        # head's rows of wz [E, DM] transposed, ZK columns of u at a time, rounded to the
        # input dtype as the in-projection's own output is (fp32 sums)
        i = tl.arange(0, Q)
        p = tl.arange(0, P)
        k = tl.arange(0, ZK)
        z = tl.zeros((Q, P), dtype=tl.float32)
        for k0 in range(0, DM, ZK):
            u = tl.load(u_ptr + (b * s_ub + i[:, None] * s_ul) * ZALIGN + k0 + k[None, :],
                        mask=kept, other=0.0)
            wz = tl.load(wz_ptr + (h * P + p[None, :]) * DM + k0 + k[:, None])  # [ZK, P]
            z += _mma(u, wz, BF16, PREC)
        if BF16 == 0:
            return z
        else:
            return round_bf16(z, BF16)

    @triton.jit
    def _ssd_window_bwd_head(xbc_ptr, dt_ptr, a_ptr, d_ptr, dy_ptr, dxbc_ptr, ddt_ptr, da_ptr,
                             dd_ptr, ds_ptr, L, H, s_b, s_l, s_dtb, s_dtl, s_dyb, s_dyl, s_gb,
                             s_gl, s_gtb, s_gtl, E: tl.constexpr, N: tl.constexpr,
                             P: tl.constexpr, Q: tl.constexpr, BF16: tl.constexpr,
                             PREC: tl.constexpr):
        # One (window, head): d(dt x), d x, d dt and the head's partial d A, d D; the head's
        # d scores term (dL/d(C B^T), shared by every head's B and C) is stored to
        # ds [B, H, Q, Q] for ``_ssd_window_bwd_scores`` to sum over heads.
        # (The operand loads repeat the forward's on purpose: one helper shared by both
        # kernels, loading in another order, ran slower.)
        pid = tl.program_id(0)
        b = pid // H
        h = pid % H
        i = tl.arange(0, Q)
        p = tl.arange(0, P)
        n = tl.arange(0, N)
        in_window = i < L
        valid = in_window[:, None]
        row = xbc_ptr + b * s_b + i[:, None] * s_l
        Bm = tl.load(row + E + n[None, :], mask=valid, other=0.0)
        Cm = tl.load(row + E + N + n[None, :], mask=valid, other=0.0)
        A = tl.load(a_ptr + h).to(tl.float32)
        Dh = tl.load(d_ptr + h).to(tl.float32)
        x = tl.load(row + h * P + p[None, :], mask=valid, other=0.0)
        dy = tl.load(dy_ptr + b * s_dyb + i[:, None] * s_dyl + h * P + p[None, :], mask=valid,
                     other=0.0)
        dt, _cum, decay = _window_decay(dt_ptr, b, h, s_dtb, s_dtl, A, L, Q)
        m = _mma(Cm, tl.trans(Bm), BF16, PREC) * decay  # [Q, Q] fp32
        xf = x.to(tl.float32)
        dm = _mma(dy, tl.trans(xf * dt[:, None]), BF16, PREC)  # dL/dm [Q, Q]
        dxdt = _mma(tl.trans(m), dy, BF16, PREC)  # [Q, P]
        tl.store(ds_ptr + (pid * Q + i[:, None]) * Q + i[None, :],
                 _stored(dm * decay, BF16).to(ds_ptr.dtype.element_ty))
        # m_ij = scores_ij exp(cum_i - cum_j): d cum_i = sum_j dseg_ij - sum_j dseg_ji
        dseg = dm * m
        dcum = tl.sum(dseg, 1) - tl.sum(dseg, 0)
        da = tl.sum(dcum, 0) - tl.cumsum(dcum, 0) + dcum  # cum -> a = dt A (reverse cumsum)
        dyf = dy.to(tl.float32)
        ddt = da * A + tl.sum(dxdt * xf, 1)
        dx = dxdt * dt[:, None] + Dh * dyf
        grow = dxbc_ptr + b * s_gb + i[:, None] * s_gl
        tl.store(grow + h * P + p[None, :], _stored(dx, BF16).to(dxbc_ptr.dtype.element_ty),
                 mask=valid)
        tl.store(ddt_ptr + b * s_gtb + i * s_gtl + h, ddt, mask=in_window)
        tl.store(da_ptr + pid, tl.sum(da * dt, 0))
        tl.store(dd_ptr + pid, tl.sum(tl.sum(dyf * xf, 1), 0))

    @triton.jit
    def _ssd_window_bwd_scores(xbc_ptr, ds_ptr, dxbc_ptr, L, H, s_b, s_l, s_gb, s_gl,
                               E: tl.constexpr, N: tl.constexpr, Q: tl.constexpr,
                               BF16: tl.constexpr, PREC: tl.constexpr):
        # One window: dS = the heads' d scores summed in head order, then d C = dS B and
        # d B = dS^T C into d xbc.
        b = tl.program_id(0)
        i = tl.arange(0, Q)
        n = tl.arange(0, N)
        valid = (i < L)[:, None]
        d_scores = tl.zeros((Q, Q), dtype=tl.float32)
        for h in range(H):
            d_scores += tl.load(ds_ptr + ((b * H + h) * Q + i[:, None]) * Q + i[None, :]).to(
                tl.float32)
        row = xbc_ptr + b * s_b + i[:, None] * s_l
        Bm = tl.load(row + E + n[None, :], mask=valid, other=0.0)
        Cm = tl.load(row + E + N + n[None, :], mask=valid, other=0.0)
        grow = dxbc_ptr + b * s_gb + i[:, None] * s_gl
        dC = _mma(d_scores, Bm, BF16, PREC)
        dB = _mma(tl.trans(d_scores), Cm, BF16, PREC)
        tl.store(grow + E + n[None, :], _stored(dB, BF16).to(dxbc_ptr.dtype.element_ty),
                 mask=valid)
        tl.store(grow + E + N + n[None, :], _stored(dC, BF16).to(dxbc_ptr.dtype.element_ty),
                 mask=valid)


def _check(xbc: torch.Tensor, dt: torch.Tensor, heads: int, headdim: int, d_state: int) -> None:
    batch, length, width = xbc.shape
    if (width != heads * headdim + 2 * d_state or xbc.stride(-1) != 1
            or dt.shape != (batch, length, heads)):
        raise ValueError(f"ssd_window: bad layout xbc {tuple(xbc.shape)} stride {xbc.stride()}"
                         f", dt {tuple(dt.shape)}, {heads} heads of {headdim}, d_state "
                         f"{d_state}")


def ssd_window(xbc: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, D: torch.Tensor,
               headdim: int, d_state: int, last_only: bool = False) -> torch.Tensor:
    """y [B, L, H*P] = SSD(x, dt, A, B, C) + D x over windows of one chunk, differentiable
    in xbc, dt, A and D; its last row only, [B, H*P], when ``last_only`` (the encoder's
    last layer: forward and backward as vectors over the rows, ``ssd_last_row_triton``).

    xbc: [B, L, H*P + 2N] = [x | B | C] (last axis contiguous); dt: [B, L, H] after
    softplus; A: [H] negative; D: [H].
    """
    return _ssd_window_op(xbc, dt, A, D, headdim, d_state, last_only)


@torch.library.custom_op("lobsurf::ssd_window", mutates_args=())
def _ssd_window_op(xbc: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, D: torch.Tensor,
                   headdim: int, d_state: int, last_only: bool) -> torch.Tensor:
    batch, length, _ = xbc.shape
    heads = A.shape[0]
    _check(xbc, dt, heads, headdim, d_state)
    E = heads * headdim
    y = xbc.new_empty((batch, E) if last_only else (batch, length, E))
    if last_only:
        ssd_last_row_triton.fwd_last(xbc, dt, A, D, y, headdim, d_state)
        return y
    # the gate's pointers stand unused (GATED off): y in their place, never read
    _ssd_window_fwd[(batch * heads,)](
        xbc, dt, A.float().contiguous(), D.float().contiguous(), y, y, y, y, y, length, heads,
        xbc.stride(0), xbc.stride(1), dt.stride(0), dt.stride(1), y.stride(0), y.stride(1),
        0, 0, 0, 0, E=E, N=d_state, P=headdim, GATED=False, ZALIGN=1, ZPROJ=0, ZK=0,
        **tile_flags(xbc), num_warps=WARPS_FWD)
    return y


@_ssd_window_op.register_fake
def _(xbc, dt, A, D, headdim, d_state, last_only):
    batch, length, _ = xbc.shape
    E = A.shape[0] * headdim
    return xbc.new_empty((batch, E) if last_only else (batch, length, E))


def ssd_window_gated(xbc: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, D: torch.Tensor,
                     z: torch.Tensor, weight: torch.Tensor, headdim: int, d_state: int,
                     last_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The scan with the gated norm's gate, for forwards without autograd (no backward):
    g w [B, L, H*P] in xbc's dtype, g = (SSD(x, dt, A, B, C) + D x) SiLU(z), w the norm
    weight [H*P], and ss [B, L, H] fp32, the sum of g^2 over each head's channels; [B, H*P]
    and [B, H] for the last row only when ``last_only``. The gated norm is then
    RMSNorm(g) w = g w rsqrt(sum_h ss / (H P) + eps), a per-row factor that commutes with
    the out-projection, so the normalised [B, L, H*P] tensor is never written.

    z: [B, L, H*P] (last axis contiguous; a strided view of the in-projection is fine), or
    [B, H*P] (the last row's) when ``last_only``; the other inputs as ``ssd_window``'s.
    """
    return _ssd_window_gated_op(xbc, dt, A, D, z, weight, headdim, d_state, last_only)


@torch.library.custom_op("lobsurf::ssd_window_gated", mutates_args=())
def _ssd_window_gated_op(xbc: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, D: torch.Tensor,
                         z: torch.Tensor, weight: torch.Tensor, headdim: int, d_state: int,
                         last_only: bool) -> tuple[torch.Tensor, torch.Tensor]:
    batch, length, _ = xbc.shape
    heads = A.shape[0]
    _check(xbc, dt, heads, headdim, d_state)
    g, ss, align = gate_buffers(xbc, z, weight, heads, headdim, last_only)
    if last_only:
        ssd_last_row_triton.fwd_last(xbc, dt, A, D, g, headdim, d_state, (z, weight, ss, align))
        return g, ss
    _ssd_window_fwd[(batch * heads,)](
        xbc, dt, A.float().contiguous(), D.float().contiguous(), g, z,
        weight.float().contiguous(), ss, g, length, heads, xbc.stride(0), xbc.stride(1),
        dt.stride(0), dt.stride(1), *gate_strides(g, z, ss, align),
        E=heads * headdim, N=d_state, P=headdim, GATED=True, ZALIGN=align, ZPROJ=0, ZK=0,
        **tile_flags(xbc), num_warps=WARPS_FWD)
    return g, ss


def z_projection_supported(d_model: int) -> bool:
    """Whether ``ssd_window_gated_projected`` takes blocks of this width: a power of two
    >= 16 (a tl.dot tile side)."""
    return is_tile_side(d_model)


def ssd_window_gated_projected(xbc: torch.Tensor, dt: torch.Tensor, A: torch.Tensor,
                               D: torch.Tensor, u: torch.Tensor, wz: torch.Tensor,
                               weight: torch.Tensor, headdim: int, d_state: int
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """``ssd_window_gated`` (every row) with z = u wz^T computed inside the kernel: u [B, L,
    D_model] the block's normalised input (last axis contiguous), wz [H*P, D_model] the
    in-projection's z rows in u's dtype. The in-projection then writes only x, B, C and dt:
    z's [B, L, H*P] is neither written nor read back."""
    return _ssd_window_gated_projected_op(xbc, dt, A, D, u, wz, weight, headdim, d_state)


@torch.library.custom_op("lobsurf::ssd_window_gated_projected", mutates_args=())
def _ssd_window_gated_projected_op(xbc: torch.Tensor, dt: torch.Tensor, A: torch.Tensor,
                                   D: torch.Tensor, u: torch.Tensor, wz: torch.Tensor,
                                   weight: torch.Tensor, headdim: int, d_state: int
                                   ) -> tuple[torch.Tensor, torch.Tensor]:
    batch, length, _ = xbc.shape
    heads = A.shape[0]
    E = heads * headdim
    _check(xbc, dt, heads, headdim, d_state)
    d_model = u.shape[-1]
    if (u.shape != (batch, length, d_model) or u.stride(-1) != 1 or wz.shape != (E, d_model)
            or not wz.is_contiguous() or wz.dtype != u.dtype or weight.shape != (E,)
            or not z_projection_supported(d_model)):
        raise ValueError(f"ssd_window_gated_projected: u {tuple(u.shape)} stride {u.stride()},"
                         f" wz {tuple(wz.shape)} {wz.dtype} and weight "
                         f"{tuple(weight.shape)} for "
                         f"{(batch, length)} rows of {E} channels (D_model a power of two "
                         f">= {MIN_TILE})")
    g, ss = gated_like(xbc, heads, headdim, False)
    align = conv_triton.row_alignment(u)
    _ssd_window_fwd[(batch * heads,)](
        xbc, dt, A.float().contiguous(), D.float().contiguous(), g, u,
        weight.float().contiguous(), ss, wz, length, heads, xbc.stride(0),
        xbc.stride(1), dt.stride(0), dt.stride(1), *gate_strides(g, u, ss, align),
        E=E, N=d_state, P=headdim, GATED=True, ZALIGN=align, ZPROJ=d_model,
        ZK=min(d_model, Z_PROJ_COLUMNS), **tile_flags(xbc), num_warps=WARPS_FWD)
    return g, ss


@_ssd_window_gated_projected_op.register_fake
def _(xbc, dt, A, D, u, wz, weight, headdim, d_state):
    return gated_like(xbc, A.shape[0], headdim, False)


def gate_buffers(xbc: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, heads: int,
                 headdim: int, last_only: bool) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The gated scan's outputs g w and ss (empty) after checking z and the norm weight, and
    z's row alignment (``conv_triton.row_alignment``: its strides go in units of it)."""
    batch, length, _ = xbc.shape
    E = heads * headdim
    rows = (batch, E) if last_only else (batch, length, E)
    if z.shape != rows or z.stride(-1) != 1 or weight.shape != (E,):
        raise ValueError(f"ssd_window_gated: z {tuple(z.shape)} stride {z.stride()} and "
                         f"weight {tuple(weight.shape)} for {rows} rows of {E} channels")
    ss = torch.empty(rows[:-1] + (heads,), device=xbc.device, dtype=torch.float32)
    return xbc.new_empty(rows), ss, conv_triton.row_alignment(z, 1 if last_only else 2)


def gate_strides(g: torch.Tensor, z: torch.Tensor, ss: torch.Tensor, align: int
                 ) -> tuple[int, ...]:
    """The gated scan kernel's s_yb, s_yl, s_zb, s_zl (z's in units of ``align``), s_ssb,
    s_ssl."""
    return (g.stride(0), g.stride(1), z.stride(0) // align, z.stride(1) // align,
            ss.stride(0), ss.stride(1))


@_ssd_window_gated_op.register_fake
def _(xbc, dt, A, D, z, weight, headdim, d_state, last_only):
    return gated_like(xbc, A.shape[0], headdim, last_only)


def gated_like(xbc: torch.Tensor, heads: int, headdim: int, last_only: bool):
    """Empty (g w, ss) as the gated scan returns them (the ops' fake implementations)."""
    batch, length, _ = xbc.shape
    rows = (batch, heads * headdim) if last_only else (batch, length, heads * headdim)
    return (xbc.new_empty(rows),
            xbc.new_empty(rows[:-1] + (heads,), dtype=torch.float32))


@torch.library.custom_op("lobsurf::ssd_window_bwd", mutates_args=())
def _ssd_window_bwd_op(dy: torch.Tensor, xbc: torch.Tensor, dt: torch.Tensor, A: torch.Tensor,
                       D: torch.Tensor, headdim: int, d_state: int
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    # (d dt fp32, d xbc, per-window partial sums of d A and d D [B, H] fp32) given dy
    # [B, L, H*P] (the fake below returns the same); ``_backward`` sums the partials
    batch, length, _ = xbc.shape
    heads = A.shape[0]
    E = heads * headdim
    dy, dxbc, ddt, da, dd = grad_buffers(dy, xbc, dt, heads)
    flags = tile_flags(xbc)
    q = flags["Q"]
    # each head's d scores, bf16 under autocast (the scores kernel sums them in fp32)
    ds = torch.empty(batch, heads, q, q, device=xbc.device,
                     dtype=torch.float32 if xbc.dtype == torch.float32 else xbc.dtype)
    _ssd_window_bwd_head[(batch * heads,)](
        xbc, dt, A.float().contiguous(), D.float().contiguous(), dy, dxbc, ddt, da, dd, ds,
        length, heads, xbc.stride(0), xbc.stride(1), dt.stride(0), dt.stride(1),
        dy.stride(0), dy.stride(1), dxbc.stride(0), dxbc.stride(1), ddt.stride(0),
        ddt.stride(1), E=E, N=d_state, P=headdim, **flags, num_warps=WARPS_BWD)
    _ssd_window_bwd_scores[(batch,)](
        xbc, ds, dxbc, length, heads, xbc.stride(0), xbc.stride(1), dxbc.stride(0),
        dxbc.stride(1), E=E, N=d_state, **flags, num_warps=WARPS_BWD)
    return ddt, dxbc, da, dd


@_ssd_window_bwd_op.register_fake
def _(dy, xbc, dt, A, D, headdim, d_state):
    return partial_grads_like(xbc, dt, A)


def _setup_context(ctx, inputs, output):
    xbc, dt, A, D, headdim, d_state, last_only = inputs
    ctx.save_for_backward(xbc, dt, A, D)
    ctx.sizes = (headdim, d_state)
    ctx.last_only = last_only


def _backward(ctx, dy):
    xbc, dt, A, D = ctx.saved_tensors
    if ctx.last_only:  # the last row's gradient only: the backward as vectors over the rows
        ddt, dxbc, dA, dD = ssd_last_row_triton.ssd_window_bwd_last(dy, xbc, dt, A, D, *ctx.sizes)
    else:
        ddt, dxbc, dA, dD = _ssd_window_bwd_op(dy, xbc, dt, A, D, *ctx.sizes)
    # the per-window partial sums of d A and d D reduced in a fixed order (deterministic, no
    # atomics) here, outside the ops: under torch.compile Inductor fuses these reductions
    # and casts with their neighbours (inside an op each was a PyTorch reduction launch of
    # its own on the backward's serial path)
    return (dxbc, ddt.to(dt.dtype), dA.sum(0).to(A.dtype), dD.sum(0).to(D.dtype), None, None,
            None)


_ssd_window_op.register_autograd(_backward, setup_context=_setup_context)
