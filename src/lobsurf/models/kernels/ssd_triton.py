"""Fused Triton kernels of the chunked SSD scan (forward and backward), for CUDA training.

Same function as ``ssd.ssd_chunked`` with no initial state (that PyTorch path stays the
CPU fallback, the reference and the default; tests compare the two). Opt-in through
``EncoderConfig.ssd_backend = "triton"``: the kernels are correct but, as written, slower
than the compiled PyTorch scan (numbers in benchmarks/encoder_perf_notes.md); they are the
starting point for a scan that reaches its HBM floor.

One program per (window b, head h) walks the chunks in order and keeps everything of a
chunk in registers: C B^T, the masked decay exp(cum_i - cum_j), the intra-chunk output,
and the [N, P] state carried to the next chunk. The states entering chunks 1..nc-1 are
stored for the backward pass, which walks the chunks in reverse carrying dL/dstate.

Inputs are read straight from the conv output ``xbc`` [B, L, E + 2N] = [x | B | C] through
its strides (no split/permute copies); the backward writes d(xbc) in the same layout. The
heads share B and C (one group), so their gradients are summed over heads with fp32
atomics. Everything in the kernel is fp32; the dots use TF32 when
torch.backends.cuda.matmul.fp32_precision is "tf32" (as in training), IEEE fp32 otherwise.

Registered as ``torch.ops.lobsurf.ssd_scan`` (a custom op with autograd), so torch.compile
treats it as one opaque call and CUDA graphs capture it.
"""

from __future__ import annotations

import torch

from lobsurf.models.kernels.triton_support import is_tile_side

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the PyTorch scan is used instead
    triton = None


def triton_available() -> bool:
    """True when Triton imports (the kernels can then run on CUDA tensors)."""
    return triton is not None


