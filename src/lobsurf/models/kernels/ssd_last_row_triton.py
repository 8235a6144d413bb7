"""Triton kernels of the one-chunk SSD when only the window's last row is wanted: the
encoder's last layer (``ssd_window(..., last_only=True)``), whose output is the last row's
alone: its forward and its backward.

The forward of row l = L - 1 is, per head h, with s_j = C_l . B_j (the last row's scores,
shared by the heads) and decay_j = exp(cum_l - cum_j):

    y_l = sum_j s_j decay_j dt_j x_j + D x_l

vectors over the rows j: no [Q, Q] scores, decay (Q^2 exponentials) or products, which the
tile kernel (``ssd_window_triton._ssd_window_fwd``) computes for every row. With the gated
norm's gate (``ssd_window_gated``) it stores g = y_l SiLU(z_l) times the norm weight and
sum g^2 per head, as the tile kernel does for every row.

The backward: with dy nonzero in row l only, every [Q, Q] quantity of the general backward
(``ssd_window_triton._ssd_window_bwd_head``: d scores, d m, the decay) has one nonzero row,
so the whole backward is vectors over the window's rows j too. Per head h, with
m_j = s_j decay_j:

    d (dt x)_j = m_j dy                      d x_j = dt_j m_j dy  (+ D dy at j = l)
    dot_j = x_j . dy,  d m_j = dt_j dot_j    d scores_j += d m_j decay_j  (summed over heads)
    d cum = [j = l] sum_k d m_k m_k - d m_j m_j,  d a = its reverse cumsum
    d dt_j = d a_j A + m_j dot_j             d A += sum_j d a_j dt_j,  d D += dot_l

and from the heads' summed d scores: d B_j = d scores_j C_l, d C_l = sum_j d scores_j B_j
(d C is 0 on the other rows). In both kernels one program per window loops over the heads;
in the backward the sum over heads stays in registers: no [B, H, Q, Q] staging and no
second kernel, no zero-padded [B, L, H P] dy, and no [Q, Q] products (the general backward
does three per head).

All arithmetic in fp32 (products of bf16 inputs are exact in fp32); y and d xbc are stored
in the input's dtype. The reference is the step-by-step recurrence in float64 under autograd
(tests/models/kernels/test_ssd_window_triton.py), which shares nothing with these kernels.
"""

from __future__ import annotations

import torch

from lobsurf.models.kernels.ssd_window_shared import grad_buffers, partial_grads_like, tile_flags

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the PyTorch scan is used instead
    triton = None

# Launch constants (benchmarks/RESULTS.md, Defaults decided by measurement).
#: Triton warps per window of the last-row forward
WARPS_FWD = 2
#: Triton warps per window of the last-row backward: 2 ran faster than 4 and 8
WARPS_BWD = 2


