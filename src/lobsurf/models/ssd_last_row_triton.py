"""Triton kernel of the one-chunk SSD's backward when only the window's last row has a
gradient: the encoder's last layer (``ssd_window(..., last_only=True)``), whose output is
the last row's alone.

With dy nonzero in row l = L - 1 only, every [Q, Q] quantity of the general backward
(``ssd_window_triton._ssd_window_bwd_head``: d scores, d m, the decay) has one nonzero row,
so the whole backward is vectors over the window's rows j. Per head h, with
s_j = C_l . B_j (the last row's scores, shared by the heads), decay_j = exp(cum_l - cum_j)
and m_j = s_j decay_j:

    d (dt x)_j = m_j dy                      d x_j = dt_j m_j dy  (+ D dy at j = l)
    dot_j = x_j . dy,  d m_j = dt_j dot_j    d scores_j += d m_j decay_j  (summed over heads)
    d cum = [j = l] sum_k d m_k m_k - d m_j m_j,  d a = its reverse cumsum
    d dt_j = d a_j A + m_j dot_j             d A += sum_j d a_j dt_j,  d D += dot_l

and from the heads' summed d scores: d B_j = d scores_j C_l, d C_l = sum_j d scores_j B_j
(d C is 0 on the other rows). One program per window loops over the heads, so the sum over
heads stays in registers: no [B, H, Q, Q] staging and no second kernel, no zero-padded
[B, L, H P] dy, and no [Q, Q] products (the general backward does three per head).

All arithmetic in fp32 (products of bf16 inputs are exact in fp32); d xbc is stored in the
input's dtype. The reference is the step-by-step recurrence in float64 under autograd
(tests/models/test_ssd_window_triton.py), which shares nothing with this kernel.
"""

from __future__ import annotations

import torch

from lobsurf.models import ssd_window_triton

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the PyTorch scan is used instead
    triton = None


if triton is not None:
    from lobsurf.models.ssd_window_triton import _stored

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
        C_last = tl.load(xbc_ptr + b * s_b + (L - 1) * s_l + E + N + n).to(tl.float32)  # [N]
        # s_j = C_l . B_j; B is loaded again for d C below rather than held through the loop
        # over the heads (held: 254 against 185 registers at 2 warps, sm_90 compile with the
        # launch's divisibility)
        scores = tl.sum(tl.load(row + E + n[None, :], mask=valid, other=0.0).to(tl.float32)
                        * C_last[None, :], 1)
        d_scores = tl.zeros((Q,), dtype=tl.float32)
        grow = dxbc_ptr + b * s_gb + i[:, None] * s_gl
        for h in range(H):
            A = tl.load(a_ptr + h).to(tl.float32)
            Dh = tl.load(d_ptr + h).to(tl.float32)
            dt = tl.load(dt_ptr + b * s_dtb + i * s_dtl + h, mask=in_window,
                         other=0.0).to(tl.float32)
            cum = tl.cumsum(dt * A, 0)
            cum_last = tl.sum(tl.where(is_last, cum, 0.0), 0)
            decay = tl.where(in_window, tl.exp(cum_last - cum), 0.0)  # masked past the window
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


@torch.library.custom_op("lobsurf::ssd_window_bwd_last", mutates_args=())
def ssd_window_bwd_last(dy: torch.Tensor, xbc: torch.Tensor, dt: torch.Tensor, A: torch.Tensor,
                        D: torch.Tensor, headdim: int, d_state: int, warps: int
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(d dt fp32, d xbc, per-window partial sums of d A and d D [B, H] fp32) of
    ``ssd_window(..., last_only=True)`` given the last row's gradient dy [B, H*P]; the
    inputs as the forward's, ``warps`` Triton warps per program. The caller sums the
    partials (``ssd_window_triton._backward``)."""
    batch, length, _ = xbc.shape
    heads = A.shape[0]
    dy, dxbc, ddt, da, dd = ssd_window_triton.grad_buffers(dy, xbc, dt, heads)
    flags = ssd_window_triton._flags(xbc)  # the tile's rows, the bf16 mode
    _ssd_window_bwd_last[(batch,)](
        xbc, dt, A.float().contiguous(), D.float().contiguous(), dy, dxbc, ddt, da, dd,
        length, heads, xbc.stride(0), xbc.stride(1), dt.stride(0), dt.stride(1),
        dy.stride(0), dxbc.stride(0), dxbc.stride(1), ddt.stride(0), ddt.stride(1),
        E=heads * headdim, N=d_state, P=headdim, Q=flags["Q"], BF16=flags["BF16"],
        num_warps=warps)
    return ddt, dxbc, da, dd


@ssd_window_bwd_last.register_fake
def _(dy, xbc, dt, A, D, headdim, d_state, warps):
    return ssd_window_triton.partial_grads_like(xbc, dt, A)
