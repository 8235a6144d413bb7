"""Fused Triton kernels of Mamba2's causal depthwise convolution + SiLU (forward, backward).

Same function as ``Mamba2Mixer._conv`` with no context (zeros before t = 0), which stays the
CPU fallback, the reference and the default (tests compare the two on the GPU):

    out[b, t, c] = SiLU(bias[c] + sum_k weight[k, c] * x[b, t - (W-1) + k, c])

Opt-in through ``EncoderConfig.conv_backend = "triton"``. Why a kernel: written with PyTorch
ops, torch.compile materialises the padded input, saves it, and in the backward runs several
passes for the W shifted products and the weight reductions (about 4x this op's byte floor
in the profile, benchmarks/encoder_perf_notes.md). Here the forward reads x once and writes
out once; the backward recomputes the pre-activation at the W positions each output feeds
(re-reads hit the cache) and writes d x once, plus per-tile partial sums of d weight and
d bias that PyTorch adds up. Not yet timed on its own.

Layout [B, L, C] with unit channel stride (the in_proj output slice), no transposes.
Registered as ``torch.ops.lobsurf.conv_silu`` (custom op with autograd) for torch.compile.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the PyTorch conv is used instead
    triton = None

BLOCK_T = 32
"""Time steps per program (tile rows); the partial weight sums are per tile."""
BLOCK_C = 128
"""Channels per program (tile columns, contiguous in memory)."""
WARPS = 4
"""Triton warps per program."""

if triton is not None:

    @triton.jit
    def _conv_fwd_kernel(x_ptr, w_ptr, b_ptr, out_ptr, L, C, s_b, s_l, s_ob, s_ol,
                         W: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
        pid_t = tl.program_id(0)
        nt = tl.cdiv(L, BT)
        b = pid_t // nt
        t = (pid_t % nt) * BT + tl.arange(0, BT)
        c = tl.program_id(1) * BC + tl.arange(0, BC)
        cmask = c < C
        acc = tl.load(b_ptr + c, mask=cmask, other=0.0).to(tl.float32)[None, :] + tl.zeros(
            (BT, BC), dtype=tl.float32)
        for k in tl.static_range(W):
            src = t - (W - 1) + k
            xv = tl.load(x_ptr + b * s_b + src[:, None] * s_l + c[None, :],
                         mask=((src >= 0) & (src < L))[:, None] & cmask[None, :],
                         other=0.0).to(tl.float32)
            wk = tl.load(w_ptr + k * C + c, mask=cmask, other=0.0).to(tl.float32)
            acc += xv * wk[None, :]
        out = acc * tl.sigmoid(acc)
        tl.store(out_ptr + b * s_ob + t[:, None] * s_ol + c[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=(t < L)[:, None] & cmask[None, :])

    @triton.jit
    def _conv_bwd_kernel(x_ptr, w_ptr, b_ptr, dout_ptr, dx_ptr, part_ptr, L, C, s_b, s_l,
                         s_db, s_dl, s_xb, s_xl, W: tl.constexpr, BT: tl.constexpr,
                         BC: tl.constexpr):
        pid_t = tl.program_id(0)
        nt = tl.cdiv(L, BT)
        b = pid_t // nt
        t = (pid_t % nt) * BT + tl.arange(0, BT)
        c = tl.program_id(1) * BC + tl.arange(0, BC)
        cmask = c < C
        bias = tl.load(b_ptr + c, mask=cmask, other=0.0).to(tl.float32)
        dx = tl.zeros((BT, BC), dtype=tl.float32)
        # Output s = t + m uses x[t] through tap k = W-1-m: dx[t] = sum_m w[W-1-m] dpre[t+m].
        for m in tl.static_range(W):
            s = t + m
            pre = tl.zeros((BT, BC), dtype=tl.float32) + bias[None, :]
            for k in tl.static_range(W):
                src = s - (W - 1) + k
                xv = tl.load(x_ptr + b * s_b + src[:, None] * s_l + c[None, :],
                             mask=((src >= 0) & (src < L))[:, None] & cmask[None, :],
                             other=0.0).to(tl.float32)
                wk = tl.load(w_ptr + k * C + c, mask=cmask, other=0.0).to(tl.float32)
                pre += xv * wk[None, :]
            smask = (s < L)[:, None] & cmask[None, :]
            g = tl.load(dout_ptr + b * s_db + s[:, None] * s_dl + c[None, :], mask=smask,
                        other=0.0).to(tl.float32)
            sig = tl.sigmoid(pre)
            dpre = g * sig * (1.0 + pre * (1.0 - sig))  # d SiLU / d pre
            wm = tl.load(w_ptr + (W - 1 - m) * C + c, mask=cmask, other=0.0).to(tl.float32)
            dx += dpre * wm[None, :]
            if m == 0:  # this tile's own outputs: partial sums of d weight and d bias
                part = part_ptr + pid_t * (W + 1) * C
                for k in tl.static_range(W):
                    src = t - (W - 1) + k
                    xv = tl.load(x_ptr + b * s_b + src[:, None] * s_l + c[None, :],
                                 mask=((src >= 0) & (src < L))[:, None] & cmask[None, :],
                                 other=0.0).to(tl.float32)
                    tl.store(part + k * C + c, tl.sum(xv * dpre, 0), mask=cmask)
                tl.store(part + W * C + c, tl.sum(dpre, 0), mask=cmask)
        tl.store(dx_ptr + b * s_xb + t[:, None] * s_xl + c[None, :],
                 dx.to(dx_ptr.dtype.element_ty), mask=(t < L)[:, None] & cmask[None, :])


def supported() -> bool:
    """True when Triton imports (the kernels then run on CUDA tensors)."""
    return triton is not None


def conv_silu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """SiLU(causal depthwise conv(x)): x [B, L, C] (unit channel stride), weight [W, C]
    (tap k multiplies x[t - (W-1) + k]), bias [C]; differentiable, output in x.dtype."""
    return _conv_silu_op(x, weight, bias)


def _grid(x: torch.Tensor) -> tuple[int, int]:
    batch, length, channels = x.shape
    return batch * triton.cdiv(length, BLOCK_T), triton.cdiv(channels, BLOCK_C)


@torch.library.custom_op("lobsurf::conv_silu", mutates_args=())
def _conv_silu_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    if x.stride(-1) != 1:
        raise ValueError(f"conv_silu: channel stride must be 1, got {x.stride()}")
    out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    _conv_fwd_kernel[_grid(x)](
        x, weight.contiguous(), bias.contiguous(), out, x.shape[1], x.shape[2], x.stride(0),
        x.stride(1), out.stride(0), out.stride(1), W=weight.shape[0], BT=BLOCK_T, BC=BLOCK_C,
        num_warps=WARPS)
    return out


@_conv_silu_op.register_fake
def _(x, weight, bias):
    return torch.empty(x.shape, device=x.device, dtype=x.dtype)


@torch.library.custom_op("lobsurf::conv_silu_bwd", mutates_args=())
def _conv_silu_bwd_op(dout: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                      bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dout = dout.contiguous()
    grid = _grid(x)
    W = weight.shape[0]
    dx = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    part = torch.empty(grid[0], W + 1, x.shape[2], device=x.device, dtype=torch.float32)
    _conv_bwd_kernel[grid](
        x, weight.contiguous(), bias.contiguous(), dout, dx, part, x.shape[1], x.shape[2],
        x.stride(0), x.stride(1), dout.stride(0), dout.stride(1), dx.stride(0), dx.stride(1),
        W=W, BT=BLOCK_T, BC=BLOCK_C, num_warps=WARPS)
    # Two separate sums: custom-op outputs may not alias each other.
    return dx, part[:, :W].sum(0).to(weight.dtype), part[:, W].sum(0).to(bias.dtype)


@_conv_silu_bwd_op.register_fake
def _(dout, x, weight, bias):
    return torch.empty_like(x), torch.empty_like(weight), torch.empty_like(bias)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, dout):
    return _conv_silu_bwd_op(dout, *ctx.saved_tensors)


_conv_silu_op.register_autograd(_backward, setup_context=_setup_context)