if triton is not None:
    from lobsurf.models.kernels.triton_support import as_stored as _stored

    @triton.jit
    def _last_scores(xbc_ptr, b, i, valid, L, s_b, s_l, E: tl.constexpr, N: tl.constexpr):
        # C_l [N] and s_j = C_l . B_j [Q]: the last row's scores, shared by the heads
        n = tl.arange(0, N)
        C_last = tl.load(xbc_ptr + b * s_b + (L - 1) * s_l + E + N + n).to(tl.float32)
        B = tl.load(xbc_ptr + b * s_b + i[:, None] * s_l + E + n[None, :], mask=valid,
                    other=0.0).to(tl.float32)
        return C_last, tl.sum(B * C_last[None, :], 1)

    @triton.jit
    def _last_decay(a_ptr, d_ptr, dt_ptr, b, h, i, in_window, is_last, s_dtb, s_dtl):
        # head h's A, D, dt [Q] (0 past the window) and decay_j = exp(cum_l - cum_j), masked
        # past the window
        A = tl.load(a_ptr + h).to(tl.float32)
        Dh = tl.load(d_ptr + h).to(tl.float32)
        dt = tl.load(dt_ptr + b * s_dtb + i * s_dtl + h, mask=in_window,
                     other=0.0).to(tl.float32)
        cum = tl.cumsum(dt * A, 0)
        cum_last = tl.sum(tl.where(is_last, cum, 0.0), 0)
        return A, Dh, dt, tl.where(in_window, tl.exp(cum_last - cum), 0.0)

    @triton.jit
    def _ssd_window_fwd_last(xbc_ptr, dt_ptr, a_ptr, d_ptr, y_ptr, z_ptr, w_ptr, ss_ptr, L, H,
                             s_b, s_l, s_dtb, s_dtl, s_yb, s_zb, s_ssb, E: tl.constexpr,
                             N: tl.constexpr, P: tl.constexpr, Q: tl.constexpr,
                             GATED: tl.constexpr, ZALIGN: tl.constexpr, BF16: tl.constexpr):
        # One window b: every head's last row y = sum_j s_j decay_j dt_j x_j + D x_l into
        # y [B, H P]; GATED: g = y SiLU(z) stored times the norm weight w, with the sum of
        # g^2 over the head's channels into ss [B, H] (as ``_ssd_window_fwd`` for every row)
        b = tl.program_id(0)
        i = tl.arange(0, Q)
        p = tl.arange(0, P)
        in_window = i < L
        is_last = i == L - 1
        valid = in_window[:, None]
        row = xbc_ptr + b * s_b + i[:, None] * s_l
        _C_last, scores = _last_scores(xbc_ptr, b, i, valid, L, s_b, s_l, E, N)
        for h in range(H):
            _A, Dh, dt, decay = _last_decay(a_ptr, d_ptr, dt_ptr, b, h, i, in_window, is_last,
                                            s_dtb, s_dtl)
            x = tl.load(row + h * P + p[None, :], mask=valid, other=0.0).to(tl.float32)
            weight = scores * decay * dt + tl.where(is_last, Dh, 0.0)  # [Q]: D x_l at j = l
            y = tl.sum(weight[:, None] * x, 0)  # [P]
            if GATED:
                z = tl.load(z_ptr + b * s_zb * ZALIGN + h * P + p).to(tl.float32)
                y = y * z * tl.sigmoid(z)
                tl.store(ss_ptr + b * s_ssb + h, tl.sum(y * y, 0))
                y = y * tl.load(w_ptr + h * P + p).to(tl.float32)
            tl.store(y_ptr + b * s_yb + h * P + p, _stored(y, BF16).to(y_ptr.dtype.element_ty))

    @triton.jit
    def _ssd_window_bwd_last(xbc_ptr, dt_ptr, a_ptr, d_ptr, dy_ptr, dxbc_ptr, ddt_ptr, da_ptr,
                             dd_ptr, L, H, s_b, s_l, s_dtb, s_dtl, s_dyb, s_gb, s_gl, s_gtb,
                             s_gtl, E: tl.constexpr, N: tl.constexpr,
                             P: tl.constexpr, Q: tl.constexpr, BF16: tl.constexpr):
        # One window b: every head's d x, d dt, partial d A and d D, then d B and d C.
        b = tl.program_id(0)
        i = tl.arange(0, Q)
        p = tl.arange(0, P)
        n = tl.arange(0, N)
        in_window = i < L
        is_last = i == L - 1
        valid = in_window[:, None]
        row = xbc_ptr + b * s_b + i[:, None] * s_l
        # B is loaded again for d C below rather than held through the loop over the heads
        # (held: 254 against 185 registers at 2 warps, sm_90 compile with the launch's
        # divisibility)
        C_last, scores = _last_scores(xbc_ptr, b, i, valid, L, s_b, s_l, E, N)
        d_scores = tl.zeros((Q,), dtype=tl.float32)
        grow = dxbc_ptr + b * s_gb + i[:, None] * s_gl
        for h in range(H):
            A, Dh, dt, decay = _last_decay(a_ptr, d_ptr, dt_ptr, b, h, i, in_window, is_last,
                                           s_dtb, s_dtl)
            m = scores * decay
            x = tl.load(row + h * P + p[None, :], mask=valid, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + b * s_dyb + h * P + p).to(tl.float32)  # [P]
            dot = tl.sum(x * dy[None, :], 1)  # [Q]
            dm = dt * dot
            d_scores += dm * decay
            dseg = dm * m
            dcum = tl.where(is_last, tl.sum(dseg, 0), 0.0) - dseg
            da = tl.sum(dcum, 0) - tl.cumsum(dcum, 0) + dcum  # cum -> a = dt A
            ddt = da * A + m * dot
            dx = (m * dt + tl.where(is_last, Dh, 0.0))[:, None] * dy[None, :]
            tl.store(grow + h * P + p[None, :],
                     _stored(dx, BF16).to(dxbc_ptr.dtype.element_ty), mask=valid)
            tl.store(ddt_ptr + b * s_gtb + i * s_gtl + h, ddt, mask=in_window)
            tl.store(da_ptr + b * H + h, tl.sum(da * dt, 0))
            tl.store(dd_ptr + b * H + h, tl.sum(tl.where(is_last, dot, 0.0), 0))
        dB = d_scores[:, None] * C_last[None, :]
        Bm = tl.load(row + E + n[None, :], mask=valid, other=0.0).to(tl.float32)  # [Q, N]
        dC_last = tl.sum(d_scores[:, None] * Bm, 0)  # [N]
        dC = tl.where(is_last[:, None], dC_last[None, :], 0.0)
        tl.store(grow + E + n[None, :], _stored(dB, BF16).to(dxbc_ptr.dtype.element_ty),
                 mask=valid)
        tl.store(grow + E + N + n[None, :],
                 _stored(dC, BF16).to(dxbc_ptr.dtype.element_ty), mask=valid)


