"""The Mamba2 mixer's core (conv -> SSD -> gated RMSNorm) as one forward and one backward
Triton kernel, with autograd: the learner's forward and backward.

Between the in-projection and the out-projection (both cuBLAS GEMMs that autograd handles)
the PyTorch mixer runs the causal conv + SiLU, the softplus, the chunked SSD and the gated
norm as a dozen kernels forward and more backward, each a pass over [B, K, ~644] in HBM.
Here one program takes one window (K <= 64 tokens: one SSD chunk) through all of it:

    forward   proj = [z | x | B | C | dt] [K, 2E+2N+H]  ->  o = RMSNorm(y * SiLU(z)) * w  [K, E]
              (y = SSD(SiLU(conv(x, B, C))) + D x, as in ``mamba2.py``), plus each row's
              RMS scale r [K] for the backward;
    backward  d o [K, E]  ->  d proj [K, 2E+2N+H] and this window's share of the gradients of
              the conv weight and bias, dt bias, A_log, D and the norm weight (summed over
              windows by one reduction afterwards).

The backward recomputes the forward's intermediates from ``proj`` instead of storing them
(one more read of proj per window, no [K, K] matrices in HBM). Causal shifts read ``proj`` at
earlier rows; the conv's transposed shift (a row reads later rows' gradients) is a product
with a 0/1 matrix. Products run in proj's dtype (bf16 with fp32 sums, or fp32 with TF32
where torch.backends.cuda.matmul.fp32_precision is "tf32"); every other operation is fp32.

Registered as ``torch.ops.lobsurf.mamba2_core`` (+ ``mamba2_core_backward``) with autograd,
so torch.compile sees two opaque calls and CUDA graphs capture them. On CPU tensors the
kernels run only in Triton's interpreter (``mamba2_fused.available_for``), which is what
the CPU tests compare against PyTorch autograd of the mixer.
"""

from __future__ import annotations

import torch

from lobsurf.models.mamba2_fused import _pow2, launch_flags, triton

