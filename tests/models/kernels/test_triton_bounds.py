"""Memory safety of the Triton kernels: every load and store inside its tensors.

Run in Triton's CPU interpreter (CI) with the bounds check of ``triton_bounds.py``, at the
shapes the GPU tests use, the ragged window (L = 37 < the 64-row tile) among them. The check
itself is tested on a kernel that reads one element past its input.
"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("triton", reason="the fused kernels need Triton (dev extra on Linux)")
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("the bounds check patches Triton's CPU interpreter (TRITON_INTERPRET=1: "
                "set by tests/conftest.py without CUDA)", allow_module_level=True)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime.errors import InterpreterError  # noqa: E402

from tests.models.kernels.triton_bounds import OutOfBounds, bounds_checked  # noqa: E402


@triton.jit
def _copy_kernel(src, dst, n, EXTRA: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    keep = i < n + EXTRA  # EXTRA = 1: one lane past the end
    tl.store(dst + i, tl.load(src + i, mask=keep), mask=i < n)


def test_the_check_catches_a_read_past_the_end() -> None:
    src, dst = torch.arange(10.0), torch.zeros(10)
    with bounds_checked() as launches:
        _copy_kernel[(1,)](src, dst, 10, EXTRA=0, BLOCK=16)
        # the interpreter re-raises what a kernel raises as an InterpreterError
        with pytest.raises(InterpreterError, match=f"{OutOfBounds.__name__}.*1 of 11 load lanes"):
            _copy_kernel[(1,)](src, dst, 10, EXTRA=1, BLOCK=16)
    assert launches == ["_copy_kernel", "_copy_kernel"] and torch.equal(src, dst)


#: (batch, length, channels, width, row): a ragged window, one longer than the default's
#: 64 rows with W = 3, and x's rows 88 wide (a multiple of 8, as the default's 648: vector
#: loads); x a slice of wider rows, as the in-projection's output is
CONV_SHAPES = [(2, 37, 200, 4, 209), (1, 130, 72, 3, 81), (2, 64, 48, 4, 88)]


def _conv_inputs(batch, length, channels, width, row, dtype):
    g = torch.Generator().manual_seed(length)
    x = torch.randn(batch, length, row, generator=g)[..., 8:8 + channels]
    weight, bias = torch.randn(width, channels, generator=g), torch.randn(channels, generator=g)
    return [t.to(dtype) for t in (x, weight, bias)]


def _float64_conv(leaves):
    x, weight, bias = (t.double() for t in leaves)
    width, length = weight.shape[0], x.shape[1]
    padded = torch.nn.functional.pad(x, (0, 0, width - 1, 0))  # zeros before t = 0
    return torch.nn.functional.silu(bias + sum(padded[:, k:k + length] * weight[k]
                                               for k in range(width)))


@pytest.mark.parametrize("rows,dtype", [(4, torch.float32), (4, torch.bfloat16),
                                        (1, torch.float32)])
@pytest.mark.parametrize("batch,length,channels,width,row", CONV_SHAPES)
def test_conv_forward_stays_inside_its_tensors_and_matches_float64(batch, length, channels,
                                                                    width, row, rows, dtype,
                                                                    monkeypatch) -> None:
    # conv_triton's forward (the no-grad forwards' conv on CUDA; conv_dt's forward is the
    # same kernel), its row walk 4 rows a step (the default) and 1
    from lobsurf.models.kernels import conv_triton

    monkeypatch.setattr(conv_triton, "FWD_WALK_ROWS", rows)
    leaves = _conv_inputs(batch, length, channels, width, row, dtype)
    with bounds_checked() as launches:
        out = conv_triton.conv_silu(*leaves)
    assert launches == ["_conv_walk_fwd_kernel"] and out.dtype == dtype
    exact = _float64_conv(leaves)
    err = ((out.double() - exact).abs().max() / exact.abs().max()).item()
    assert err < (2e-5 if dtype == torch.float32 else 1e-2), f"relative error {err:.1e}"


def test_conv_forward_refuses_a_conv_wider_than_the_walk_holds() -> None:
    # the row walk keeps the last W-1 inputs in named registers (W <= MAX_WIDTH): a wider
    # conv is an error, never a silently wrong output (the mixer keeps PyTorch's conv there)
    from lobsurf.models.kernels import conv_triton

    leaves = _conv_inputs(2, 12, 40, conv_triton.MAX_WIDTH + 1, 56, torch.float32)
    with pytest.raises(ValueError, match="taps"):
        conv_triton.conv_silu(*leaves)