def fwd_last(xbc: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, D: torch.Tensor,
             y: torch.Tensor, headdim: int, d_state: int,
             gate: tuple[torch.Tensor, torch.Tensor, torch.Tensor, int] | None = None) -> None:
    """Launch the last-row forward into y [B, H*P]; ``gate``: (z [B, H*P], the norm weight,
    ss [B, H], z's row alignment) for the gated scan's outputs (g w into y, ss), as
    ``ssd_window_triton``'s ops take them. Called by those ops (``last_only``)."""
    batch, length, _ = xbc.shape
    heads = A.shape[0]
    flags = tile_flags(xbc)
    z, weight, ss, z_align = gate if gate is not None else (y, y, y, 1)
    _ssd_window_fwd_last[(batch,)](
        xbc, dt, A.float().contiguous(), D.float().contiguous(), y, z,
        weight.float().contiguous() if gate is not None else y, ss, length, heads,
        xbc.stride(0), xbc.stride(1), dt.stride(0), dt.stride(1), y.stride(0),
        z.stride(0) // z_align, ss.stride(0), E=heads * headdim, N=d_state, P=headdim,
        Q=flags["Q"], GATED=gate is not None, ZALIGN=z_align, BF16=flags["BF16"],
        num_warps=WARPS_FWD)


@torch.library.custom_op("lobsurf::ssd_window_bwd_last", mutates_args=())
def ssd_window_bwd_last(dy: torch.Tensor, xbc: torch.Tensor, dt: torch.Tensor, A: torch.Tensor,
                        D: torch.Tensor, headdim: int, d_state: int
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(d dt fp32, d xbc, per-window partial sums of d A and d D [B, H] fp32) of
    ``ssd_window(..., last_only=True)`` given the last row's gradient dy [B, H*P]; the
    inputs as the forward's. The caller sums the partials (``ssd_window_triton._backward``)."""
    batch, length, _ = xbc.shape
    heads = A.shape[0]
    dy, dxbc, ddt, da, dd = grad_buffers(dy, xbc, dt, heads)
    flags = tile_flags(xbc)  # the tile's rows, the bf16 mode
    _ssd_window_bwd_last[(batch,)](
        xbc, dt, A.float().contiguous(), D.float().contiguous(), dy, dxbc, ddt, da, dd,
        length, heads, xbc.stride(0), xbc.stride(1), dt.stride(0), dt.stride(1),
        dy.stride(0), dxbc.stride(0), dxbc.stride(1), ddt.stride(0), ddt.stride(1),
        E=heads * headdim, N=d_state, P=headdim, Q=flags["Q"], BF16=flags["BF16"],
        num_warps=WARPS_BWD)
    return ddt, dxbc, da, dd


@ssd_window_bwd_last.register_fake
def _(dy, xbc, dt, A, D, headdim, d_state):
    return partial_grads_like(xbc, dt, A)
