"""The gated one-chunk scan with the conv + SiLU and the dt softplus inside its kernel, for
the encoder's forwards without autograd (acting on B windows, the target net on 2B).

``ssd_window_triton.ssd_window_gated`` takes x, B, C after the causal depthwise conv and
SiLU, and dt after its softplus: in those forwards the conv kernel
(``conv_triton.conv_silu``) reads the in-projection's [x | B | C] columns and writes them
back convolved, [B, L, E + 2N], which the scan then reads again, and a kernel of
Inductor's computes softplus(dt + dt_bias). Here the scan's programs read the
in-projection's columns themselves and compute

    x, B, C = SiLU(conv_bias + sum_k conv_w[k] * pre[t - (W-1) + k])   zeros before t = 0
    dt      = softplus(raw dt + dt_bias)                               fp32

in registers (each tap a load of the same rows shifted, from cache), then run the gated
scan (``ssd_window_triton._scan_out``). The convolved tensor is never written, nor read.
Two grids (``per_head``, ``EncoderConfig.scan_conv_programs``): one program per (window,
head), each convolving the window's B and C itself (H times the conv's arithmetic on those
2N columns, and H times their scores C B^T), or one per window, B, C and the scores once
and the heads in a loop (more registers per program). The conv's sums are fp32 and its
outputs are rounded to the input dtype before the products, as the conv kernel's store
rounds them.

Opt-in (``EncoderConfig.scan_conv``, ``Mamba2Mixer._gated_scan_out``): the first version
(per (window, head), 4 warps, fp32 tiles) was slower than the conv and scan kernels it
replaces on the H200 (benchmarks/RESULTS.md, twenty-fifth session); the grids and warps
are compared by ``benchmarks/bench_scan_conv.py`` and ``benchmarks/gpu_scan_conv.sh``.
The PyTorch conv, softplus, scan and gated norm stay the CPU path and the reference (tests
compare the two, and the kernel against float64 step by step). Registered as
``torch.ops.lobsurf.ssd_window_gated_conv`` so torch.compile treats it as one opaque call
and CUDA graphs capture it. Runs on CUDA, and on CPU tensors under Triton's interpreter
(TRITON_INTERPRET=1), which the tests use.
"""

from __future__ import annotations

import torch

from lobsurf.models import conv_triton, ssd_window_triton

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the PyTorch conv and scan are used instead
    triton = None


HEAD_STAGES = 1
"""Software-pipelining stages of the head loop (one program per window)."""

if triton is not None:
    from lobsurf.models.conv_dt_triton import softplus
    from lobsurf.models.conv_triton import _pre_rows
    from lobsurf.models.mamba2_fused import _round_bf16
    from lobsurf.models.ssd_window_triton import _mma, _scan_out, decay_of

    @triton.jit
    def _conv_tile(pre_ptr, w_ptr, b_ptr, b, rows, col0, L, CT, s_b, s_l,
                   COLS: tl.constexpr, W: tl.constexpr, BF16: tl.constexpr):
        # SiLU(conv) of channels col0 .. col0 + COLS at ``rows`` [Q] as a [Q, COLS] tile,
        # zero past the window, in the scan's operand dtype: bf16 under bf16 inputs,
        # rounded as the conv kernel's store rounds (the interpreter's, BF16 == 2, in fp32)
        c = col0 + tl.arange(0, COLS)
        bias = tl.load(b_ptr + c).to(tl.float32)
        pre = _pre_rows(pre_ptr, w_ptr, bias, b, rows, c, c < CT, L, CT, s_b, s_l, W)
        out = tl.where((rows < L)[:, None], pre * tl.sigmoid(pre), 0.0)
        if BF16 == 1:
            out = out.to(tl.bfloat16)
        elif BF16 == 2:
            out = _round_bf16(out, BF16)
        return out

    @triton.jit
    def _ssd_window_conv_fwd(pre_ptr, raw_dt_ptr, taps_ptr, tap_bias_ptr, dtb_ptr, a_ptr, d_ptr,
                             y_ptr, z_ptr, w_ptr, ss_ptr, L, H, s_b, s_l, s_dtb, s_dtl, s_yb,
                             s_yl, s_zb, s_zl, s_ssb, s_ssl, E: tl.constexpr, N: tl.constexpr,
                             P: tl.constexpr, Q: tl.constexpr, W: tl.constexpr,
                             LAST_ONLY: tl.constexpr, XALIGN: tl.constexpr,
                             ZALIGN: tl.constexpr, BF16: tl.constexpr, PREC: tl.constexpr,
                             PER_HEAD: tl.constexpr, HEAD_STAGES: tl.constexpr):
        # window b and its head h (PER_HEAD) or all its heads: the conv of B and C, and of
        # each head's x columns, dt, then the gated scan. pre's strides (like z's) come in
        # units of XALIGN elements: Triton specializes an integer only when it is a multiple
        # of 16, and the in-projection's 648-element rows are 16-byte aligned, so its tiles
        # load in vectors, not 2 bytes at a time
        pid = tl.program_id(0)
        if PER_HEAD:
            b = pid // H
            first = pid % H
            heads = 1
        else:
            b = pid
            first = 0
            heads = H
        i = tl.arange(0, Q)
        CT: tl.constexpr = E + 2 * N
        s_b = s_b * XALIGN
        s_l = s_l * XALIGN
        valid = i < L
        Bm = _conv_tile(pre_ptr, taps_ptr, tap_bias_ptr, b, i, E, L, CT, s_b, s_l, N, W, BF16)
        Cm = _conv_tile(pre_ptr, taps_ptr, tap_bias_ptr, b, i, E + N, L, CT, s_b, s_l, N, W,
                        BF16)
        scores = _mma(Cm, tl.trans(Bm), BF16, PREC)  # [Q, Q] fp32, shared by the heads
        for h in tl.range(first, first + heads, num_stages=HEAD_STAGES):
            x = _conv_tile(pre_ptr, taps_ptr, tap_bias_ptr, b, i, h * P, L, CT, s_b, s_l, P, W,
                           BF16)
            A = tl.load(a_ptr + h).to(tl.float32)
            Dh = tl.load(d_ptr + h).to(tl.float32)
            raw = tl.load(raw_dt_ptr + b * s_dtb + i * s_dtl + h, mask=valid,
                          other=0.0).to(tl.float32)
            dt = tl.where(valid, softplus(raw + tl.load(dtb_ptr + h).to(tl.float32)), 0.0)
            _cum, decay = decay_of(dt, A, Q)
            _scan_out(x, scores, dt, decay, Dh, y_ptr, z_ptr, w_ptr, ss_ptr, b, h, L, s_yb,
                      s_yl, s_zb, s_zl, s_ssb, s_ssl, P, Q, LAST_ONLY, True, ZALIGN, BF16, PREC)


