"""What every Triton kernel of the encoder shares: whether kernels run on a tensor here
(the ``kernels`` mode a module is set to), and the bf16 rounding the CPU interpreter needs
(in the tile products and the stores of the kernels).

A kernel runs on CUDA tensors when Triton imports, and on CPU tensors only under Triton's
interpreter (``TRITON_INTERPRET=1`` set before Triton is imported: what the CPU tests do).
A module that picks kernels (``Mamba2Mixer``) holds a ``kernels`` attribute, one of
``KERNEL_MODES``: "auto" (the default) takes the kernels on CUDA tensors, "off" never (the
PyTorch path everywhere, the reference), "on" wherever Triton runs, the CPU included under
the interpreter, and is an error where it cannot. In every mode a kernel runs only on the
calls and shapes it serves (e.g. the one-chunk scan on windows of at most ``chunk_size``).
"""

from __future__ import annotations

import os
from typing import Literal, get_args

import torch
from torch import nn

try:
    import triton
    import triton.language as tl
except ImportError:  # installs without Triton: the PyTorch code runs instead
    triton = None


MIN_TILE = 16
"""Smallest side tl.dot takes: the kernels' tile sides are powers of two of at least this."""


def is_tile_side(v: int) -> bool:
    """Whether v can be a tl.dot tile's side: a power of two of at least ``MIN_TILE``."""
    return v >= MIN_TILE and v & (v - 1) == 0


def product_flags(t: torch.Tensor, name: str) -> dict:
    """The constexprs ``tile_dot`` and ``as_stored`` take for activations like ``t``: BF16 0
    (fp32 products), 1 (bf16 tensor-core products) or 2 (bf16 emulated, the CPU
    interpreter); PREC "tf32" where fp32 products follow torch's TF32 switch on CUDA,
    "ieee" elsewhere. ``name``: the kernel, for the error on another dtype."""
    if t.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"{name}: float32 or bfloat16 inputs, got {t.dtype}")
    tf32 = t.is_cuda and torch.backends.cuda.matmul.fp32_precision == "tf32"
    bf16 = 0 if t.dtype == torch.float32 else (1 if t.is_cuda else 2)
    return dict(BF16=bf16, PREC="tf32" if tf32 else "ieee")


def interpreter_active() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (set before Triton's import)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def available_for(device: torch.device) -> bool:
    """Whether a kernel can run on ``device`` here (CUDA with Triton, or the interpreter)."""
    if triton is None:
        return False
    return device.type == "cuda" or (device.type == "cpu" and interpreter_active())


KernelMode = Literal["auto", "off", "on"]
KERNEL_MODES: tuple[str, ...] = get_args(KernelMode)
"""The ``kernels`` modes (module docstring)."""


def kernel_runs(mode: str, x: torch.Tensor, wanted: bool, shape_ok: bool) -> bool:
    """Whether a kernel runs on ``x`` in ``mode`` (module docstring). ``wanted``: the call
    is one the kernel serves (e.g. autograd off for a forward-only kernel); ``shape_ok``:
    the kernel takes this shape. "on" raises where Triton cannot run on x's device."""
    if mode == "off" or not (wanted and shape_ok):
        return False
    if mode == "auto":
        return x.is_cuda and available_for(x.device)
    if mode != "on":
        raise ValueError(f"kernels must be one of {', '.join(KERNEL_MODES)}, got {mode!r}")
    if not available_for(x.device):
        raise RuntimeError("kernels='on' needs Triton with a CUDA tensor (or Triton's CPU "
                           f"interpreter, TRITON_INTERPRET=1); got a {x.device.type} tensor"
                           f"{'' if triton is not None else ', and Triton does not import'}")
    return True


def use_kernels_(module: nn.Module, mode: str) -> nn.Module:
    """Set ``kernels`` to ``mode`` on every submodule of ``module`` that picks kernels (that
    has a ``kernels`` attribute); returns ``module``. A runtime choice, not a parameter:
    checkpoints do not hold it and a new module starts at "auto"."""
    if mode not in KERNEL_MODES:
        raise ValueError(f"kernels must be one of {', '.join(KERNEL_MODES)}, got {mode!r}")
    for sub in module.modules():
        if hasattr(sub, "kernels"):
            sub.kernels = mode
    return module


if triton is not None:

    @triton.jit
    def round_bf16(x, BF16: tl.constexpr):
        # fp32 -> nearest bf16 (ties to even), back as fp32. The CPU interpreter's cast
        # truncates, so there (BF16 == 2) the rounding is done on the bits.
        if BF16 == 2:
            bits = x.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            return bits.to(tl.float32, bitcast=True)
        else:
            return x.to(tl.bfloat16).to(tl.float32)

    @triton.jit
    def tile_dot(a, b, BF16: tl.constexpr, PREC: tl.constexpr):
        # a @ b with fp32 sums: bf16 operands on tensor cores (BF16 == 1), or, in the CPU
        # interpreter whose bf16 product is broken (BF16 == 2), operands rounded to bf16
        # then an exact fp32 product (the same sum of exact bf16 x bf16 terms); fp32
        # operands (BF16 == 0) as TF32 or IEEE (PREC).
        if BF16 == 2:
            return tl.dot(round_bf16(a.to(tl.float32), BF16),
                          round_bf16(b.to(tl.float32), BF16), input_precision="ieee")
        elif BF16 == 1:
            return tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), out_dtype=tl.float32)
        else:
            return tl.dot(a, b, input_precision=PREC)

    @triton.jit
    def as_stored(v, BF16: tl.constexpr):
        # what a store into the activations' dtype keeps: the interpreter's bf16 cast
        # truncates, so there the value is rounded to nearest first
        if BF16 == 2:
            return round_bf16(v, BF16)
        else:
            return v