if triton is not None:

    @triton.jit
    def _load_chunk(xbc_ptr, dt_ptr, s_b, s_l, s_dtb, s_dtl, b, h, t, valid, A,
                    E: tl.constexpr, N: tl.constexpr, P: tl.constexpr):
        # x [Q, P], dt [Q], B/C [Q, N] of one chunk (zeros past the end), and the decay math.
        p = tl.arange(0, P)
        n = tl.arange(0, N)
        row = xbc_ptr + b * s_b + t[:, None] * s_l
        x = tl.load(row + h * P + p[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        Bm = tl.load(row + E + n[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        Cm = tl.load(row + E + N + n[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        dt = tl.load(dt_ptr + b * s_dtb + t * s_dtl + h, mask=valid, other=0.0).to(tl.float32)
        cum = tl.cumsum(dt * A, 0)  # [Q] log decay from the chunk start; padding adds 0
        return x, Bm, Cm, dt, cum

    @triton.jit
    def _ssd_fwd_kernel(xbc_ptr, dt_ptr, a_ptr, y_ptr, st_ptr, L, H, s_b, s_l, s_dtb, s_dtl,
                        s_yb, s_yl, E: tl.constexpr, N: tl.constexpr, P: tl.constexpr,
                        Q: tl.constexpr, NC: tl.constexpr, TF32: tl.constexpr):
        pid = tl.program_id(0)
        b = pid // H
        h = pid % H
        A = tl.load(a_ptr + h).to(tl.float32)
        i = tl.arange(0, Q)
        p = tl.arange(0, P)
        n = tl.arange(0, N)
        causal = i[:, None] >= i[None, :]
        prec: tl.constexpr = "tf32" if TF32 else "ieee"
        state = tl.zeros((N, P), dtype=tl.float32)  # state entering the chunk, [N, P]
        for c in range(NC):
            t = c * Q + i
            valid = t < L
            x, Bm, Cm, dt, cum = _load_chunk(xbc_ptr, dt_ptr, s_b, s_l, s_dtb, s_dtl, b, h,
                                             t, valid, A, E, N, P)
            xdt = x * dt[:, None]
            if c > 0:  # save the entering state for the backward pass
                st = st_ptr + ((pid * (NC - 1) + c - 1) * N + n[:, None]) * P + p[None, :]
                tl.store(st, state)
            scores = tl.dot(Cm, tl.trans(Bm), input_precision=prec)  # [Q, Q]
            decay = tl.where(causal, tl.exp(cum[:, None] - cum[None, :]), 0.0)
            y = tl.dot(scores * decay, xdt, input_precision=prec)  # [Q, P]
            y += tl.exp(cum)[:, None] * tl.dot(Cm, state, input_precision=prec)
            tl.store(y_ptr + b * s_yb + t[:, None] * s_yl + h * P + p[None, :],
                     y.to(y_ptr.dtype.element_ty), mask=valid[:, None])
            last = tl.sum(dt * A, 0)  # cum at the chunk end
            w = tl.exp(last - cum)
            state = tl.exp(last) * state + tl.dot(tl.trans(Bm * w[:, None]), xdt,
                                                  input_precision=prec)

    @triton.jit
    def _ssd_bwd_kernel(xbc_ptr, dt_ptr, a_ptr, dy_ptr, st_ptr, dxbc_ptr, ddt_ptr, da_ptr,
                        L, H, s_b, s_l, s_dtb, s_dtl, s_dyb, s_dyl, s_gb, s_gl,
                        E: tl.constexpr, N: tl.constexpr, P: tl.constexpr, Q: tl.constexpr,
                        NC: tl.constexpr, TF32: tl.constexpr):
        pid = tl.program_id(0)
        b = pid // H
        h = pid % H
        A = tl.load(a_ptr + h).to(tl.float32)
        i = tl.arange(0, Q)
        p = tl.arange(0, P)
        n = tl.arange(0, N)
        causal = i[:, None] >= i[None, :]
        prec: tl.constexpr = "tf32" if TF32 else "ieee"
        dstate = tl.zeros((N, P), dtype=tl.float32)  # dLoss/d(state leaving the chunk)
        da_acc = A * 0.0  # fp32 scalar, loop-carried
        for cc in range(NC):
            c = NC - 1 - cc
            t = c * Q + i
            valid = t < L
            x, Bm, Cm, dt, cum = _load_chunk(xbc_ptr, dt_ptr, s_b, s_l, s_dtb, s_dtl, b, h,
                                             t, valid, A, E, N, P)
            dy = tl.load(dy_ptr + b * s_dyb + t[:, None] * s_dyl + h * P + p[None, :],
                         mask=valid[:, None], other=0.0).to(tl.float32)
            if c > 0:
                st = st_ptr + ((pid * (NC - 1) + c - 1) * N + n[:, None]) * P + p[None, :]
                h_in = tl.load(st)
            else:
                h_in = tl.zeros((N, P), dtype=tl.float32)
            xdt = x * dt[:, None]
            last = tl.sum(dt * A, 0)
            e = tl.exp(cum)
            w = tl.exp(last - cum)
            scores = tl.dot(Cm, tl.trans(Bm), input_precision=prec)
            decay = tl.where(causal, tl.exp(cum[:, None] - cum[None, :]), 0.0)
            m = scores * decay  # [Q, Q]
            dm = tl.dot(dy, tl.trans(xdt), input_precision=prec)  # [Q, Q]
            bd = tl.dot(Bm, dstate, input_precision=prec)  # [Q, P]
            dxdt = tl.dot(tl.trans(m), dy, input_precision=prec) + w[:, None] * bd
            ds = dm * decay
            dC = tl.dot(ds, Bm, input_precision=prec)
            dC += e[:, None] * tl.dot(dy, tl.trans(h_in), input_precision=prec)
            dB = tl.dot(tl.trans(ds), Cm, input_precision=prec)
            dB += w[:, None] * tl.dot(xdt, tl.trans(dstate), input_precision=prec)
            # d/d cum: through the decay block (row minus column sums), the entering-state
            # term exp(cum_i), the carried-out weights exp(last - cum_j), and exp(last).
            dseg = dm * m
            dcum = tl.sum(dseg, 1) - tl.sum(dseg, 0)
            ch = tl.dot(Cm, h_in, input_precision=prec)  # [Q, P]
            dcum += e * tl.sum(dy * ch, 1)
            dw = w * tl.sum(xdt * bd, 1)
            dlast = tl.sum(dw, 0) + tl.exp(last) * tl.sum(tl.sum(dstate * h_in, 1), 0)
            dcum = dcum - dw + tl.where(i == Q - 1, dlast, 0.0)
            da = tl.sum(dcum, 0) - tl.cumsum(dcum, 0) + dcum  # reverse cumsum: cum -> a
            da_acc += tl.sum(da * dt, 0)
            ddt = da * A + tl.sum(dxdt * x, 1)
            dstate = tl.exp(last) * dstate + tl.dot(tl.trans(Cm * e[:, None]), dy,
                                                    input_precision=prec)
            grow = dxbc_ptr + b * s_gb + t[:, None] * s_gl
            tl.store(grow + h * P + p[None, :], dxdt * dt[:, None], mask=valid[:, None])
            tl.atomic_add(grow + E + n[None, :], dB, mask=valid[:, None])
            tl.atomic_add(grow + E + N + n[None, :], dC, mask=valid[:, None])
            tl.store(ddt_ptr + b * s_dtb + t * s_dtl + h, ddt, mask=valid)
        tl.store(da_ptr + pid, da_acc)


def supports(n_heads: int, headdim: int, d_state: int, chunk: int) -> bool:
    """Whether the kernels handle these sizes (tl.dot needs power-of-two tiles >= 16)."""
    del n_heads
    return (triton is not None and is_tile_side(headdim) and is_tile_side(d_state)
            and is_tile_side(chunk))


def _use_tf32() -> bool:
    return torch.backends.cuda.matmul.fp32_precision == "tf32"


def ssd_scan(xbc: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, headdim: int, d_state: int,
             chunk: int, warps_fwd: int, warps_bwd: int) -> torch.Tensor:
    """y [B, L, H*P] of the SSD scan (no D skip, zero initial state), differentiable.

    xbc: [B, L, H*P + 2N] = [x | B | C] (last axis contiguous); dt: [B, L, H] after softplus
    (last axis contiguous); A: [H] negative. ``chunk`` is the kernels' block length Q (a
    power of two; any L works); ``warps_*`` are the Triton warps per program.
    """
    return _ssd_scan_op(xbc, dt, A, headdim, d_state, chunk, warps_fwd, warps_bwd)[0]


@torch.library.custom_op("lobsurf::ssd_scan", mutates_args=())
def _ssd_scan_op(xbc: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, headdim: int,
                 d_state: int, chunk: int, warps_fwd: int,
                 warps_bwd: int) -> tuple[torch.Tensor, torch.Tensor]:
    # Returns (y, states entering chunks 1..nc-1, flat fp32; one unused element if nc = 1).
    batch, length, width = xbc.shape
    heads = dt.shape[-1]
    E = heads * headdim
    nc = -(-length // chunk)
    if width != E + 2 * d_state or xbc.stride(-1) != 1 or dt.stride(-1) != 1:
        raise ValueError(f"ssd_scan: bad layout xbc {tuple(xbc.shape)} stride {xbc.stride()}, "
                         f"dt stride {dt.stride()}")
    y = torch.empty(batch, length, E, device=xbc.device, dtype=xbc.dtype)
    states = torch.empty(max(batch * heads * (nc - 1) * d_state * headdim, 1),
                         device=xbc.device, dtype=torch.float32)
    _ssd_fwd_kernel[(batch * heads,)](
        xbc, dt, A.float().contiguous(), y, states, length, heads, xbc.stride(0),
        xbc.stride(1), dt.stride(0), dt.stride(1), y.stride(0), y.stride(1), E=E, N=d_state,
        P=headdim, Q=chunk, NC=nc, TF32=_use_tf32(), num_warps=warps_fwd)
    return y, states


@_ssd_scan_op.register_fake
def _(xbc, dt, A, headdim, d_state, chunk, warps_fwd, warps_bwd):
    batch, length, _ = xbc.shape
    heads = dt.shape[-1]
    nc = -(-length // chunk)
    y = xbc.new_empty(batch, length, heads * headdim)
    states = xbc.new_empty(max(batch * heads * (nc - 1) * d_state * headdim, 1),
                           dtype=torch.float32)
    return y, states


@torch.library.custom_op("lobsurf::ssd_scan_bwd", mutates_args=())
def _ssd_scan_bwd_op(dy: torch.Tensor, xbc: torch.Tensor, dt: torch.Tensor, A: torch.Tensor,
                     states: torch.Tensor, headdim: int, d_state: int, chunk: int,
                     warps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # (d xbc, d dt, d A) given dy and the forward's saved chunk states.
    batch, length, _ = xbc.shape
    heads = dt.shape[-1]
    E = heads * headdim
    nc = -(-length // chunk)
    dy = dy.contiguous()
    dxbc = torch.empty(xbc.shape, device=xbc.device, dtype=torch.float32)
    dxbc[..., E:].zero_()  # B and C gradients are accumulated over heads (atomics)
    ddt = torch.empty(dt.shape, device=dt.device, dtype=torch.float32)
    da = torch.empty(batch * heads, device=dt.device, dtype=torch.float32)
    _ssd_bwd_kernel[(batch * heads,)](
        xbc, dt, A.float().contiguous(), dy, states, dxbc, ddt, da, length, heads,
        xbc.stride(0), xbc.stride(1), dt.stride(0), dt.stride(1), dy.stride(0), dy.stride(1),
        dxbc.stride(0), dxbc.stride(1), E=E, N=d_state, P=headdim, Q=chunk, NC=nc,
        TF32=_use_tf32(), num_warps=warps)
    return (dxbc.to(xbc.dtype), ddt.to(dt.dtype),
            da.view(batch, heads).sum(0).to(A.dtype))


@_ssd_scan_bwd_op.register_fake
def _(dy, xbc, dt, A, states, headdim, d_state, chunk, warps):
    return torch.empty_like(xbc), torch.empty_like(dt), torch.empty_like(A)


def _setup_context(ctx, inputs, output):
    xbc, dt, A, headdim, d_state, chunk, _warps_fwd, warps_bwd = inputs
    ctx.save_for_backward(xbc, dt, A, output[1])
    ctx.sizes = (headdim, d_state, chunk, warps_bwd)


def _backward(ctx, dy, _dstates):
    xbc, dt, A, states = ctx.saved_tensors
    dxbc, ddt, dA = _ssd_scan_bwd_op(dy, xbc, dt, A, states, *ctx.sizes)
    return dxbc, ddt, dA, None, None, None, None, None


_ssd_scan_op.register_autograd(_backward, setup_context=_setup_context)
