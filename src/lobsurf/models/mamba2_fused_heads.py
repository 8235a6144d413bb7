"""The Mamba2 mixer's core (conv -> SSD -> gate) with one Triton program per (window, head),
with autograd: the learner's forward and backward, in smaller programs than
``mamba2_fused_core``.

``mamba2_fused_core`` takes a whole window per program through every head and the gated
norm. Its forward + backward was 0.93-0.99x the compiled PyTorch mixer on the H200
(benchmarks/RESULTS.md): one program holds the heads' shared [K, K] scores, each head's
tiles and the norm's cross-head sums at once (register spills), and only B programs run
(8 per SM at B = 1024). Here the grid is (window, head), and what couples the heads leaves
the kernels:

    forward    proj [K, 2E+2N+H] -> g = y * SiLU(z) [K, E], head h writing its P columns
               (y = SSD(SiLU(conv(x, B, C))) + D x as in ``mamba2.py``); every program
               recomputes the shared B, C and scores C B^T (N-wide, small beside a head);
    norm       RMSNorm(g) * w stays PyTorch (``mamba2.normalise_gated``), so autograd and
               torch.compile fuse it with its neighbours, as in the PyTorch mixer;
    backward   kernel 1 per (window, head): d g -> d proj columns of z, x, dt of the head,
               the head's share of the conv weight / bias, dt bias, A_log and D gradients,
               and its term of d scores [K, K] (fp32 scratch);
               kernel 2 per window: the heads' d scores summed in a fixed order
               (deterministic, no atomics) -> d B, d C through their conv -> d proj columns
               of B and C and their conv gradients (``_scores_backward``: one of B, C
               at a time, B's conv recomputed, fewer live tiles).

Compiled for sm_90 (``benchmarks/kernel_resources.py``, bf16, 8 warps) the backward spills
136 + 8 bytes per thread against the window core's 9.8 KB, and the three kernels compile in
13 s against its 71 s. It is still slower than the compiled PyTorch mixer on the H200 (0.64x
for a block's forward + backward at B = 1024, bf16; the per-head backward kernel 1.1 ms of
it): every program holds a whole 64 x 64 problem in 255 registers per thread, so one
program runs per SM and nothing hides its latency (benchmarks/RESULTS.md, eighth session).

Products run in proj's dtype (bf16 with fp32 sums, or fp32 with TF32 where
torch.backends.cuda.matmul.fp32_precision is "tf32"); everything else is fp32. The jitted
pieces (conv + SiLU from shifted loads, one head's forward, the conv's backward) are
``mamba2_fused_core``'s; the float64 PyTorch mixer is the reference in the tests.

Registered as ``torch.ops.lobsurf.mamba2_heads`` (+ ``mamba2_heads_backward``) with autograd,
so torch.compile sees opaque calls and CUDA graphs capture them. On CPU tensors the kernels
run only in Triton's interpreter (``mamba2_fused.available_for``).
"""

from __future__ import annotations

import torch

from lobsurf.models.mamba2_fused import triton
from lobsurf.models.mamba2_fused_core import _meta, supports, window_sums

__all__ = ["mamba2_heads", "mamba2_heads_backward", "supports"]

