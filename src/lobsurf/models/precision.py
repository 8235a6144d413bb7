"""Mixed precision of the network's forward passes (``train.precision``).

``forward_precision(precision, device)`` is the context the training step runs each network
forward in (acting, target, online): ``"fp32"`` is a no-op (TF32 matrix products where the
run enables them); ``"bf16"`` is ``torch.autocast(device.type, torch.bfloat16)``, on CUDA and
on CPU alike, so the CPU tests run the same code the GPU does (bf16 on CPU is a correctness
path, not a fast one). The weight-cast cache is off: a cached cast made during warm-up would
be a stale tensor in a CUDA graph.

What stays fp32 under bf16: autocast itself keeps exp, softplus, cumsum, softmax,
log-softmax and reductions in fp32; the SSD decay (log-decay, cumsum, exp) is computed in at
least fp32 explicitly (``ssd._scan_dtype``), and the gated RMSNorm's statistics too. The
heads' outputs are taken to fp32 by ``float_outputs`` (inside the step's compiled kernels
that read them: the act kernel, the C51 target, the losses, where the casts fuse with their
consumers), so the C51 projection, every loss, the gates and the acting samplers see fp32.
Parameters, gradients and Adam stay fp32.
"""

from __future__ import annotations

import contextlib
from typing import Literal, NamedTuple, TypeVar

import torch

Precision = Literal["fp32", "bf16"]
PRECISIONS: tuple[str, ...] = ("fp32", "bf16")

_T = TypeVar("_T", bound=NamedTuple)


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


def forward_precision(precision: str, device: torch.device | str
                      ) -> contextlib.AbstractContextManager:
    """The context a network forward runs in for ``precision`` on ``device``."""
    check_precision(precision)
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, cache_enabled=False)


def at_least_fp32(dtype: torch.dtype) -> torch.dtype:
    """``dtype`` promoted to at least fp32 (bf16 -> fp32; fp32 and fp64 kept): the dtype the
    heads' outputs take when they leave bf16 autocast."""
    return torch.promote_types(dtype, torch.float32)


def float_outputs(out: _T) -> _T:
    """A NamedTuple of tensors with every floating tensor in (at least) fp32."""
    return type(out)(*(t.to(at_least_fp32(t.dtype)) if t.is_floating_point() else t
                       for t in out))
