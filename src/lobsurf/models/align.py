"""GEMM operands padded to aligned widths at the point of use (CUDA only).

cuBLAS's Hopper kernels (and the vectorised Ampere ones) need every operand's rows to start
on 16-byte boundaries. Two of the encoder's token-level products have odd widths: the
in-projection's output (2E + 2N + H = 644 columns at the default shape: 1,288 bytes per bf16
row) and the input projection's input (66 features: 132 bytes). On them cuBLAS falls back to
``align2`` kernels, several times slower (benchmarks/RESULTS.md, Defaults decided by
measurement). In fp32 (TF32) the in-projection's rows are 2,576 bytes, aligned already, so
it is left alone there: the multiple is counted in bytes of the product's compute dtype
(bf16 under autocast).

The fix changes no parameter and no arithmetic of the kept columns: the weight is padded
with zero rows (more outputs, dropped by the caller) or zero columns (more inputs, matched
by zero input columns) inside the forward, so the product's rows are multiples of
``GEMM_ALIGN_BYTES``. Autograd slices the padding off the weight's gradient. The CPU path
pads nothing (``device_multiple`` is 1 there), so CPU results, and checkpoints, stay as they
were; the tests call the helpers with a multiple directly.

The agent's heads use ``linear_aligned`` (both widths padded, the output sliced back): their
merged product reads [h, agent state], 131 columns at the default shape, and Q's output
layer writes 11 x 21 = 231 (lobsurf.agent.network).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: on CUDA, a product's rows are padded to a multiple of this many bytes in its compute
#: dtype (cuBLAS's aligned kernels)
GEMM_ALIGN_BYTES = 16


def elements_per_alignment(dtype: torch.dtype, align_bytes: int = GEMM_ALIGN_BYTES) -> int:
    """Elements of ``dtype`` in ``align_bytes`` (at least 1): 8 for bf16 at 16 bytes, 4 for
    fp32."""
    return max(1, align_bytes // dtype.itemsize)


def device_multiple(x: torch.Tensor) -> int:
    """The width multiple (in elements) to pad ``x``'s products to: on CUDA the elements of
    the compute dtype (autocast's when it is on) in ``GEMM_ALIGN_BYTES``; 1 elsewhere."""
    if not x.is_cuda:
        return 1
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else x.dtype
    return elements_per_alignment(dtype)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def linear_padded_out(x: torch.Tensor, weight: torch.Tensor, multiple: int) -> torch.Tensor:
    """``F.linear(x, weight)`` (no bias) with zero rows appended to ``weight`` so the output
    width is a multiple of ``multiple``; returns [..., padded width] (the extra columns are
    zeros: the caller slices them off)."""
    return F.linear(x, _pad_rows(weight, None, multiple)[0])


def _pad_rows(weight: torch.Tensor, bias: torch.Tensor | None, multiple: int
              ) -> tuple[torch.Tensor, torch.Tensor | None]:
    # zero output rows (and bias entries) up to a multiple of ``multiple``
    pad = _round_up(weight.shape[0], multiple) - weight.shape[0]
    if not pad:
        return weight, bias
    return F.pad(weight, (0, 0, 0, pad)), None if bias is None else F.pad(bias, (0, pad))


def linear_padded_in(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                     multiple: int) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` with x's last axis and weight's input axis padded with
    zeros to a multiple of ``multiple`` (the same product: the padding adds zero terms)."""
    pad = _round_up(weight.shape[1], multiple) - weight.shape[1]
    if pad:
        x, weight = F.pad(x, (0, pad)), F.pad(weight, (0, pad))
    return F.linear(x, weight, bias)


def linear_aligned(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                   multiple: int) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` with both of the product's widths padded to multiples
    of ``multiple`` (zero input columns in x and weight, zero output rows in weight and
    bias) and the output sliced back to ``weight.shape[0]`` columns: the same values."""
    out_features = weight.shape[0]
    out = linear_padded_in(x, *_pad_rows(weight, bias, multiple), multiple)
    return out[..., :out_features] if out.shape[-1] != out_features else out
