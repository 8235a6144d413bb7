"""Fused Triton kernels of Mamba2's causal depthwise convolution + SiLU (forward, backward).

Same function as ``Mamba2Mixer._conv`` with no context (zeros before t = 0), whose PyTorch
shifted multiply-adds (``torch_conv_silu``) stay the CPU path and the reference (tests
compare the two, and both against float64):

    out[b, t, c] = SiLU(bias[c] + sum_k weight[k, c] * x[b, t - (W-1) + k, c])

Opt-in through ``EncoderConfig.conv_backend = "triton"``. Why a kernel: written with PyTorch
ops, torch.compile materialises the padded input, saves it, and in the backward runs several
passes for the W shifted products and the weight reductions (about 4x this op's byte floor
in the profile, benchmarks/encoder_perf_notes.md). Here the forward reads x once and writes
out once; the backward computes d pre once per row (the pre-activation recomputed from x),
stages it in a scratch block of its own program, reads it back at the W shifts d x needs,
and writes d x once, plus per-tile partial sums of d weight and d bias that PyTorch adds up.

Still slower than the compiled PyTorch conv in the compiled bf16 step (H200, B = 1024 / 2
layers, benchmarks/RESULTS.md, eleventh session): 235.2 steps/s against 254.7-259.6 with
Inductor's conv; the first version of the backward (d pre recomputed at each of the W
shifts, 32 x 128 tiles) was 212.2 (its kernel alone 573 µs per block against ~246 µs of
Inductor's conv kernels). So it stays opt-in. Its x loads were scalar then: Triton cannot
tell that the in_proj slice's row stride (648) is 16-byte aligned. The d pre kernel below
avoids that by taking the strides in units of 8 (which took it from 251 to 155 µs), and so
does the forward kernel since the fifteenth session; the ``"triton"`` backward kernel was
not changed.

Layout [B, L, C] with unit channel stride (the in_proj output slice), no transposes.
Registered as ``torch.ops.lobsurf.conv_silu`` (custom op with autograd) for torch.compile.

``conv_backend = "triton_dpre"`` splits the work differently (``conv_silu_dpre``): the
forward stays the PyTorch shifted multiply-adds (``torch_conv_silu``, fused by Inductor
with its neighbours), and of the backward one kernel (``lobsurf::conv_dpre``) computes
d pre = d out * SiLU'(pre) once per element, the pre-activation recomputed from x, with each
window's sums of d weight and d bias; the shifted sum d x[t] = sum_k w[k] d pre[t + W-1-k]
is left to PyTorch, so Inductor writes it straight into the in_proj gradient it assembles.
Inductor's own backward of the PyTorch conv recomputes d pre at each of the W shifts and
again for the weight sums (about 0.25 ms per block at B = 1024 in bf16). The kernel walks
each window's rows with the sums in each thread's registers (0.086 ms, fifteenth session;
benchmarks/RESULTS.md); the [64 x 64]-tile kernel before it (0.155 ms, the step 320.4 ->
334.7 steps/s, fourteenth session) spent ~95 us of that summing its tiles across threads.

``conv_backend = "triton_fwd"`` (``conv_silu_fwd_dpre``; what ``"auto"`` ran on CUDA until
``"triton_dx"``, ``conv_dt_triton.py``, whose forward is the same kernel) takes that
backward with the forward kernel in place of PyTorch's forward, in every forward (without
autograd, the forward kernel alone). Inductor's conv forward is one flat pointwise
kernel with index division and an IEEE division per element (50-67 µs per 1024 windows in
the step); the kernel is 46 µs alone, about what Inductor's is alone, and the step gained
353.2 -> 359.7 steps/s side by side (fifteenth session, benchmarks/RESULTS.md).

Since the eighteenth session the forward (``conv_silu``, in every path above that runs the
forward kernel, ``conv_dt_triton``'s included) walks rows (``_conv_walk_fwd_kernel``,
``FWD_WALK_ROWS = 4``): one program per (window, 128 channels) issues 4 rows' loads at a
time and keeps the last W-1 inputs in registers, so each row of x is read once; the tile
kernel read each row W times from cache. Alone at B = 1024 in bf16 (H200): 0.033 ms
against the tile kernel's 0.046 (bytes at the HBM peak: 0.021; 1 row a step 0.050-0.052;
8 rows, tried and not kept, 0.033-0.036); the B = 1024 / 2-layer step 384.3 -> 401.7
steps/s side by side. The tile kernel stays for ``FWD_WALK_ROWS = 0`` and for convs wider
than ``DPRE_MAX_WIDTH``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the PyTorch conv is used instead
    triton = None

BLOCK_T = 64
"""Time steps per program of the ``"triton"`` backward (tile rows; weight sums per tile)."""
BLOCK_C = 32
"""Channels per program of the ``"triton"`` backward (tile columns, contiguous in memory)."""
WARPS = 4
"""Triton warps per program of the ``"triton"`` backward."""
FWD_BLOCK_T = 64
"""Time steps per program of the forward kernel (one K = 64 window per tile)."""
FWD_BLOCK_C = 64
"""Channels per program of the forward kernel (128-byte rows in bf16)."""
FWD_WARPS = 4
"""Triton warps per program of the forward kernel."""
FWD_WALK_ROWS = 4
"""Rows per step of the forward's row walk whose loads are issued together (1 or 4); 0 runs
the [FWD_BLOCK_T x FWD_BLOCK_C] tile kernel instead (each row loaded W times, from cache)."""
FWD_WALK_BLOCK_C = 128
"""Channels per program of the forward's row walk (one window's rows, 256 bytes in bf16)."""
FWD_WALK_WARPS = 1
"""Triton warps per program of the forward's row walk."""
FWD_WALK_STAGES = 3
"""Software-pipelining stages of the forward's row loop."""
DPRE_BLOCK_C = 128
"""Channels per program of the d pre kernel (one window's rows, 256 bytes each in bf16)."""
DPRE_WARPS = 1
"""Triton warps per program of the d pre kernel."""
DPRE_STAGES = 3
"""Software-pipelining stages of the d pre kernel's row loop."""
DPRE_MAX_WIDTH = 4
"""The widest conv (taps) the row-walking kernels (d pre, the forward's walk) hold in
registers (``taps``; Mamba2's d_conv is 4)."""