def ssd_window_gated_conv(pre: torch.Tensor, dt_raw: torch.Tensor, conv_weight: torch.Tensor,
                          conv_bias: torch.Tensor, dt_bias: torch.Tensor, A: torch.Tensor,
                          D: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, headdim: int,
                          d_state: int, warps: int = 4, last_only: bool = False,
                          per_head: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``ssd_window_triton.ssd_window_gated`` of xbc = SiLU(causal conv(pre)) and
    dt = softplus(dt_raw + dt_bias), both computed in the kernel: (g w, ss), no backward.

    pre: [B, L, H*P + 2N], the in-projection's [x | B | C] columns before the conv (last
    axis contiguous; a strided view of the in-projection is fine); dt_raw: [B, L, H] before
    the bias and softplus (any strides); conv_weight [W, H*P + 2N] (tap k multiplies the
    input at t - (W-1) + k) and conv_bias [H*P + 2N], in pre's dtype as the conv takes them;
    dt_bias [H]; A, D, z, weight as ``ssd_window_gated`` takes them. ``per_head``: one
    program per (window, head), else one per window looping over the heads.
    """
    return _ssd_window_gated_conv_op(pre, dt_raw, conv_weight, conv_bias, dt_bias, A, D, z,
                                     weight, headdim, d_state, warps, last_only, per_head)


@torch.library.custom_op("lobsurf::ssd_window_gated_conv", mutates_args=())
def _ssd_window_gated_conv_op(pre: torch.Tensor, dt_raw: torch.Tensor,
                              conv_weight: torch.Tensor, conv_bias: torch.Tensor,
                              dt_bias: torch.Tensor, A: torch.Tensor, D: torch.Tensor,
                              z: torch.Tensor, weight: torch.Tensor, headdim: int,
                              d_state: int, warps: int, last_only: bool, per_head: bool
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    batch, length, channels = pre.shape
    heads = A.shape[0]
    ssd_window_triton._check(pre, dt_raw, heads, headdim, d_state)
    width = conv_weight.shape[0]
    if (conv_weight.shape != (width, channels) or conv_bias.shape != (channels,)
            or dt_bias.shape != (heads,)):
        raise ValueError(f"ssd_window_gated_conv: conv weight {tuple(conv_weight.shape)}, "
                         f"bias {tuple(conv_bias.shape)} and dt bias {tuple(dt_bias.shape)} "
                         f"for {channels} channels and {heads} heads")
    g, ss, z_align = ssd_window_triton.gate_buffers(pre, z, weight, heads, headdim, last_only)
    pre_align = conv_triton.row_alignment(pre)
    _ssd_window_conv_fwd[(batch * heads if per_head else batch,)](
        pre, dt_raw, conv_weight.contiguous(), conv_bias.contiguous(), dt_bias.contiguous(),
        A.float().contiguous(), D.float().contiguous(), g, z, weight.float().contiguous(), ss,
        length, heads, pre.stride(0) // pre_align, pre.stride(1) // pre_align,
        dt_raw.stride(0), dt_raw.stride(1),
        *ssd_window_triton.gate_strides(g, z, ss, z_align, last_only), E=heads * headdim,
        N=d_state, P=headdim, W=width, LAST_ONLY=last_only, XALIGN=pre_align, ZALIGN=z_align,
        PER_HEAD=per_head, HEAD_STAGES=HEAD_STAGES,
        **ssd_window_triton._flags(pre), num_warps=warps)
    return g, ss


@_ssd_window_gated_conv_op.register_fake
def _(pre, dt_raw, conv_weight, conv_bias, dt_bias, A, D, z, weight, headdim, d_state, warps,
      last_only, per_head):
    return ssd_window_triton.gated_like(pre, A.shape[0], headdim, last_only)
