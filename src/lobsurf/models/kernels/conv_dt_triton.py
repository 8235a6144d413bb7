"""The Mamba2 mixer's conv + SiLU and dt softplus with one backward kernel that writes the
in-projection's gradient itself, for forwards with autograd (the learner's) on CUDA.

The function, from the in-projection's [x | B | C | dt | padding] columns ``xbcdt`` of a
window with no conv context (``mamba2.Mamba2Mixer.forward``):

    xBC[t] = SiLU(bias + sum_k w[k] * xbcdt[t - (W-1) + k, :C])       zeros before t = 0
    dt[t]  = softplus(xbcdt[t, C:C+H] + dt_bias)                        fp32

Why: Inductor's backward of the PyTorch conv recomputes d pre (the pre-activation's
gradient) at each of the W shifts of d x and assembles the whole in-projection gradient
[rows, 648] with d z and d dt in a pass of its own. Here one program per (window, 128
channels; 64 below ``SMALL_BATCH`` windows) walks the window's rows backwards, R rows a
step: d pre[t] from x (the pre-activation recomputed) and d out, then d x[t] = sum_m
w[W-1-m] d pre[t+m] from the last W-1 d pre rows it holds in registers, written once per
row straight into the gradient of ``xbcdt``; one more program per window writes the dt
columns' gradient (softplus' derivative) and zeros the padding. The window's sums of the
conv weight's, its bias' and dt_bias' gradients stay in each thread's registers. Figures:
benchmarks/RESULTS.md, Defaults decided by measurement.

The mixer computes z with a product of its own on this path (``Mamba2Mixer.forward``), so
that autograd never adds a z gradient and this one into one [rows, 648] tensor.

The forward is the conv's forward kernel (``conv_triton.conv_silu``) and PyTorch's
softplus. The PyTorch conv stays the CPU path and the reference (tests compare the
interpreter's run of this kernel against float64).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lobsurf.models.kernels import conv_triton

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the PyTorch conv is used instead
    triton = None

# Launch constants (benchmarks/RESULTS.md, Defaults decided by measurement).
#: channels per program (one window's rows, 256 bytes each in bf16) from ``SMALL_BATCH``
#: windows up
BLOCK_C = 128
#: channels per program below ``SMALL_BATCH`` windows: twice the programs, each walking half
#: the channels (with one warp per program a small batch leaves the GPU mostly idle)
BLOCK_C_SMALL = 64
#: windows below which the backward takes ``BLOCK_C_SMALL`` channels per program (the
#: crossover lies between the measured 256 and 1024)
SMALL_BATCH = 512
#: Triton warps per program
WARPS = 1
#: rows per step of the backward walk whose loads are issued together (1 or 4; 4 ran faster)
ROWS_PER_STEP = 4
#: software-pipelining stages of the row loop
STAGES = 3
#: the widest conv (taps) the kernel holds in registers (Mamba2's d_conv is 4)
MAX_WIDTH = 4
#: PyTorch's softplus threshold: above it softplus is the identity (derivative 1)
SOFTPLUS_THRESHOLD = 20.0

if triton is not None:
    from lobsurf.models.kernels.conv_triton import store_tap_sums, taps

    @triton.jit
    def _x_row(x_ptr, b, t, c, cm, s_b, s_l):
        # x[b, t, c] in fp32, zero before the window (t < 0; t may be a plain int)
        rows = t + c * 0
        return tl.load(x_ptr + b * s_b + rows * s_l + c, mask=cm & (rows >= 0),
                       other=0.0).to(tl.float32)

    @triton.jit
    def _row(t, xn, d, p0, p1, p2, p3, g1, g2, g3, a0, a1, a2, a3, a_bias, w0, w1, w2, w3,
             bias, dx_ptr, b, s_xb, s_xl, c, cm, W: tl.constexpr):
        # Row t of the backward walk: xn = x[t - (W-1)] (the one input row it adds), d = d
        # out[t]; in the registers p0..p3 = x[t..t-3] and g1..g3 = d pre[t+1..t+3] (zero
        # past the window); tap W-1-j multiplies x[t-j]. Writes d x[t]; returns the state
        # for row t-1.
        if W == 1:
            p0 = xn
        elif W == 2:
            p1 = xn
        elif W == 3:
            p2 = xn
        else:
            p3 = xn
        pre = bias + w0 * p0 + w1 * p1 + w2 * p2 + w3 * p3
        sig = tl.sigmoid(pre)
        g = d * sig * (1.0 + pre * (1.0 - sig))
        # d pre in the activation dtype, as the PyTorch conv's backward holds it
        g = g.to(dx_ptr.dtype.element_ty).to(tl.float32)
        dx = w0 * g + w1 * g1 + w2 * g2 + w3 * g3
        rows = t + c * 0
        tl.store(dx_ptr + b * s_xb + rows * s_xl + c, dx.to(dx_ptr.dtype.element_ty),
                 mask=cm & (rows >= 0))
        return (p1, p2, p3, p3, g, g1, g2, a0 + g * p0, a1 + g * p1, a2 + g * p2,
                a3 + g * p3, a_bias + g)

    @triton.jit
    def _conv_tile(x_ptr, w_ptr, b_ptr, dout_ptr, dx_ptr, part_ptr, b, n, L, C, s_b, s_l,
                   s_db, s_dl, s_xb, s_xl, W: tl.constexpr, BC: tl.constexpr,
                   R: tl.constexpr, STAGES_: tl.constexpr):
        # d x of one window's channels n*BC.., rows walked from the last to the first, R rows
        # a step: their 2R loads are issued before the rows are worked through in registers
        # (``_row``), so a program has more than one row's loads in flight (with R = 1 the
        # rows' loads waited one after the other). Rows before the window (a ragged last
        # step) load as zeros and store nothing. Every loop-carried value starts from a
        # tl.zeros or a load of its own (Triton tells carried values apart by identity).
        c = n * BC + tl.arange(0, BC)
        cm = c < C
        w0, w1, w2, w3 = taps(w_ptr, c, cm, C, W)
        p0 = tl.zeros((BC,), tl.float32)
        p1 = tl.zeros((BC,), tl.float32)
        p2 = tl.zeros((BC,), tl.float32)
        p3 = tl.zeros((BC,), tl.float32)
        if W >= 2:
            p0 = _x_row(x_ptr, b, L - 1, c, cm, s_b, s_l)
        if W >= 3:
            p1 = _x_row(x_ptr, b, L - 2, c, cm, s_b, s_l)
        if W >= 4:
            p2 = _x_row(x_ptr, b, L - 3, c, cm, s_b, s_l)
        bias = tl.load(b_ptr + c, mask=cm, other=0.0).to(tl.float32)
        g1 = tl.zeros((BC,), tl.float32)
        g2 = tl.zeros((BC,), tl.float32)
        g3 = tl.zeros((BC,), tl.float32)
        a0 = tl.zeros((BC,), tl.float32)
        a1 = tl.zeros((BC,), tl.float32)
        a2 = tl.zeros((BC,), tl.float32)
        a3 = tl.zeros((BC,), tl.float32)
        a_bias = tl.zeros((BC,), tl.float32)
        for i in tl.range(0, L, R, num_stages=STAGES_):
            t = L - 1 - i
            xa = _x_row(x_ptr, b, t - (W - 1), c, cm, s_b, s_l)
            da = _x_row(dout_ptr, b, t, c, cm, s_db, s_dl)
            if R == 1:
                p0, p1, p2, p3, g1, g2, g3, a0, a1, a2, a3, a_bias = _row(
                    t, xa, da, p0, p1, p2, p3, g1, g2, g3, a0, a1, a2, a3, a_bias, w0, w1,
                    w2, w3, bias, dx_ptr, b, s_xb, s_xl, c, cm, W)
            else:  # R == 4
                xb = _x_row(x_ptr, b, t - W, c, cm, s_b, s_l)
                xc = _x_row(x_ptr, b, t - W - 1, c, cm, s_b, s_l)
                xd = _x_row(x_ptr, b, t - W - 2, c, cm, s_b, s_l)
                db = _x_row(dout_ptr, b, t - 1, c, cm, s_db, s_dl)
                dc = _x_row(dout_ptr, b, t - 2, c, cm, s_db, s_dl)
                dd = _x_row(dout_ptr, b, t - 3, c, cm, s_db, s_dl)
                p0, p1, p2, p3, g1, g2, g3, a0, a1, a2, a3, a_bias = _row(
                    t, xa, da, p0, p1, p2, p3, g1, g2, g3, a0, a1, a2, a3, a_bias, w0, w1,
                    w2, w3, bias, dx_ptr, b, s_xb, s_xl, c, cm, W)
                p0, p1, p2, p3, g1, g2, g3, a0, a1, a2, a3, a_bias = _row(
                    t - 1, xb, db, p0, p1, p2, p3, g1, g2, g3, a0, a1, a2, a3, a_bias, w0,
                    w1, w2, w3, bias, dx_ptr, b, s_xb, s_xl, c, cm, W)
                p0, p1, p2, p3, g1, g2, g3, a0, a1, a2, a3, a_bias = _row(
                    t - 2, xc, dc, p0, p1, p2, p3, g1, g2, g3, a0, a1, a2, a3, a_bias, w0,
                    w1, w2, w3, bias, dx_ptr, b, s_xb, s_xl, c, cm, W)
                p0, p1, p2, p3, g1, g2, g3, a0, a1, a2, a3, a_bias = _row(
                    t - 3, xd, dd, p0, p1, p2, p3, g1, g2, g3, a0, a1, a2, a3, a_bias, w0,
                    w1, w2, w3, bias, dx_ptr, b, s_xb, s_xl, c, cm, W)
        store_tap_sums(part_ptr + b * (W + 1) * C, a0, a1, a2, a3, a_bias, c, cm, C, W)

    @triton.jit
    def _dt_tile(x_ptr, dt_bias_ptr, ddt_ptr, dx_ptr, part_dt_ptr, b, L, C, H, CP, s_b, s_l,
                 s_tb, s_tl, s_xb, s_xl, THRESHOLD: tl.constexpr, LT: tl.constexpr,
                 PT: tl.constexpr):
        # the dt columns' gradient d raw = d dt * softplus'(raw + dt_bias) (PyTorch's form:
        # 1 above the threshold, e^v / (e^v + 1) below), zeros in the padding columns, and
        # the window's sum of d raw (dt_bias' gradient, fp32)
        t = tl.arange(0, LT)
        k = tl.arange(0, PT)
        rows = (t < L)[:, None]
        is_dt = (k < H)[None, :]
        raw = tl.load(x_ptr + b * s_b + t[:, None] * s_l + C + k[None, :], mask=rows & is_dt,
                      other=0.0).to(tl.float32)
        v = raw + tl.load(dt_bias_ptr + k, mask=k < H, other=0.0).to(tl.float32)[None, :]
        ddt = tl.load(ddt_ptr + b * s_tb + t[:, None] * s_tl + k[None, :], mask=rows & is_dt,
                      other=0.0).to(tl.float32)
        e = tl.exp(tl.minimum(v, THRESHOLD))
        g = tl.where(v > THRESHOLD, ddt, ddt * e / (e + 1.0))
        g = tl.where(rows & is_dt, g, 0.0)
        tl.store(dx_ptr + b * s_xb + t[:, None] * s_xl + C + k[None, :],
                 g.to(dx_ptr.dtype.element_ty), mask=rows & (C + k < CP)[None, :])
        tl.store(part_dt_ptr + b * H + k, tl.sum(g, 0), mask=k < H)

    @triton.jit
    def _conv_dt_bwd_kernel(x_ptr, w_ptr, b_ptr, dt_bias_ptr, dout_ptr, ddt_ptr, dx_ptr,
                            part_ptr, part_dt_ptr, L, C, H, CP, s_b, s_l, s_db, s_dl, s_tb,
                            s_tl, s_xb, s_xl, W: tl.constexpr, BC: tl.constexpr,
                            LT: tl.constexpr, PT: tl.constexpr, ALIGN: tl.constexpr,
                            R: tl.constexpr, STAGES_: tl.constexpr,
                            THRESHOLD: tl.constexpr):
        # Grid (window, channel tiles + 1): after a window's channel tiles one program takes
        # the dt and padding columns. The row strides of x and d x come in units of ALIGN
        # elements (Triton proves 16-byte alignment only for multiples of 16; 648 and 392
        # are not).
        s_b = s_b * ALIGN
        s_l = s_l * ALIGN
        s_xb = s_xb * ALIGN
        s_xl = s_xl * ALIGN
        b = tl.program_id(0)
        n = tl.program_id(1)
        n_conv = tl.cdiv(C, BC)
        if n < n_conv:
            _conv_tile(x_ptr, w_ptr, b_ptr, dout_ptr, dx_ptr, part_ptr, b, n, L, C, s_b, s_l,
                       s_db, s_dl, s_xb, s_xl, W, BC, R, STAGES_)
        else:
            _dt_tile(x_ptr, dt_bias_ptr, ddt_ptr, dx_ptr, part_dt_ptr, b, L, C, H, CP, s_b,
                     s_l, s_tb, s_tl, s_xb, s_xl, THRESHOLD, LT, PT)


def block_channels(batch: int) -> int:
    """Channels per program of the backward kernel for ``batch`` windows."""
    return BLOCK_C_SMALL if batch < SMALL_BATCH else BLOCK_C


def supports(width: int) -> bool:
    """Whether the kernel holds a conv of ``width`` taps (at most ``MAX_WIDTH``)."""
    return 1 <= width <= MAX_WIDTH


def _check_args(cols: int, weight: torch.Tensor, channels: int, heads: int) -> None:
    if ROWS_PER_STEP not in (1, 4):
        raise ValueError(f"conv_dt: ROWS_PER_STEP must be 1 or 4, got {ROWS_PER_STEP}")
    if not supports(weight.shape[0]):
        raise ValueError(f"conv_dt: at most {MAX_WIDTH} taps, got {weight.shape[0]}")
    if cols < channels + heads:
        raise ValueError(f"conv_dt: {cols} columns, fewer than {channels} channels + "
                         f"{heads} heads")


def conv_dt(xbcdt: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
            dt_bias: torch.Tensor, channels: int, heads: int
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """(SiLU(causal conv(xBC)), softplus(dt + dt_bias)) of the in-projection's columns.

    Args:
        xbcdt: [B, L, P] (unit column stride, P >= channels + heads): xBC in the first
            ``channels`` columns, the raw dt in the next ``heads``, padding after.
        weight: [W, channels] (tap k multiplies x[t - (W-1) + k]); bias [channels]; both in
            xbcdt's dtype. dt_bias: [heads].

    Returns:
        xBC [B, L, channels] in xbcdt's dtype and dt [B, L, heads] float32. Differentiable:
        the gradient of ``xbcdt`` comes whole (padding columns zero) from one kernel.
    """
    _check_args(xbcdt.shape[-1], weight, channels, heads)
    if not torch.is_grad_enabled():
        return _forward(xbcdt, weight, bias, dt_bias, channels, heads)
    return _ConvDt.apply(xbcdt, weight, bias, dt_bias, channels, heads)


def _forward(xbcdt, weight, bias, dt_bias, channels, heads):
    # the forward kernel on the xBC columns; the dt columns as PyTorch's mixer computes them
    xbc = conv_triton.conv_silu(xbcdt[..., :channels], weight, bias)
    return xbc, F.softplus(xbcdt[..., channels:channels + heads] + dt_bias)


class _ConvDt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xbcdt, weight, bias, dt_bias, channels, heads):
        ctx.save_for_backward(xbcdt, weight, bias, dt_bias)
        ctx.channels = channels
        return _forward(xbcdt, weight, bias, dt_bias, channels, heads)

    @staticmethod
    def backward(ctx, dxbc, ddt):
        xbcdt, weight, bias, dt_bias = ctx.saved_tensors
        dx, part, part_dt = _conv_dt_bwd_op(dxbc, ddt, xbcdt, weight, bias, dt_bias,
                                            ctx.channels)
        # the windows' partial sums reduced in a fixed order (deterministic, no atomics)
        # here, outside the op: under torch.compile Inductor fuses these reductions and
        # casts with their neighbours (inside the op they were three PyTorch reductions and
        # two casts, each a launch of its own on the backward's serial path)
        width = weight.shape[0]
        return (dx, part[:, :width].sum(0).to(weight.dtype), part[:, width].sum(0).to(bias.dtype),
                part_dt.sum(0).to(dt_bias.dtype), None, None)


@torch.library.custom_op("lobsurf::conv_dt_bwd", mutates_args=())
def _conv_dt_bwd_op(dxbc: torch.Tensor, ddt: torch.Tensor, xbcdt: torch.Tensor,
                    weight: torch.Tensor, bias: torch.Tensor, dt_bias: torch.Tensor,
                    channels: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # (d xbcdt, the windows' partial sums [B, W + 1, channels] of d weight (W taps) and d
    # bias, and [B, H] of d dt_bias, fp32); ``_ConvDt.backward`` sums the partials
    if xbcdt.stride(-1) != 1:
        raise ValueError(f"conv_dt: column stride must be 1, got {xbcdt.stride()}")
    dxbc, ddt = dxbc.contiguous(), ddt.contiguous()
    batch, length, width_p = xbcdt.shape
    width, heads = weight.shape[0], dt_bias.shape[0]
    dx = torch.empty(xbcdt.shape, device=xbcdt.device, dtype=xbcdt.dtype)
    align = min(conv_triton.row_alignment(xbcdt), conv_triton.row_alignment(dx))
    part = torch.empty(batch, width + 1, channels, device=xbcdt.device, dtype=torch.float32)
    part_dt = torch.empty(batch, heads, device=xbcdt.device, dtype=torch.float32)
    block = block_channels(batch)
    _conv_dt_bwd_kernel[(batch, triton.cdiv(channels, block) + 1)](
        xbcdt, weight.contiguous(), bias.contiguous(), dt_bias.contiguous(), dxbc, ddt, dx,
        part, part_dt, length, channels, heads, width_p, xbcdt.stride(0) // align,
        xbcdt.stride(1) // align, dxbc.stride(0), dxbc.stride(1), ddt.stride(0),
        ddt.stride(1), dx.stride(0) // align, dx.stride(1) // align, W=width, BC=block,
        LT=max(16, triton.next_power_of_2(length)),
        PT=max(16, triton.next_power_of_2(width_p - channels)), ALIGN=align,
        R=ROWS_PER_STEP, STAGES_=STAGES, THRESHOLD=SOFTPLUS_THRESHOLD, num_warps=WARPS)
    return dx, part, part_dt


@_conv_dt_bwd_op.register_fake
def _(dxbc, ddt, xbcdt, weight, bias, dt_bias, channels):
    partial = dict(device=xbcdt.device, dtype=torch.float32)
    return (torch.empty(xbcdt.shape, device=xbcdt.device, dtype=xbcdt.dtype),
            torch.empty(xbcdt.shape[0], weight.shape[0] + 1, channels, **partial),
            torch.empty(xbcdt.shape[0], dt_bias.shape[0], **partial))