if triton is not None:
    import triton.language as tl

    from lobsurf.models.mamba2_fused import _round_bf16
    from lobsurf.models.mamba2_fused_core import (
        _head,
        _head_backward,
        _scores_backward,
        _window,
    )

    @triton.jit
    def _this_head(proj_ptr, conv_w_ptr, conv_b_ptr, dt_bias_ptr, a_log_ptr, d_ptr, L,
                   PW: tl.constexpr, H: tl.constexpr, P: tl.constexpr, N: tl.constexpr,
                   WIDTH: tl.constexpr, KL: tl.constexpr, BF16: tl.constexpr,
                   TF32: tl.constexpr):
        # This program's (window, head), its rows, and the head's forward from proj
        # (``mamba2_fused_core._head``), the shared scores recomputed here.
        E: tl.constexpr = H * P
        CT: tl.constexpr = E + 2 * N
        b = tl.program_id(0)
        hd = tl.program_id(1)
        t, valid, causal, base, scores = _window(proj_ptr, conv_w_ptr, conv_b_ptr, b, L, PW, E,
                                                 N, CT, WIDTH, KL, BF16, TF32)
        _, x, z, raw, dt, a_h, decay, m, y = _head(
            base, conv_w_ptr, conv_b_ptr, dt_bias_ptr, a_log_ptr, d_ptr, scores, t, valid,
            causal, hd, L, PW, E, N, P, CT, WIDTH, BF16, TF32)
        return b, hd, t, valid, causal, x, z, raw, dt, a_h, decay, m, y

    @triton.jit
    def _heads_fwd_kernel(proj_ptr, g_ptr, conv_w_ptr, conv_b_ptr, dt_bias_ptr, a_log_ptr,
                          d_ptr, L, PW: tl.constexpr, H: tl.constexpr, P: tl.constexpr,
                          N: tl.constexpr, WIDTH: tl.constexpr, KL: tl.constexpr,
                          BF16: tl.constexpr, TF32: tl.constexpr):
        E: tl.constexpr = H * P
        b, hd, t, valid, _, _, z, _, _, _, _, _, y = _this_head(
            proj_ptr, conv_w_ptr, conv_b_ptr, dt_bias_ptr, a_log_ptr, d_ptr, L, PW, H, P, N,
            WIDTH, KL, BF16, TF32)
        p = tl.arange(0, P)
        g = y * (z * tl.sigmoid(z))
        if BF16 == 2:  # the CPU interpreter's bf16 store truncates: round first
            g = _round_bf16(g, BF16)
        tl.store(g_ptr + b * L * E + t[:, None] * E + hd * P + p[None, :],
                 g.to(g_ptr.dtype.element_ty), mask=valid[:, None])

    @triton.jit
    def _heads_bwd_kernel(proj_ptr, dg_ptr, dproj_ptr, dscores_ptr, part_ptr, conv_w_ptr,
                          conv_b_ptr, dt_bias_ptr, a_log_ptr, d_ptr, L, PW: tl.constexpr,
                          PART: tl.constexpr, H: tl.constexpr, P: tl.constexpr,
                          N: tl.constexpr, WIDTH: tl.constexpr, KL: tl.constexpr,
                          BF16: tl.constexpr, TF32: tl.constexpr):
        E: tl.constexpr = H * P
        CT: tl.constexpr = E + 2 * N
        b, hd, t, valid, causal, x, z, raw, dt, a_h, decay, m, y = _this_head(
            proj_ptr, conv_w_ptr, conv_b_ptr, dt_bias_ptr, a_log_ptr, d_ptr, L, PW, H, P, N,
            WIDTH, KL, BF16, TF32)
        p = tl.arange(0, P)
        dg = tl.load(dg_ptr + b * L * E + t[:, None] * E + hd * P + p[None, :],
                     mask=valid[:, None], other=0.0).to(tl.float32)
        # partial sums as mamba2_fused_core's, without the norm weight
        d_scores = _head_backward(proj_ptr + b * L * PW, dproj_ptr + b * L * PW,
                                  part_ptr + b * PART, conv_w_ptr, conv_b_ptr, d_ptr, dg, x, z,
                                  raw, dt, a_h, decay, m, y, t, valid, causal, hd, L, PW, E, N,
                                  P, CT, WIDTH, KL, BF16, TF32)
        tl.store(dscores_ptr + (b * H + hd) * KL * KL + t[:, None] * KL + t[None, :], d_scores)

    @triton.jit
    def _scores_bwd_kernel(proj_ptr, dproj_ptr, dscores_ptr, part_ptr, conv_w_ptr, conv_b_ptr,
                           L, PW: tl.constexpr, PART: tl.constexpr, H: tl.constexpr,
                           P: tl.constexpr, N: tl.constexpr, WIDTH: tl.constexpr,
                           KL: tl.constexpr, BF16: tl.constexpr, TF32: tl.constexpr):
        E: tl.constexpr = H * P
        CT: tl.constexpr = E + 2 * N
        b = tl.program_id(0)
        t = tl.arange(0, KL)
        valid = t < L
        base = proj_ptr + b * L * PW
        dbase = dproj_ptr + b * L * PW
        part = part_ptr + b * PART
        tile = t[:, None] * KL + t[None, :]
        d_scores = tl.zeros((KL, KL), dtype=tl.float32)
        for hd in tl.static_range(H):  # a fixed order: the same sum on every run
            d_scores += tl.load(dscores_ptr + (b * H + hd) * KL * KL + tile)
        _scores_backward(base, dbase, part, conv_w_ptr, conv_b_ptr, d_scores, t, valid, L, PW, E,
                         N, CT, WIDTH, KL, BF16, TF32)