if triton is not None:

    @triton.jit
    def _pre_rows(x_ptr, w_ptr, bias, b, rows, c, cmask, L, C, s_b, s_l, W: tl.constexpr):
        # The pre-activation bias + sum_k w[k] x[t - (W-1) + k] at ``rows`` (zeros before 0).
        pre = tl.zeros((rows.shape[0], c.shape[0]), dtype=tl.float32) + bias[None, :]
        for k in tl.static_range(W):
            src = rows - (W - 1) + k
            xv = tl.load(x_ptr + b * s_b + src[:, None] * s_l + c[None, :],
                         mask=((src >= 0) & (src < L))[:, None] & cmask[None, :],
                         other=0.0).to(tl.float32)
            wk = tl.load(w_ptr + k * C + c, mask=cmask, other=0.0).to(tl.float32)
            pre += xv * wk[None, :]
        return pre

    @triton.jit
    def _tile(L, C, BT: tl.constexpr, BC: tl.constexpr):
        # this program's window b, rows t and channels c (with their mask) of a [BT, BC] tile
        pid_t = tl.program_id(0)
        nt = tl.cdiv(L, BT)
        c = tl.program_id(1) * BC + tl.arange(0, BC)
        return pid_t // nt, (pid_t % nt) * BT + tl.arange(0, BT), c, c < C

    @triton.jit
    def _conv_fwd_kernel(x_ptr, w_ptr, b_ptr, out_ptr, L, C, s_b, s_l, s_ob, s_ol,
                         W: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
                         ALIGN: tl.constexpr):
        # x's strides in units of ALIGN elements, as in the d pre kernel below (vector loads
        # of the in_proj slice, whose row stride Triton cannot prove 16-byte aligned)
        s_b = s_b * ALIGN
        s_l = s_l * ALIGN
        b, t, c, cmask = _tile(L, C, BT, BC)
        bias = tl.load(b_ptr + c, mask=cmask, other=0.0).to(tl.float32)
        pre = _pre_rows(x_ptr, w_ptr, bias, b, t, c, cmask, L, C, s_b, s_l, W)
        out = pre * tl.sigmoid(pre)
        tl.store(out_ptr + b * s_ob + t[:, None] * s_ol + c[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=(t < L)[:, None] & cmask[None, :])

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
        # times from cache). Rows past the window load as zeros and store nothing. As in the
        # d pre kernel, each carried value starts from a tl.zeros of its own and x's strides
        # come in units of ALIGN elements (W <= 4).
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
    def _dpre_rows(x_ptr, w_ptr, dout_ptr, bias, b, rows, c, cmask, L, C, s_b, s_l, s_db,
                   s_dl, W: tl.constexpr):
        # d loss / d pre-activation at ``rows`` (zero past the window): the pre-activation
        # recomputed from x, times SiLU's derivative, times d out.
        pre = _pre_rows(x_ptr, w_ptr, bias, b, rows, c, cmask, L, C, s_b, s_l, W)
        g = tl.load(dout_ptr + b * s_db + rows[:, None] * s_dl + c[None, :],
                    mask=(rows < L)[:, None] & cmask[None, :], other=0.0).to(tl.float32)
        sig = tl.sigmoid(pre)
        return g * sig * (1.0 + pre * (1.0 - sig))

    @triton.jit
    def _store_partial_sums(part, x_ptr, dpre, b, t, c, cmask, L, C, s_b, s_l,
                            W: tl.constexpr):
        # a tile's partial sums of d weight (tap k reads x[t - (W-1) + k]) and d bias
        for k in tl.static_range(W):
            src = t - (W - 1) + k
            xv = tl.load(x_ptr + b * s_b + src[:, None] * s_l + c[None, :],
                         mask=((src >= 0) & (src < L))[:, None] & cmask[None, :],
                         other=0.0).to(tl.float32)
            tl.store(part + k * C + c, tl.sum(xv * dpre, 0), mask=cmask)
        tl.store(part + W * C + c, tl.sum(dpre, 0), mask=cmask)

    @triton.jit
    def _conv_bwd_kernel(x_ptr, w_ptr, b_ptr, dout_ptr, dx_ptr, part_ptr, scratch_ptr, L, C,
                         s_b, s_l, s_db, s_dl, s_xb, s_xl, W: tl.constexpr, BT: tl.constexpr,
                         BH: tl.constexpr, BC: tl.constexpr):
        pid_t = tl.program_id(0)
        nt = tl.cdiv(L, BT)
        b, t, c, cmask = _tile(L, C, BT, BC)
        bias = tl.load(b_ptr + c, mask=cmask, other=0.0).to(tl.float32)
        # d pre once per row: this tile's rows and the W-1 after it (their outputs read this
        # tile's x), staged in this program's own scratch rows so the shifted sums below read
        # them back (cache hits) instead of recomputing the pre-activation W times.
        dpre = _dpre_rows(x_ptr, w_ptr, dout_ptr, bias, b, t, c, cmask, L, C, s_b, s_l, s_db,
                          s_dl, W)
        after = (pid_t % nt) * BT + BT + tl.arange(0, BH)
        dpre_after = _dpre_rows(x_ptr, w_ptr, dout_ptr, bias, b, after, c, cmask, L, C, s_b,
                                s_l, s_db, s_dl, W)
        cols = tl.arange(0, BC)
        scratch = scratch_ptr + (pid_t * tl.num_programs(1) + tl.program_id(1)) * (BT + BH) * BC
        tl.store(scratch + tl.arange(0, BT)[:, None] * BC + cols[None, :],
                 dpre.to(scratch_ptr.dtype.element_ty))
        tl.store(scratch + (BT + tl.arange(0, BH))[:, None] * BC + cols[None, :],
                 dpre_after.to(scratch_ptr.dtype.element_ty))
        _store_partial_sums(part_ptr + pid_t * (W + 1) * C, x_ptr, dpre, b, t, c, cmask, L, C,
                            s_b, s_l, W)
        tl.debug_barrier()  # the scratch rows written above, visible to every thread
        # Output s = t + m reads x[t] through tap W-1-m: dx[t] = sum_m w[W-1-m] dpre[t+m].
        dx = tl.zeros((BT, BC), dtype=tl.float32)
        for m in tl.static_range(W):
            shifted = tl.load(scratch + (tl.arange(0, BT) + m)[:, None] * BC + cols[None, :])
            wm = tl.load(w_ptr + (W - 1 - m) * C + c, mask=cmask, other=0.0).to(tl.float32)
            dx += shifted.to(tl.float32) * wm[None, :]
        tl.store(dx_ptr + b * s_xb + t[:, None] * s_xl + c[None, :],
                 dx.to(dx_ptr.dtype.element_ty), mask=(t < L)[:, None] & cmask[None, :])

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

    @triton.jit
    def _conv_dpre_kernel(x_ptr, w_ptr, b_ptr, dout_ptr, dpre_ptr, part_ptr, L, C, s_b, s_l,
                          s_db, s_dl, s_pb, s_pl, W: tl.constexpr, BC: tl.constexpr,
                          ALIGN: tl.constexpr, STAGES: tl.constexpr):
        # d pre of one window's BC channels, row by row, written once per row; the last W-1
        # inputs stay in registers (x1 = x[t-1], ...), and the window's sums of d weight
        # (tap W-1-j multiplies x[t-j]) and d bias accumulate in each thread's registers
        # (its own channels), with no reduction across threads: summing a [rows, channels]
        # tile over its rows cost ~95 of the earlier tile kernel's 155 us. W <= 4. x's
        # strides come in units of ALIGN elements (the wrapper divides them): Triton itself
        # knows only multiples of 16, and the in_proj slice's row stride (648 in bf16) is
        # not one, so without the constexpr factor every x load is a scalar one.
        s_b, s_l, b, c, cm, w0, w1, w2, w3, bias = _walk_setup(w_ptr, b_ptr, C, s_b, s_l,
                                                               ALIGN, BC, W)
        # Every loop-carried value starts from a tl.zeros of its own: Triton's code
        # generator finds the values a loop carries by object identity, so with one shared
        # zero the shifts x3 = x2, x2 = x1 looked unchanged and stayed zero on the GPU (the
        # CPU interpreter runs plain Python and got it right; a GPU test caught it).
        x1 = tl.zeros((BC,), tl.float32)  # x[t-1], zero before t = 0
        x2 = tl.zeros((BC,), tl.float32)
        x3 = tl.zeros((BC,), tl.float32)
        a0 = tl.zeros((BC,), tl.float32)
        a1 = tl.zeros((BC,), tl.float32)
        a2 = tl.zeros((BC,), tl.float32)
        a3 = tl.zeros((BC,), tl.float32)
        a_bias = tl.zeros((BC,), tl.float32)
        for t in tl.range(0, L, num_stages=STAGES):
            x0 = tl.load(x_ptr + b * s_b + t * s_l + c, mask=cm, other=0.0).to(tl.float32)
            d = tl.load(dout_ptr + b * s_db + t * s_dl + c, mask=cm, other=0.0).to(tl.float32)
            pre = bias + w0 * x0 + w1 * x1 + w2 * x2 + w3 * x3
            sig = tl.sigmoid(pre)
            g = d * sig * (1.0 + pre * (1.0 - sig))
            tl.store(dpre_ptr + b * s_pb + t * s_pl + c, g.to(dpre_ptr.dtype.element_ty),
                     mask=cm)
            a0 += g * x0
            a1 += g * x1
            a2 += g * x2
            a3 += g * x3
            a_bias += g
            x3 = x2
            x2 = x1
            x1 = x0
        store_tap_sums(part_ptr + b * (W + 1) * C, a0, a1, a2, a3, a_bias, c, cm, C, W)

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
    # the forward kernel; as an op with no autograd context it also serves the forwards
    # without gradients and ``conv_silu_fwd_dpre``'s forward
    if x.stride(-1) != 1:
        raise ValueError(f"conv_silu: channel stride must be 1, got {x.stride()}")
    batch, length, channels = x.shape
    width = weight.shape[0]
    align = row_alignment(x)
    out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    strides = (x.stride(0) // align, x.stride(1) // align, out.stride(0), out.stride(1))
    if FWD_WALK_ROWS and width <= DPRE_MAX_WIDTH:
        if FWD_WALK_ROWS not in (1, 4):
            raise ValueError(f"conv_silu: FWD_WALK_ROWS must be 0, 1 or 4, got {FWD_WALK_ROWS}")
        _conv_walk_fwd_kernel[(batch, triton.cdiv(channels, FWD_WALK_BLOCK_C))](
            x, weight.contiguous(), bias.contiguous(), out, length, channels, *strides,
            W=width, BC=FWD_WALK_BLOCK_C, ALIGN=align, R=FWD_WALK_ROWS,
            STAGES_=FWD_WALK_STAGES, num_warps=FWD_WALK_WARPS)
        return out
    grid = (batch * triton.cdiv(length, FWD_BLOCK_T), triton.cdiv(channels, FWD_BLOCK_C))
    _conv_fwd_kernel[grid](
        x, weight.contiguous(), bias.contiguous(), out, length, channels, *strides,
        W=width, BT=FWD_BLOCK_T, BC=FWD_BLOCK_C, ALIGN=align, num_warps=FWD_WARPS)
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
    after = triton.next_power_of_2(max(W - 1, 1))  # rows of d pre past a tile it reads
    dx = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    part = torch.empty(grid[0], W + 1, x.shape[2], device=x.device, dtype=torch.float32)
    # d pre in the activation dtype, as the PyTorch conv's backward holds it
    scratch = torch.empty(grid[0] * grid[1] * (BLOCK_T + after) * BLOCK_C, device=x.device,
                          dtype=x.dtype)
    _conv_bwd_kernel[grid](
        x, weight.contiguous(), bias.contiguous(), dout, dx, part, scratch, x.shape[1],
        x.shape[2], x.stride(0), x.stride(1), dout.stride(0), dout.stride(1), dx.stride(0),
        dx.stride(1), W=W, BT=BLOCK_T, BH=after, BC=BLOCK_C, num_warps=WARPS)
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


def torch_conv_silu(padded: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                    length: int) -> torch.Tensor:
    """SiLU(bias + sum_k weight[k] * padded[:, k:k + length]): the causal depthwise conv as
    W shifted multiply-adds on the channel-last layout (no transposes; torch.compile fuses
    it). ``padded`` [B, W-1+length, C] holds the W-1 inputs before t = 0 first."""
    out = bias + padded[:, 0:length] * weight[0]
    for k in range(1, weight.shape[0]):
        out = out + padded[:, k:k + length] * weight[k]
    return F.silu(out)


def conv_silu_dpre(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The causal conv + SiLU with zeros before t = 0 (``conv_backend = "triton_dpre"``):
    PyTorch's forward, the backward's d pre and weight sums in one Triton kernel. x [B, L, C]
    (unit channel stride), weight [W, C], bias [C], all in the activation dtype."""
    return _ConvSiLUDpre.apply(x, weight, bias, False)


def conv_silu_fwd_dpre(x: torch.Tensor, weight: torch.Tensor,
                       bias: torch.Tensor) -> torch.Tensor:
    """As ``conv_silu_dpre`` with the forward kernel in place of PyTorch's forward
    (``conv_backend = "triton_fwd"``); without autograd, the forward kernel alone."""
    if not torch.is_grad_enabled():
        return _conv_silu_op(x, weight, bias)
    return _ConvSiLUDpre.apply(x, weight, bias, True)


class _ConvSiLUDpre(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, kernel_forward):
        ctx.save_for_backward(x, weight, bias)
        if kernel_forward:
            return _conv_silu_op(x, weight, bias)
        return torch_conv_silu(F.pad(x, (0, 0, weight.shape[0] - 1, 0)), weight, bias,
                               x.shape[1])

    @staticmethod
    def backward(ctx, dout):
        x, weight, bias = ctx.saved_tensors
        dpre, dweight, dbias = _conv_dpre_op(dout, x, weight, bias)
        # output t + m read x[t] through tap W-1-m: d x[t] = sum_m w[W-1-m] d pre[t + m]
        width, length = weight.shape[0], x.shape[1]
        after = F.pad(dpre, (0, 0, 0, width - 1))  # zeros past the window
        dx = after[:, 0:length] * weight[width - 1]
        for m in range(1, width):
            dx = dx + after[:, m:m + length] * weight[width - 1 - m]
        return dx, dweight, dbias, None


def row_alignment(x: torch.Tensor, dims: int = 2) -> int:
    """The largest of 8, 4, 2, 1 elements that x's first ``dims`` strides (batch and row;
    batch alone for a [B, C] tensor of one row per window) are multiples of: 8 bf16 (16
    bytes) allows vector loads."""
    for align in (8, 4, 2):
        if all(stride % align == 0 for stride in x.stride()[:dims]):
            return align
    return 1


@torch.library.custom_op("lobsurf::conv_dpre", mutates_args=())
def _conv_dpre_op(dout: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                  bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if x.stride(-1) != 1:
        raise ValueError(f"conv_dpre: channel stride must be 1, got {x.stride()}")
    width = weight.shape[0]
    if width > DPRE_MAX_WIDTH:
        raise ValueError(f"conv_dpre: at most {DPRE_MAX_WIDTH} taps, got {width}")
    dout = dout.contiguous()
    batch, length, channels = x.shape
    align = row_alignment(x)
    # d pre in the activation dtype, as the PyTorch conv's backward holds it
    dpre = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    part = torch.empty(batch, width + 1, channels, device=x.device, dtype=torch.float32)
    _conv_dpre_kernel[(batch, triton.cdiv(channels, DPRE_BLOCK_C))](
        x, weight.contiguous(), bias.contiguous(), dout, dpre, part, length, channels,
        x.stride(0) // align, x.stride(1) // align, dout.stride(0), dout.stride(1),
        dpre.stride(0), dpre.stride(1), W=width, BC=DPRE_BLOCK_C, ALIGN=align,
        STAGES=DPRE_STAGES, num_warps=DPRE_WARPS)
    # Two separate sums: custom-op outputs may not alias each other.
    return (dpre, part[:, :width].sum(0).to(weight.dtype),
            part[:, width].sum(0).to(bias.dtype))


@_conv_dpre_op.register_fake
def _(dout, x, weight, bias):
    # d pre is a fresh contiguous tensor even where x is a strided slice
    return (torch.empty(x.shape, device=x.device, dtype=x.dtype), torch.empty_like(weight),
            torch.empty_like(bias))
