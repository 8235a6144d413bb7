"""The whole Mamba2 block's forward in one Triton kernel, for the no-grad forwards.

The training step runs three encoder forwards without autograd (acting on B windows, the
target net on 2B); compiled PyTorch runs each block there as ~15 kernels that each read
and write [B, K, ~644] activations in HBM (PERFORMANCE.md 4.2: ~8 KB per token and layer in
bf16). Here one program takes one window (K <= 64 tokens: the SSD is one chunk) through the
whole block in registers and reads only the block input and the weights (from L2) and
writes only the block output, ~0.5 KB per token:

    u   = RMSNorm(h) * norm.weight                                 [K, D]
    for each head h (and once for the shared B, C):
        v       = u @ W_in[slice]^T                                in_proj columns of the slice
        v       = SiLU(conv_bias + sum_k conv_w[k] * shift_{W-1-k}(v))   shift = a 0/1 matrix dot
    dt_h  = softplus(u . W_dt[h] + dt_bias[h]);  cum_h = cumsum(dt_h A_h)
    S     = C B^T                                                  [K, K], shared by the heads
    y_h   = (S * exp(cum_i - cum_j) [j <= i]) @ (dt_h x_h) + D_h x_h
    g_h   = y_h * SiLU(z_h);   acc += (g_h * norm_weight_h) @ W_out_h^T;  ss += sum g_h^2
    out   = h + acc * rsqrt(ss / E + eps)                          the gated RMSNorm's row
                                                                   scale factors out of W_out

Products run in the input's dtype (bf16 under autocast, with fp32 accumulation; fp32 inputs
use TF32 when ``torch.backends.cuda.matmul.fp32_precision`` is "tf32", IEEE otherwise);
the norms, softplus, cumsum and exp are fp32. There is no backward: the learner's forward
(with autograd) keeps the PyTorch block. ``mamba2.py`` calls this through
``EncoderConfig.fused_inference``; the PyTorch block stays the reference (tests compare the
two, and both against the float64 step-by-step numpy block).

On CPU tensors the kernel runs only under Triton's interpreter (``TRITON_INTERPRET=1`` set
before Triton is imported: what the CPU tests do). On CUDA tensors it is off for now
(``CUDA_DISABLED`` says why; ``use_fused`` falls back or refuses).

Registered as ``torch.ops.lobsurf.mamba2_block_inference`` so torch.compile treats it as
one opaque call inside a compiled ``embed`` and CUDA graphs capture it.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # installs without Triton: the PyTorch block runs instead
    triton = None

#: smallest tile side tl.dot accepts
_MIN_DOT = 16

#: Why the one-kernel block does not run on CUDA tensors (its CPU interpreter path, which
#: the tests use, stays). In its GPU test on the H200 (Triton 3.6) it faulted with an
#: illegal memory access, and compute-sanitizer finds 22 invalid reads of the kernel's own
#: shared memory (512 bytes, at the conv's shift products); the same launches from a
#: standalone script are clean under compute-sanitizer, so the cause is not found yet
#: (benchmarks/probe_fused_block_fault.py; the test: benchmarks/repro_fused_block_fault.py).
#: It is also slower than the compiled PyTorch block at every measured shape
#: (benchmarks/RESULTS.md).
CUDA_DISABLED = ("it reads outside its shared memory in its GPU test (compute-sanitizer, "
                 "Triton 3.6 on the H200; issue 9) and is slower than the compiled PyTorch "
                 "block")


def interpreter_active() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (set before Triton's import)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _pow2(n: int) -> bool:
    return n >= _MIN_DOT and n & (n - 1) == 0


def supports(d_model: int, headdim: int, d_state: int, length: int, chunk_size: int) -> bool:
    """Shapes the kernel covers: power-of-two D, P, N >= 16 and one chunk (K <= chunk)."""
    return all(_pow2(n) for n in (d_model, headdim, d_state)) and length <= chunk_size


def use_fused(choice: str, option: str, x: torch.Tensor, wanted: bool, shape_ok: bool,
              needs: str, shape: str, cuda_disabled: str | None = None,
              choice_name: str = "triton") -> bool:
    """Whether a fused-kernel option runs on ``x`` here: "torch" never; "auto" on CUDA
    tensors when Triton and the shape allow it; "triton" always, or an error saying why it
    cannot (``needs``: the shape rule, ``shape``: what was given). ``wanted``: the call is
    one the kernel serves (autograd off for the block kernel, on for the core).
    ``cuda_disabled``: why the kernel is off on CUDA tensors ("auto" falls back, "triton"
    says so). ``choice_name``: how the option spells "triton" (for the error message)."""
    if choice == "torch" or not wanted:
        return False
    if cuda_disabled is not None and x.is_cuda:
        if choice == "auto":
            return False
        raise RuntimeError(f"{option}='{choice_name}' is disabled on CUDA: {cuda_disabled}; use "
                           f"{option}='torch'")
    ok = available_for(x.device) and shape_ok
    if choice == "auto":
        return ok and x.is_cuda
    if not ok:
        raise RuntimeError(f"{option}='{choice_name}' needs Triton with a CUDA tensor (or Triton's "
                           f"CPU interpreter, TRITON_INTERPRET=1), {needs}; got "
                           f"{x.device.type}, {shape}")
    return True


def available_for(device: torch.device) -> bool:
    """Whether the kernel can run on ``device`` here (CUDA with Triton, or the interpreter)."""
    if triton is None:
        return False
    return device.type == "cuda" or (device.type == "cpu" and interpreter_active())


if triton is not None:

    @triton.jit
    def _round_bf16(x, BF16: tl.constexpr):
        # fp32 -> nearest bf16 (ties to even), back as fp32. The CPU interpreter's cast
        # truncates, so there (BF16 == 2) the rounding is done on the bits.
        if BF16 == 2:
            bits = x.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            return bits.to(tl.float32, bitcast=True)
        else:
            return x.to(tl.bfloat16).to(tl.float32)

    @triton.jit
    def _dot(a, b, BF16: tl.constexpr, TF32: tl.constexpr):
        # One product in the run's precision: bf16 operands or fp32 (TF32 / IEEE), fp32 sums.
        # BF16 == 2 (the CPU interpreter, whose bf16 dot is broken): operands rounded to
        # bf16, then an fp32 product, which is the same sum of exact bf16 x bf16 products.
        if BF16 == 2:
            return tl.dot(_round_bf16(a, BF16), _round_bf16(b, BF16), input_precision="ieee")
        elif BF16:
            return tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), out_dtype=tl.float32)
        elif TF32:
            return tl.dot(a, b, input_precision="tf32")
        else:
            return tl.dot(a, b, input_precision="ieee")

    @triton.jit
    def _proj_conv(u, w_in_ptr, conv_w_ptr, conv_b_ptr, row0, chan0,
                   D: tl.constexpr, CW: tl.constexpr, CT: tl.constexpr, WIDTH: tl.constexpr,
                   KL: tl.constexpr, BF16: tl.constexpr, TF32: tl.constexpr):
        # SiLU(causal depthwise conv(u @ W_in[row0:row0+CW]^T)) for the CW conv channels
        # chan0.. of CT. A shift by s steps is a product with a [KL, KL] 0/1 matrix.
        d = tl.arange(0, D)
        c = tl.arange(0, CW)
        w = tl.load(w_in_ptr + (row0 + c)[None, :] * D + d[:, None]).to(tl.float32)  # [D, CW]
        v = _dot(u, w, BF16, TF32)  # [KL, CW]
        if BF16:  # the PyTorch block's projection output is bf16 under autocast
            v = _round_bf16(v, BF16)
        i = tl.arange(0, KL)
        bias = tl.load(conv_b_ptr + chan0 + c).to(tl.float32)
        out = tl.zeros((KL, CW), dtype=tl.float32) + bias[None, :]
        for k in tl.static_range(WIDTH):
            back = WIDTH - 1 - k  # tap k reads the input `back` steps ago (zeros before t=0)
            wk = tl.load(conv_w_ptr + k * CT + chan0 + c).to(tl.float32)
            if back == 0:
                out += wk[None, :] * v
            else:
                shift = (i[None, :] == i[:, None] - back).to(tl.float32)  # [KL, KL]
                out += wk[None, :] * _dot(shift, v, BF16, TF32)
        return out * tl.sigmoid(out)

    @triton.jit
    def _block_kernel(h_ptr, out_ptr, norm_w_ptr, w_in_ptr, conv_w_ptr, conv_b_ptr,
                      dt_bias_ptr, a_log_ptr, d_ptr, gate_w_ptr, w_out_ptr, L, eps,
                      D: tl.constexpr, H: tl.constexpr, P: tl.constexpr, N: tl.constexpr,
                      WIDTH: tl.constexpr, KL: tl.constexpr, LAST_ONLY: tl.constexpr,
                      BF16: tl.constexpr, TF32: tl.constexpr):
        E: tl.constexpr = H * P
        CT: tl.constexpr = E + 2 * N  # conv channels: [x | B | C]
        b = tl.program_id(0)
        t = tl.arange(0, KL)
        d = tl.arange(0, D)
        valid = t < L
        rows = h_ptr + b * L * D + t[:, None] * D + d[None, :]
        hx = tl.load(rows, mask=valid[:, None], other=0.0).to(tl.float32)  # [KL, D]
        # ---- pre-norm
        rstd = 1.0 / tl.sqrt(tl.sum(hx * hx, axis=1) / D + eps)
        u = hx * rstd[:, None] * tl.load(norm_w_ptr + d).to(tl.float32)[None, :]
        if BF16:
            u = _round_bf16(u, BF16)
        # ---- B, C (shared by the heads) and their scores C B^T
        Bm = _proj_conv(u, w_in_ptr, conv_w_ptr, conv_b_ptr, 2 * E, E, D, N, CT, WIDTH, KL,
                        BF16, TF32)
        Cm = _proj_conv(u, w_in_ptr, conv_w_ptr, conv_b_ptr, 2 * E + N, E + N, D, N, CT,
                        WIDTH, KL, BF16, TF32)
        scores = _dot(Cm, tl.trans(Bm), BF16, TF32)  # [KL, KL]: C_i . B_j
        causal = t[None, :] <= t[:, None]
        p = tl.arange(0, P)
        acc = tl.zeros((KL, D), dtype=tl.float32)
        ss = tl.zeros((KL,), dtype=tl.float32)
        for hd in tl.static_range(H):
            x = _proj_conv(u, w_in_ptr, conv_w_ptr, conv_b_ptr, E + hd * P, hd * P, D, P, CT,
                           WIDTH, KL, BF16, TF32)  # [KL, P]
            wz = tl.load(w_in_ptr + (hd * P + p)[None, :] * D + d[:, None]).to(tl.float32)
            zg = _dot(u, wz, BF16, TF32)  # [KL, P] gate z
            wdt = tl.load(w_in_ptr + (2 * E + 2 * N + hd) * D + d).to(tl.float32)  # [D]
            raw = tl.sum(u * wdt[None, :], axis=1) + tl.load(dt_bias_ptr + hd)
            dt = tl.where(raw > 20.0, raw, tl.log(1.0 + tl.exp(raw)))  # softplus, [KL]
            dt = tl.where(valid, dt, 0.0)
            a_h = -tl.exp(tl.load(a_log_ptr + hd).to(tl.float32))
            cum = tl.cumsum(dt * a_h, axis=0)  # [KL]
            seg = tl.where(causal, cum[:, None] - cum[None, :], float("-inf"))
            y = _dot(scores * tl.exp(seg), x * dt[:, None], BF16, TF32)  # [KL, P]
            y += tl.load(d_ptr + hd).to(tl.float32) * x
            g = y * (zg * tl.sigmoid(zg))
            ss += tl.sum(g * g, axis=1)
            gw = g * tl.load(gate_w_ptr + hd * P + p).to(tl.float32)[None, :]
            wo = tl.load(w_out_ptr + d[None, :] * E + (hd * P + p)[:, None]).to(tl.float32)
            acc += _dot(gw, wo, BF16, TF32)  # [KL, D]
        out = hx + acc * (1.0 / tl.sqrt(ss / E + eps))[:, None]
        if BF16 == 2:  # round to nearest here: the interpreter's store cast truncates
            out = _round_bf16(out, BF16)
        if LAST_ONLY:
            keep = t == L - 1
            tl.store(out_ptr + b * D + t[:, None] * 0 + d[None, :],
                     out.to(out_ptr.dtype.element_ty), mask=keep[:, None])
        else:
            tl.store(out_ptr + b * L * D + t[:, None] * D + d[None, :],
                     out.to(out_ptr.dtype.element_ty), mask=valid[:, None])


def _bf16_mode(h: torch.Tensor) -> int:
    # 0: fp32 products; 1: bf16 tensor-core products; 2: bf16 emulated (CPU interpreter).
    if h.dtype != torch.bfloat16:
        return 0
    return 1 if h.is_cuda else 2


def launch_flags(x: torch.Tensor) -> dict:
    """The precision flags and tile length of a kernel over windows x [B, L, ...]: BF16
    (``_bf16_mode``), TF32 (fp32 CUDA products when the run enables TF32), KL (L rounded up
    to a power of two >= 16)."""
    tf32 = torch.backends.cuda.matmul.fp32_precision == "tf32"
    return dict(BF16=_bf16_mode(x), TF32=tf32 and x.dtype == torch.float32 and x.is_cuda,
                KL=max(_MIN_DOT, triton.next_power_of_2(x.shape[1])))


def _launch(h: torch.Tensor, norm_w: torch.Tensor, w_in: torch.Tensor, conv_w: torch.Tensor,
            conv_b: torch.Tensor, dt_bias: torch.Tensor, a_log: torch.Tensor, skip: torch.Tensor,
            gate_w: torch.Tensor, w_out: torch.Tensor, headdim: int, d_state: int, eps: float,
            last_only: bool, num_warps: int) -> torch.Tensor:
    batch, length, d_model = h.shape
    heads = a_log.shape[0]
    h = h.contiguous()
    out = h.new_empty((batch, d_model) if last_only else (batch, length, d_model))
    _block_kernel[(batch,)](
        h, out, norm_w.contiguous(), w_in.contiguous(), conv_w.contiguous(),
        conv_b.contiguous(), dt_bias.contiguous(), a_log.contiguous(), skip.contiguous(),
        gate_w.contiguous(), w_out.contiguous(), length, eps,
        D=d_model, H=heads, P=headdim, N=d_state, WIDTH=conv_w.shape[0], LAST_ONLY=last_only,
        **launch_flags(h), num_warps=num_warps)
    return out


@torch.library.custom_op("lobsurf::mamba2_block_inference", mutates_args=())
def mamba2_block_inference(h: torch.Tensor, norm_w: torch.Tensor, w_in: torch.Tensor,
                           conv_w: torch.Tensor, conv_b: torch.Tensor, dt_bias: torch.Tensor,
                           a_log: torch.Tensor, skip: torch.Tensor, gate_w: torch.Tensor,
                           w_out: torch.Tensor, headdim: int, d_state: int, eps: float,
                           last_only: bool, num_warps: int) -> torch.Tensor:
    """One Mamba2 block (pre-norm residual) over windows h [B, L, D] -> [B, L, D] (or the
    last position [B, D] when ``last_only``), no autograd. Parameters as in
    ``mamba2.Mamba2Block`` (norm weight, in_proj, conv weight [W, C] and bias, dt bias,
    A_log, D, gated-norm weight, out_proj)."""
    return _launch(h, norm_w, w_in, conv_w, conv_b, dt_bias, a_log, skip, gate_w, w_out,
                   headdim, d_state, eps, last_only, num_warps)


@mamba2_block_inference.register_fake
def _(h, norm_w, w_in, conv_w, conv_b, dt_bias, a_log, skip, gate_w, w_out, headdim, d_state,
      eps, last_only, num_warps):
    batch, length, d_model = h.shape
    return h.new_empty((batch, d_model) if last_only else (batch, length, d_model))