if triton is not None:
    import triton.language as tl

    from lobsurf.models.mamba2_fused import _dot, _round_bf16

    @triton.jit
    def _conv_silu(base, conv_w_ptr, conv_b_ptr, t, valid, chan0, L,
                   PW: tl.constexpr, E: tl.constexpr, CW: tl.constexpr, CT: tl.constexpr,
                   WIDTH: tl.constexpr):
        # Pre-activation and SiLU of the causal depthwise conv for conv channels chan0..+CW
        # (proj columns E + chan0..), reading earlier rows of proj (zeros before t = 0).
        c = tl.arange(0, CW)
        pre = tl.zeros((t.shape[0], CW), dtype=tl.float32) \
            + tl.load(conv_b_ptr + chan0 + c).to(tl.float32)[None, :]
        for k in tl.static_range(WIDTH):
            src = t - (WIDTH - 1 - k)
            ok = valid & (src >= 0)
            v = tl.load(base + src[:, None] * PW + E + chan0 + c[None, :], mask=ok[:, None],
                        other=0.0).to(tl.float32)
            pre += tl.load(conv_w_ptr + k * CT + chan0 + c).to(tl.float32)[None, :] * v
        return pre, pre * tl.sigmoid(pre)

    @triton.jit
    def _conv_backward(base, dpre_base, part, conv_w_ptr, dact, pre, t, valid, chan0, L,
                       PW: tl.constexpr, E: tl.constexpr, CW: tl.constexpr, CT: tl.constexpr,
                       WIDTH: tl.constexpr, KL: tl.constexpr, BF16: tl.constexpr,
                       TF32: tl.constexpr):
        # From d SiLU(conv) [KL, CW] of channels chan0..: d proj columns E + chan0.. (stored),
        # and this window's d conv bias / d conv weight (added to its partial sums).
        c = tl.arange(0, CW)
        sig = tl.sigmoid(pre)
        dc = dact * sig * (1.0 + pre * (1.0 - sig))  # d pre-activation
        tl.store(part + WIDTH * CT + chan0 + c, tl.sum(dc, axis=0))  # d conv bias
        dpre = tl.zeros((KL, CW), dtype=tl.float32)
        for k in tl.static_range(WIDTH):
            back = WIDTH - 1 - k
            src = t - back
            ok = valid & (src >= 0)
            v = tl.load(base + src[:, None] * PW + E + chan0 + c[None, :], mask=ok[:, None],
                        other=0.0).to(tl.float32)
            tl.store(part + k * CT + chan0 + c, tl.sum(dc * v, axis=0))  # d conv weight tap k
            wdc = tl.load(conv_w_ptr + k * CT + chan0 + c).to(tl.float32)[None, :] * dc
            if back == 0:
                dpre += wdc
            else:  # input row s feeds output row s + back: a transposed shift
                later = (t[None, :] == t[:, None] + back).to(tl.float32)  # [KL, KL]
                dpre += _dot(later, wdc, BF16, TF32)
        tl.store(dpre_base + t[:, None] * PW + E + chan0 + c[None, :],
                 dpre.to(dpre_base.dtype.element_ty), mask=valid[:, None])

    @triton.jit
    def _scores_backward(base, dbase, part, conv_w_ptr, conv_b_ptr, d_scores, t, valid, L,
                         PW: tl.constexpr, E: tl.constexpr, N: tl.constexpr, CT: tl.constexpr,
                         WIDTH: tl.constexpr, KL: tl.constexpr, BF16: tl.constexpr,
                         TF32: tl.constexpr):
        # scores = C B^T, shared by the heads: d B, d C through their conv -> d proj columns of
        # B and C (stored) and their conv partial sums. B and C are recomputed from proj one
        # at a time (B's twice) rather than held live through the heads' backward.
        _, Bm = _conv_silu(base, conv_w_ptr, conv_b_ptr, t, valid, E, L, PW, E, N, CT, WIDTH)
        dC = _dot(d_scores, Bm, BF16, TF32)
        C_pre, Cm = _conv_silu(base, conv_w_ptr, conv_b_ptr, t, valid, E + N, L, PW, E, N, CT,
                               WIDTH)
        dB = _dot(tl.trans(d_scores), Cm, BF16, TF32)
        _conv_backward(base, dbase, part, conv_w_ptr, dC, C_pre, t, valid, E + N, L, PW, E, N,
                       CT, WIDTH, KL, BF16, TF32)
        B_pre, _ = _conv_silu(base, conv_w_ptr, conv_b_ptr, t, valid, E, L, PW, E, N, CT, WIDTH)
        _conv_backward(base, dbase, part, conv_w_ptr, dB, B_pre, t, valid, E, L, PW, E, N, CT,
                       WIDTH, KL, BF16, TF32)

    @triton.jit
    def _window(proj_ptr, conv_w_ptr, conv_b_ptr, b, L, PW: tl.constexpr, E: tl.constexpr,
                N: tl.constexpr, CT: tl.constexpr, WIDTH: tl.constexpr, KL: tl.constexpr,
                BF16: tl.constexpr, TF32: tl.constexpr):
        # Window b's rows (t < L valid), the causal mask, its proj rows and the heads' shared
        # scores C B^T.
        t = tl.arange(0, KL)
        valid = t < L
        causal = t[None, :] <= t[:, None]
        base = proj_ptr + b * L * PW
        _, Bm = _conv_silu(base, conv_w_ptr, conv_b_ptr, t, valid, E, L, PW, E, N, CT, WIDTH)
        _, Cm = _conv_silu(base, conv_w_ptr, conv_b_ptr, t, valid, E + N, L, PW, E, N, CT, WIDTH)
        return t, valid, causal, base, _dot(Cm, tl.trans(Bm), BF16, TF32)

    @triton.jit
    def _head(base, conv_w_ptr, conv_b_ptr, dt_bias_ptr, a_log_ptr, d_ptr, scores, t, valid,
              causal, hd, L, PW: tl.constexpr, E: tl.constexpr, N: tl.constexpr,
              P: tl.constexpr, CT: tl.constexpr, WIDTH: tl.constexpr, BF16: tl.constexpr,
              TF32: tl.constexpr):
        # One head's forward from proj: x (pre-activation too), z, dt, raw dt, the decay,
        # M = scores * decay (causal), y = M (dt x) + D x, and A.
        p = tl.arange(0, P)
        x_pre, x = _conv_silu(base, conv_w_ptr, conv_b_ptr, t, valid, hd * P, L, PW, E, P, CT,
                              WIDTH)
        z = tl.load(base + t[:, None] * PW + hd * P + p[None, :], mask=valid[:, None],
                    other=0.0).to(tl.float32)
        raw = tl.load(base + t * PW + 2 * E + 2 * N + hd, mask=valid, other=0.0).to(tl.float32)
        raw += tl.load(dt_bias_ptr + hd).to(tl.float32)
        dt = tl.where(valid, tl.where(raw > 20.0, raw, tl.log(1.0 + tl.exp(raw))), 0.0)
        a_h = -tl.exp(tl.load(a_log_ptr + hd).to(tl.float32))
        cum = tl.cumsum(dt * a_h, axis=0)
        decay = tl.exp(tl.where(causal, cum[:, None] - cum[None, :], float("-inf")))
        m = scores * decay
        y = _dot(m, x * dt[:, None], BF16, TF32) + tl.load(d_ptr + hd).to(tl.float32) * x
        return x_pre, x, z, raw, dt, a_h, decay, m, y

    @triton.jit
    def _head_backward(base, dbase, part, conv_w_ptr, conv_b_ptr, d_ptr, dg, x, z, raw, dt, a_h,
                       decay, m, y, t, valid, causal, hd, L, PW: tl.constexpr,
                       E: tl.constexpr, N: tl.constexpr, P: tl.constexpr, CT: tl.constexpr,
                       WIDTH: tl.constexpr, KL: tl.constexpr, BF16: tl.constexpr,
                       TF32: tl.constexpr):
        # One head's backward from d g (g = y * SiLU(z)) and its recomputed forward (``_head``;
        # the conv's pre-activation recomputed at the end, not held live through it):
        # d proj columns of z, x (through the conv) and dt (stored), the head's conv, dt
        # bias, A_log and D partial sums (partial-sum layout: conv weight [WIDTH, CT], conv
        # bias [CT], dt bias [H], A_log [H], D [H], ...); returns the head's term of
        # d scores [KL, KL] (zero past L: dy and dt vanish there).
        p_dtb: tl.constexpr = WIDTH * CT + CT
        p_alog: tl.constexpr = p_dtb + E // P
        p_d: tl.constexpr = p_alog + E // P
        p = tl.arange(0, P)
        sz = tl.sigmoid(z)
        dy = dg * (z * sz)
        dz = dg * y * (sz * (1.0 + z * (1.0 - sz)))
        tl.store(dbase + t[:, None] * PW + hd * P + p[None, :],
                 dz.to(dbase.dtype.element_ty), mask=valid[:, None])
        # y = M (dt x) + D x
        skip = tl.load(d_ptr + hd).to(tl.float32)
        tl.store(part + p_d + hd, tl.sum(tl.sum(dy * x, axis=1), axis=0))
        xdt = x * dt[:, None]
        dxdt = _dot(tl.trans(m), dy, BF16, TF32)  # [KL, P]
        dx = skip * dy + dxdt * dt[:, None]
        ddt = tl.sum(dxdt * x, axis=1)
        dm = tl.where(causal, _dot(dy, tl.trans(xdt), BF16, TF32), 0.0)  # [KL, KL]
        dseg = dm * m  # d exp(cum_i - cum_j) = exp(.) d(cum_i - cum_j)
        dcum = tl.sum(dseg, axis=1) - tl.sum(dseg, axis=0)
        da = tl.cumsum(dcum, axis=0, reverse=True)  # cum = cumsum(dt A)
        ddt = tl.where(valid, ddt + da * a_h, 0.0)
        tl.store(part + p_alog + hd, tl.sum(da * dt, axis=0) * a_h)  # dA/dA_log = A
        draw = ddt * tl.sigmoid(raw)  # softplus'
        tl.store(part + p_dtb + hd, tl.sum(draw, axis=0))
        tl.store(dbase + t * PW + 2 * E + 2 * N + hd, draw.to(dbase.dtype.element_ty),
                 mask=valid)
        x_pre, _ = _conv_silu(base, conv_w_ptr, conv_b_ptr, t, valid, hd * P, L, PW, E, P, CT,
                               WIDTH)
        _conv_backward(base, dbase, part, conv_w_ptr, dx, x_pre, t, valid, hd * P, L, PW, E,
                       P, CT, WIDTH, KL, BF16, TF32)
        return dm * decay

    @triton.jit
    def _core_fwd_kernel(proj_ptr, o_ptr, rstd_ptr, conv_w_ptr, conv_b_ptr, dt_bias_ptr,
                         a_log_ptr, d_ptr, norm_w_ptr, L, eps, PW: tl.constexpr,
                         H: tl.constexpr, P: tl.constexpr, N: tl.constexpr,
                         WIDTH: tl.constexpr, KL: tl.constexpr, BF16: tl.constexpr,
                         TF32: tl.constexpr):
        E: tl.constexpr = H * P
        CT: tl.constexpr = E + 2 * N
        b = tl.program_id(0)
        p = tl.arange(0, P)
        t, valid, causal, base, scores = _window(proj_ptr, conv_w_ptr, conv_b_ptr, b, L, PW, E,
                                                 N, CT, WIDTH, KL, BF16, TF32)
        ss = tl.zeros((KL,), dtype=tl.float32)
        o_rows = o_ptr + b * L * E + t[:, None] * E
        for hd in tl.static_range(H):  # pass 1: the gated values and their row sums of squares
            _, _, z, _, _, _, _, _, y = _head(base, conv_w_ptr, conv_b_ptr, dt_bias_ptr,
                                              a_log_ptr, d_ptr, scores, t, valid, causal, hd,
                                              L, PW, E, N, P, CT, WIDTH, BF16, TF32)
            g = y * (z * tl.sigmoid(z))
            ss += tl.sum(g * g, axis=1)
            if BF16 == 2:  # the CPU interpreter's bf16 store truncates: round first
                g = _round_bf16(g, BF16)
            tl.store(o_rows + hd * P + p[None, :], g.to(o_ptr.dtype.element_ty),
                     mask=valid[:, None])  # o is the scratch of the un-normalised values
        r = 1.0 / tl.sqrt(ss / E + eps)
        tl.store(rstd_ptr + b * L + t, r, mask=valid)
        tl.debug_barrier()
        for hd in tl.static_range(H):  # pass 2: normalise in place
            g = tl.load(o_rows + hd * P + p[None, :], mask=valid[:, None],
                        other=0.0).to(tl.float32)
            w = tl.load(norm_w_ptr + hd * P + p).to(tl.float32)
            o = g * r[:, None] * w[None, :]
            if BF16 == 2:
                o = _round_bf16(o, BF16)
            tl.store(o_rows + hd * P + p[None, :], o.to(o_ptr.dtype.element_ty),
                     mask=valid[:, None])

    @triton.jit
    def _core_bwd_kernel(proj_ptr, do_ptr, rstd_ptr, dproj_ptr, part_ptr, conv_w_ptr,
                         conv_b_ptr, dt_bias_ptr, a_log_ptr, d_ptr, norm_w_ptr, L,
                         PW: tl.constexpr, PART: tl.constexpr, H: tl.constexpr,
                         P: tl.constexpr, N: tl.constexpr, WIDTH: tl.constexpr,
                         KL: tl.constexpr, BF16: tl.constexpr, TF32: tl.constexpr):
        E: tl.constexpr = H * P
        CT: tl.constexpr = E + 2 * N
        b = tl.program_id(0)
        p = tl.arange(0, P)
        t, valid, causal, base, scores = _window(proj_ptr, conv_w_ptr, conv_b_ptr, b, L, PW, E,
                                                 N, CT, WIDTH, KL, BF16, TF32)
        dbase = dproj_ptr + b * L * PW
        part = part_ptr + b * PART
        # partial-sum layout: conv weight [WIDTH, CT], conv bias [CT], dt bias [H],
        # A_log [H], D [H], norm weight [E]
        p_nw: tl.constexpr = WIDTH * CT + CT + 3 * H
        r = tl.load(rstd_ptr + b * L + t, mask=valid, other=0.0)
        do_rows = do_ptr + b * L * E + t[:, None] * E
        cross = tl.zeros((KL,), dtype=tl.float32)  # sum_e d o * w * g per row (norm's term)
        for hd in tl.static_range(H):
            _, _, z, _, _, _, _, _, y = _head(base, conv_w_ptr, conv_b_ptr, dt_bias_ptr,
                                              a_log_ptr, d_ptr, scores, t, valid, causal, hd,
                                              L, PW, E, N, P, CT, WIDTH, BF16, TF32)
            g = y * (z * tl.sigmoid(z))
            go = tl.load(do_rows + hd * P + p[None, :], mask=valid[:, None],
                         other=0.0).to(tl.float32)
            w = tl.load(norm_w_ptr + hd * P + p).to(tl.float32)
            cross += tl.sum(go * w[None, :] * g, axis=1)
        d_scores = tl.zeros((KL, KL), dtype=tl.float32)
        for hd in tl.static_range(H):
            _, x, z, raw, dt, a_h, decay, m, y = _head(
                base, conv_w_ptr, conv_b_ptr, dt_bias_ptr, a_log_ptr, d_ptr, scores, t, valid,
                causal, hd, L, PW, E, N, P, CT, WIDTH, BF16, TF32)
            g = y * (z * tl.sigmoid(z))
            go = tl.load(do_rows + hd * P + p[None, :], mask=valid[:, None],
                         other=0.0).to(tl.float32)
            w = tl.load(norm_w_ptr + hd * P + p).to(tl.float32)
            tl.store(part + p_nw + hd * P + p, tl.sum(go * g * r[:, None], axis=0))
            # gated RMSNorm: o = w g r, r = (mean g^2 + eps)^-1/2
            dg = r[:, None] * w[None, :] * go - g * (r * r * r / E * cross)[:, None]
            d_scores += _head_backward(base, dbase, part, conv_w_ptr, conv_b_ptr, d_ptr, dg, x, z,
                                       raw, dt, a_h, decay, m, y, t, valid, causal, hd, L,
                                       PW, E, N, P, CT, WIDTH, KL, BF16, TF32)
        _scores_backward(base, dbase, part, conv_w_ptr, conv_b_ptr, d_scores, t, valid, L, PW, E,
                         N, CT, WIDTH, KL, BF16, TF32)