@torch.library.custom_op("lobsurf::mamba2_heads", mutates_args=())
def mamba2_heads(proj: torch.Tensor, conv_w: torch.Tensor, conv_b: torch.Tensor,
                 dt_bias: torch.Tensor, a_log: torch.Tensor, skip: torch.Tensor, headdim: int,
                 d_state: int, num_warps: int) -> torch.Tensor:
    """proj [B, L, >= 2E+2N+H] (the in-projection's output) -> g = y * SiLU(z) [B, L, E] in
    proj's dtype, the gated norm's input."""
    batch, length, _ = proj.shape
    proj = proj.contiguous()
    heads = a_log.shape[0]
    g = torch.empty(batch, length, heads * headdim, device=proj.device, dtype=proj.dtype)
    _heads_fwd_kernel[(batch, heads)](proj, g, conv_w.contiguous(), conv_b.contiguous(),
                                      dt_bias.contiguous(), a_log.contiguous(),
                                      skip.contiguous(), length,
                                      **_meta(proj, a_log, headdim, d_state, conv_w),
                                      num_warps=num_warps)
    return g


@mamba2_heads.register_fake
def _(proj, conv_w, conv_b, dt_bias, a_log, skip, headdim, d_state, num_warps):
    batch, length, _ = proj.shape
    return proj.new_empty(batch, length, a_log.shape[0] * headdim)


@torch.library.custom_op("lobsurf::mamba2_heads_backward", mutates_args=())
def mamba2_heads_backward(d_g: torch.Tensor, proj: torch.Tensor, conv_w: torch.Tensor,
                          conv_b: torch.Tensor, dt_bias: torch.Tensor, a_log: torch.Tensor,
                          skip: torch.Tensor, headdim: int, d_state: int,
                          num_warps: int) -> list[torch.Tensor]:
    """Gradients of ``mamba2_heads``'s g: [d proj, d conv_w, d conv_b, d dt_bias, d a_log,
    d skip]."""
    batch, length, width = proj.shape
    heads = a_log.shape[0]
    n_part = conv_w.numel() + conv_w.shape[1] + 3 * heads
    proj = proj.contiguous()
    meta = _meta(proj, a_log, headdim, d_state, conv_w)
    used = 2 * heads * headdim + 2 * d_state + heads
    # padding columns of the in-projection (in_proj_pad_multiple) get no gradient
    dproj = (proj.new_zeros if width > used else proj.new_empty)(proj.shape)
    # every slot is written: the heads' channels and scalars by kernel 1, B and C by kernel 2
    part = torch.empty(batch, n_part, device=proj.device, dtype=torch.float32)
    dscores = torch.empty(batch, heads, meta["KL"], meta["KL"], device=proj.device,
                          dtype=torch.float32)
    conv_w, conv_b = conv_w.contiguous(), conv_b.contiguous()
    _heads_bwd_kernel[(batch, heads)](proj, d_g.contiguous(), dproj, dscores, part, conv_w,
                                      conv_b, dt_bias.contiguous(), a_log.contiguous(),
                                      skip.contiguous(), length, PART=n_part, **meta,
                                      num_warps=num_warps)
    _scores_bwd_kernel[(batch,)](proj, dproj, dscores, part, conv_w, conv_b, length,
                                 PART=n_part, **meta, num_warps=num_warps)
    return [dproj, *window_sums(part, (conv_w, conv_b, dt_bias, a_log, skip))]


@mamba2_heads_backward.register_fake
def _(d_g, proj, conv_w, conv_b, dt_bias, a_log, skip, headdim, d_state, num_warps):
    return [proj.new_empty(proj.shape), conv_w.new_empty(conv_w.shape),
            conv_b.new_empty(conv_b.shape), dt_bias.new_empty(dt_bias.shape),
            a_log.new_empty(a_log.shape), skip.new_empty(skip.shape)]


def _setup_context(ctx, inputs, output) -> None:
    proj, conv_w, conv_b, dt_bias, a_log, skip, headdim, d_state, warps = inputs
    ctx.save_for_backward(proj, conv_w, conv_b, dt_bias, a_log, skip)
    ctx.shape = (headdim, d_state, warps)


def _backward(ctx, d_g):
    headdim, d_state, warps = ctx.shape
    grads = mamba2_heads_backward(d_g, *ctx.saved_tensors, headdim, d_state, warps)
    return (*grads, None, None, None)


mamba2_heads.register_autograd(_backward, setup_context=_setup_context)
