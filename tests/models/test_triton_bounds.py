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

from tests.models.test_mamba2_fused import SHAPES, _block  # noqa: E402
from tests.models.test_mamba2_fused_core import CASES, _blocks, _run  # noqa: E402
from tests.models.triton_bounds import OutOfBounds, bounds_checked  # noqa: E402


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


@pytest.mark.parametrize("d_model,headdim,d_state,window", SHAPES)
def test_fused_block_stays_inside_its_tensors(d_model, headdim, d_state, window) -> None:
    block = _block(d_model, headdim, d_state, "triton", seed=window)
    h = torch.randn(2, window, d_model)
    with bounds_checked() as launches, torch.no_grad():
        block(h)
        block(h, last_only=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            block(h.bfloat16())
    assert launches == ["_block_kernel"] * 3


#: kernels of one forward + backward of the fused core, per EncoderConfig.fused_core_programs
CORE_LAUNCHES = {"window": ["_core_fwd_kernel", "_core_bwd_kernel"],
                 "head": ["_heads_fwd_kernel", "_heads_bwd_kernel", "_scores_bwd_kernel"]}


@pytest.mark.parametrize("programs", sorted(CORE_LAUNCHES))
@pytest.mark.parametrize("d_model,headdim,d_state,window,last_only", CASES)
def test_fused_core_stays_inside_its_tensors(d_model, headdim, d_state, window,
                                             last_only, programs) -> None:
    fused, _ = _blocks(d_model, headdim, d_state, programs=programs)
    h = torch.randn(2, window, d_model)
    with bounds_checked() as launches:
        _run(fused, h, last_only, torch.float32)
        _run(fused, h, last_only, torch.float32, autocast=True)
    assert launches == CORE_LAUNCHES[programs] * 2  # fp32 and bf16