def supports(headdim: int, d_state: int, length: int, chunk_size: int) -> bool:
    """Shapes the kernels cover: power-of-two P, N >= 16 and one chunk (K <= chunk)."""
    return _pow2(headdim) and _pow2(d_state) and length <= chunk_size


def _meta(proj: torch.Tensor, a_log: torch.Tensor, headdim: int, d_state: int,
          conv_w: torch.Tensor) -> dict:
    return dict(PW=proj.shape[-1], H=a_log.shape[0], P=headdim, N=d_state,
                WIDTH=conv_w.shape[0], **launch_flags(proj))


@torch.library.custom_op("lobsurf::mamba2_core", mutates_args=())
def mamba2_core(proj: torch.Tensor, conv_w: torch.Tensor, conv_b: torch.Tensor,
                dt_bias: torch.Tensor, a_log: torch.Tensor, skip: torch.Tensor,
                norm_w: torch.Tensor, headdim: int, d_state: int, eps: float,
                num_warps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """proj [B, L, >= 2E+2N+H] (the in-projection's output) -> (o [B, L, E] the gated norm's
    output, the out-projection's input; r [B, L] fp32 RMS scales, for the backward)."""
    batch, length, _ = proj.shape
    proj = proj.contiguous()
    e = a_log.shape[0] * headdim
    o = torch.empty(batch, length, e, device=proj.device, dtype=proj.dtype)
    rstd = torch.empty(batch, length, device=proj.device, dtype=torch.float32)
    _core_fwd_kernel[(batch,)](proj, o, rstd, conv_w.contiguous(), conv_b.contiguous(),
                               dt_bias.contiguous(), a_log.contiguous(), skip.contiguous(),
                               norm_w.contiguous(), length, eps,
                               **_meta(proj, a_log, headdim, d_state, conv_w),
                               num_warps=num_warps)
    return o, rstd


@mamba2_core.register_fake
def _(proj, conv_w, conv_b, dt_bias, a_log, skip, norm_w, headdim, d_state, eps, num_warps):
    batch, length, _ = proj.shape
    o = proj.new_empty(batch, length, a_log.shape[0] * headdim)
    return o, proj.new_empty(batch, length, dtype=torch.float32)


@torch.library.custom_op("lobsurf::mamba2_core_backward", mutates_args=())
def mamba2_core_backward(d_o: torch.Tensor, proj: torch.Tensor, rstd: torch.Tensor,
                         conv_w: torch.Tensor, conv_b: torch.Tensor, dt_bias: torch.Tensor,
                         a_log: torch.Tensor, skip: torch.Tensor, norm_w: torch.Tensor,
                         headdim: int, d_state: int, num_warps: int) -> list[torch.Tensor]:
    """Gradients of ``mamba2_core``'s o: [d proj, d conv_w, d conv_b, d dt_bias, d a_log,
    d skip, d norm_w]."""
    batch, length, width = proj.shape
    heads, e = a_log.shape[0], a_log.shape[0] * headdim
    n_part = conv_w.numel() + conv_w.shape[1] + 3 * heads + e
    proj = proj.contiguous()
    used = 2 * e + 2 * d_state + heads
    # padding columns of the in-projection (in_proj_pad_multiple) get no gradient
    dproj = (proj.new_zeros if width > used else proj.new_empty)(proj.shape)
    part = torch.empty(batch, n_part, device=proj.device, dtype=torch.float32)
    _core_bwd_kernel[(batch,)](proj, d_o.contiguous(), rstd, dproj, part, conv_w.contiguous(),
                               conv_b.contiguous(), dt_bias.contiguous(), a_log.contiguous(),
                               skip.contiguous(), norm_w.contiguous(), length, PART=n_part,
                               **_meta(proj, a_log, headdim, d_state, conv_w),
                               num_warps=num_warps)
    return [dproj, *window_sums(part, (conv_w, conv_b, dt_bias, a_log, skip, norm_w))]


def window_sums(part: torch.Tensor, params: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """The parameters' gradients from the windows' partial sums part [B, sum of numels] (laid
    out in ``params``' order): each its own reduction over windows, since outputs of a custom
    op must not be views of one another."""
    grads, start = [], 0
    for param in params:
        stop = start + param.numel()
        grads.append(part[:, start:stop].sum(0).view(param.shape).to(param.dtype))
        start = stop
    return grads


@mamba2_core_backward.register_fake
def _(d_o, proj, rstd, conv_w, conv_b, dt_bias, a_log, skip, norm_w, headdim, d_state,
      num_warps):
    return [proj.new_empty(proj.shape), conv_w.new_empty(conv_w.shape),
            conv_b.new_empty(conv_b.shape), dt_bias.new_empty(dt_bias.shape),
            a_log.new_empty(a_log.shape), skip.new_empty(skip.shape),
            norm_w.new_empty(norm_w.shape)]


def _setup_context(ctx, inputs, output) -> None:
    proj, conv_w, conv_b, dt_bias, a_log, skip, norm_w, headdim, d_state, _eps, warps = inputs
    ctx.save_for_backward(proj, output[1], conv_w, conv_b, dt_bias, a_log, skip, norm_w)
    ctx.shape = (headdim, d_state, warps)


def _backward(ctx, d_o, _d_rstd):
    headdim, d_state, warps = ctx.shape
    grads = mamba2_core_backward(d_o, *ctx.saved_tensors, headdim, d_state, warps)
    return (*grads, None, None, None, None)


mamba2_core.register_autograd(_backward, setup_context=_setup_context)
