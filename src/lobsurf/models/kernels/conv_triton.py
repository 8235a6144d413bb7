"""Triton kernel of Mamba2's causal depthwise convolution + SiLU, forward only.

Same function as ``Mamba2Mixer._conv`` with no context (zeros before t = 0), whose PyTorch
shifted multiply-adds (``torch_conv_silu``) stay the CPU path and the reference (tests
compare the two, and both against float64):

    out[b, t, c] = SiLU(bias[c] + sum_k weight[k, c] * x[b, t - (W-1) + k, c])

The mixer runs it on CUDA in the forwards without autograd (acting, the target net), and
``conv_dt_triton`` runs it as the forward of the learner's conv + dt softplus, whose
backward is that module's kernel. One program per (window, 128 channels) walks the rows,
``FWD_WALK_ROWS`` rows' loads issued at a time, and keeps the last W-1 inputs in
registers, so each row of x is read once (Inductor's conv read each row W times). x's
strides come in units of their alignment (``row_alignment``): Triton specializes an
integer only when it is a multiple of 16, and the in-projection slice's row stride (648
in bf16) is not one, so without the factor every load of x would be a scalar one.

Layout [B, L, C] with unit channel stride (the in_proj output slice), no transposes.
Registered as ``torch.ops.lobsurf.conv_silu`` (a custom op, no autograd) for torch.compile.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the PyTorch conv is used instead
    triton = None

# Launch constants (benchmarks/RESULTS.md, Defaults decided by measurement).
#: rows per step of the row walk whose loads are issued together (1 or 4; 4 ran faster)
FWD_WALK_ROWS = 4
#: channels per program of the row walk (one window's rows, 256 bytes in bf16)
FWD_WALK_BLOCK_C = 128
#: Triton warps per program of the row walk
FWD_WALK_WARPS = 1
#: software-pipelining stages of the row loop
FWD_WALK_STAGES = 3
#: the widest conv (taps) the row-walking kernels (this one, ``conv_dt_triton``'s backward)
#: hold in registers (``taps``; Mamba2's d_conv is 4)
MAX_WIDTH = 4

if triton is not None:

    @triton.jit
    def _walk_setup(w_ptr, b_ptr, C, s_b, s_l, ALIGN: tl.constexpr, BC: tl.constexpr,
                    W: tl.constexpr):
        # a row-walking program's start: x's strides from units of ALIGN elements to
        # elements, its window b and channels c (mask cm), the conv's taps and bias (fp32)
        b = tl.program_id(0)
        c = tl.program_id(1) * BC + tl.arange(0, BC)
        cm = c < C
        w0, w1, w2, w3 = taps(w_ptr, c, cm, C, W)
        bias = tl.load(b_ptr + c, mask=cm, other=0.0).to(tl.float32)
        return s_b * ALIGN, s_l * ALIGN, b, c, cm, w0, w1, w2, w3, bias

    @triton.jit
    def _row_below(x_ptr, b, t, c, cm, L, s_b, s_l):
        # x[b, t, c] in fp32, zero past the window (t >= L; t may be a plain int)
        rows = t + c * 0
        return tl.load(x_ptr + b * s_b + rows * s_l + c, mask=cm & (rows < L),
                       other=0.0).to(tl.float32)

    @triton.jit
    def _silu_row(x0, x1, x2, x3, w0, w1, w2, w3, bias, out_ptr, b, t, c, cm, L, s_ob, s_ol):
        # output row t from x[t], x[t-1], x[t-2], x[t-3] (tap W-1-j multiplies x[t-j])
        pre = bias + w0 * x0 + w1 * x1 + w2 * x2 + w3 * x3
        rows = t + c * 0
        tl.store(out_ptr + b * s_ob + rows * s_ol + c,
                 (pre * tl.sigmoid(pre)).to(out_ptr.dtype.element_ty), mask=cm & (rows < L))

    @triton.jit
    def _conv_walk_fwd_kernel(x_ptr, w_ptr, b_ptr, out_ptr, L, C, s_b, s_l, s_ob, s_ol,
                              W: tl.constexpr, BC: tl.constexpr, ALIGN: tl.constexpr,
                              R: tl.constexpr, STAGES_: tl.constexpr):
        # One program per (window, BC channels) walks the rows from first to last, R rows a
        # step: their R loads are issued before any of the step's stores (a store may alias
        # a later load, so the compiler will not hoist loads above it), and the last W-1
        # inputs stay in registers, so each x row is read once (the tile kernel reads it W
        # times from cache). Rows past the window load as zeros and store nothing. Every
        # loop-carried value starts from a tl.zeros of its own: Triton's code generator finds
        # the values a loop carries by object identity, so with one shared zero the shifts
        # x3 = x2, x2 = x1 looked unchanged (the CPU interpreter, plain Python, got it
        # right; a GPU test caught it). x's strides come in units of ALIGN elements (W <= 4).
        s_b, s_l, b, c, cm, w0, w1, w2, w3, bias = _walk_setup(w_ptr, b_ptr, C, s_b, s_l,
                                                               ALIGN, BC, W)
        x1 = tl.zeros((BC,), tl.float32)  # x[t-1], zero before t = 0
        x2 = tl.zeros((BC,), tl.float32)
        x3 = tl.zeros((BC,), tl.float32)
        for t in tl.range(0, L, R, num_stages=STAGES_):
            xa = _row_below(x_ptr, b, t, c, cm, L, s_b, s_l)
            if R == 1:
                _silu_row(xa, x1, x2, x3, w0, w1, w2, w3, bias, out_ptr, b, t, c, cm, L,
                          s_ob, s_ol)
                x3 = x2
                x2 = x1
                x1 = xa
            else:  # R == 4
                xb = _row_below(x_ptr, b, t + 1, c, cm, L, s_b, s_l)
                xc = _row_below(x_ptr, b, t + 2, c, cm, L, s_b, s_l)
                xd = _row_below(x_ptr, b, t + 3, c, cm, L, s_b, s_l)
                _silu_row(xa, x1, x2, x3, w0, w1, w2, w3, bias, out_ptr, b, t, c, cm, L,
                          s_ob, s_ol)
                _silu_row(xb, xa, x1, x2, w0, w1, w2, w3, bias, out_ptr, b, t + 1, c, cm, L,
                          s_ob, s_ol)
                _silu_row(xc, xb, xa, x1, w0, w1, w2, w3, bias, out_ptr, b, t + 2, c, cm, L,
                          s_ob, s_ol)
                _silu_row(xd, xc, xb, xa, w0, w1, w2, w3, bias, out_ptr, b, t + 3, c, cm, L,
                          s_ob, s_ol)
                x3 = xb
                x2 = xc
                x1 = xd

    @triton.jit
    def taps(w_ptr, c, cm, C, W: tl.constexpr):
        # the conv weight's taps for channels c as fp32 vectors: w0 multiplies x[t], w1
        # x[t-1], ... (tap W-1-j multiplies x[t-j]); zeros for the taps past W (W <= 4)
        w0 = tl.load(w_ptr + (W - 1) * C + c, mask=cm, other=0.0).to(tl.float32)
        w1 = tl.zeros(c.shape, tl.float32)
        w2 = tl.zeros(c.shape, tl.float32)
        w3 = tl.zeros(c.shape, tl.float32)
        if W >= 2:
            w1 = tl.load(w_ptr + (W - 2) * C + c, mask=cm, other=0.0).to(tl.float32)
        if W >= 3:
            w2 = tl.load(w_ptr + (W - 3) * C + c, mask=cm, other=0.0).to(tl.float32)
        if W >= 4:
            w3 = tl.load(w_ptr + (W - 4) * C + c, mask=cm, other=0.0).to(tl.float32)
        return w0, w1, w2, w3

    @triton.jit
    def store_tap_sums(part, a0, a1, a2, a3, a_bias, c, cm, C, W: tl.constexpr):
        # a window's sums of d weight (a_j for the tap that multiplies x[t-j]) and d bias,
        # into its [W + 1, C] block of partial sums
        tl.store(part + (W - 1) * C + c, a0, mask=cm)
        if W >= 2:
            tl.store(part + (W - 2) * C + c, a1, mask=cm)
        if W >= 3:
            tl.store(part + (W - 3) * C + c, a2, mask=cm)
        if W >= 4:
            tl.store(part + (W - 4) * C + c, a3, mask=cm)
        tl.store(part + W * C + c, a_bias, mask=cm)


def supports(width: int) -> bool:
    """Whether the kernel holds a conv of ``width`` taps (at most ``MAX_WIDTH``)."""
    return 1 <= width <= MAX_WIDTH


def conv_silu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """SiLU(causal depthwise conv(x)) with zeros before t = 0: x [B, L, C] (unit channel
    stride), weight [W, C] (tap k multiplies x[t - (W-1) + k], W <= ``MAX_WIDTH``), bias
    [C]; output in x.dtype. Forward only: no gradient flows through it."""
    return _conv_silu_op(x, weight, bias)


@torch.library.custom_op("lobsurf::conv_silu", mutates_args=())
def _conv_silu_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    if x.stride(-1) != 1:
        raise ValueError(f"conv_silu: channel stride must be 1, got {x.stride()}")
    width = weight.shape[0]
    if not supports(width):
        raise ValueError(f"conv_silu: at most {MAX_WIDTH} taps, got {width}")
    if FWD_WALK_ROWS not in (1, 4):
        raise ValueError(f"conv_silu: FWD_WALK_ROWS must be 1 or 4, got {FWD_WALK_ROWS}")
    batch, length, channels = x.shape
    align = row_alignment(x)
    out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    _conv_walk_fwd_kernel[(batch, triton.cdiv(channels, FWD_WALK_BLOCK_C))](
        x, weight.contiguous(), bias.contiguous(), out, length, channels,
        x.stride(0) // align, x.stride(1) // align, out.stride(0), out.stride(1),
        W=width, BC=FWD_WALK_BLOCK_C, ALIGN=align, R=FWD_WALK_ROWS,
        STAGES_=FWD_WALK_STAGES, num_warps=FWD_WALK_WARPS)
    return out


@_conv_silu_op.register_fake
def _(x, weight, bias):
    return torch.empty(x.shape, device=x.device, dtype=x.dtype)


def torch_conv_silu(padded: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                    length: int) -> torch.Tensor:
    """SiLU(bias + sum_k weight[k] * padded[:, k:k + length]): the causal depthwise conv as
    W shifted multiply-adds on the channel-last layout (no transposes; torch.compile fuses
    it). ``padded`` [B, W-1+length, C] holds the W-1 inputs before t = 0 first."""
    out = bias + padded[:, 0:length] * weight[0]
    for k in range(1, weight.shape[0]):
        out = out + padded[:, k:k + length] * weight[k]
    return F.silu(out)


def row_alignment(x: torch.Tensor, dims: int = 2) -> int:
    """The largest of 8, 4, 2, 1 elements that x's first ``dims`` strides (batch and row;
    batch alone for a [B, C] tensor of one row per window) are multiples of: 8 bf16 (16
    bytes) allows vector loads."""
    for align in (8, 4, 2):
        if all(stride % align == 0 for stride in x.stride()[:dims]):
            return align
    return 1
