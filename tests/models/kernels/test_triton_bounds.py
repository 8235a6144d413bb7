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


#: conv_triton's paths and the kernels one forward + backward of each launches:
#: conv_backend "triton" (both in Triton), "triton_dpre" (the backward's d pre only) and
#: "triton_fwd" (the forward kernel, its row walk by default, and the d pre kernel)
CONV_PATHS = {"conv_silu": ["_conv_walk_fwd_kernel", "_conv_bwd_kernel"],
              "conv_silu_dpre": ["_conv_dpre_kernel"],
              "conv_silu_fwd_dpre": ["_conv_walk_fwd_kernel", "_conv_dpre_kernel"]}
#: the conv forward's kernel per ``conv_triton.FWD_WALK_ROWS`` (0: the tile kernel)
CONV_FORWARDS = {0: "_conv_fwd_kernel", 1: "_conv_walk_fwd_kernel", 4: "_conv_walk_fwd_kernel"}
CONV_SHAPES = [(2, 37, 200, 4, 209), (1, 130, 72, 3, 81), (2, 64, 48, 4, 88)]


def _conv_inputs(batch, length, channels, width, row, dtype):
    g = torch.Generator().manual_seed(length)
    x = torch.randn(batch, length, row, generator=g)[..., 8:8 + channels]
    weight, bias = torch.randn(width, channels, generator=g), torch.randn(channels, generator=g)
    return [t.to(dtype).requires_grad_() for t in (x, weight, bias)]


def _float64_conv(leaves):
    ref = [t.detach().double().requires_grad_() for t in leaves]
    width, length = ref[1].shape[0], ref[0].shape[1]
    padded = torch.nn.functional.pad(ref[0], (0, 0, width - 1, 0))  # zeros before t = 0
    return ref, torch.nn.functional.silu(ref[2] + sum(padded[:, k:k + length] * ref[1][k]
                                                      for k in range(width)))


def _max_rel(fast: torch.Tensor, exact: torch.Tensor) -> float:
    return ((fast.double() - exact).abs().max() / exact.abs().max()).item()


@pytest.mark.parametrize("path", sorted(CONV_PATHS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,length,channels,width,row", CONV_SHAPES)
def test_conv_kernels_stay_inside_their_tensors_and_match_float64(batch, length, channels,
                                                                   width, row, dtype,
                                                                   path) -> None:
    # conv_triton's kernels (conv_backend "triton", "triton_dpre", "triton_fwd"), here in the
    # interpreter as well as on the GPU (test_ssd_triton.py): a ragged window, one longer
    # than a time tile (the "triton" backward stages d pre rows past the tile), a channel
    # tail, W = 3; x a slice of wider rows (the in_proj output's), their stride a multiple
    # of 8 in the last case (as the default's 648: the d pre kernel's vector loads).
    from lobsurf.models.kernels import conv_triton

    conv_silu = getattr(conv_triton, path)
    leaves = _conv_inputs(batch, length, channels, width, row, dtype)
    dout = torch.randn(leaves[0].shape, generator=torch.Generator().manual_seed(width))
    with bounds_checked() as launches:
        out = conv_silu(*leaves)
        grads = torch.autograd.grad((out.float() * dout).sum(), leaves)
    assert launches == CONV_PATHS[path]
    ref, out_ref = _float64_conv(leaves)
    ref_grads = torch.autograd.grad((out_ref * dout.double()).sum(), ref)
    tol = 2e-4 if dtype == torch.float32 else 3e-2
    for name, fast, exact in zip(("out", "d x", "d weight", "d bias"), (out, *grads),
                                 (out_ref, *ref_grads)):
        assert fast.dtype == dtype
        err = _max_rel(fast, exact)
        assert err < tol, f"{name}: relative error {err:.1e}"


@pytest.mark.parametrize("rows", [0, 1])
@pytest.mark.parametrize("batch,length,channels,width,row", CONV_SHAPES)
def test_conv_forward_forms_stay_inside_their_tensors(batch, length, channels, width, row,
                                                      rows, monkeypatch) -> None:
    # the conv forward's other forms (the default row walk, 4 rows a step, runs above): one
    # row a step and the [rows x channels] tile kernel, without autograd, fp32
    from lobsurf.models.kernels import conv_triton

    monkeypatch.setattr(conv_triton, "FWD_WALK_ROWS", rows)
    leaves = _conv_inputs(batch, length, channels, width, row, torch.float32)
    with bounds_checked() as launches, torch.no_grad():
        out = conv_triton.conv_silu(*leaves)
    assert launches == [CONV_FORWARDS[rows]]
    assert _max_rel(out, _float64_conv(leaves)[1]) < 2e-5


@pytest.mark.parametrize("case", [(3, 37, 200, 3, 4, 5), (2, 64, 384, 4, 4, 4),
                                  (1, 9, 16, 1, 1, 7)])
def test_conv_dt_stays_inside_its_tensors(case) -> None:
    # conv_backend "triton_dx": the forward kernel and the backward writing the gradient of
    # the in-projection's columns (a ragged window with a channel tail, the default layer, a
    # 1-tap conv with 7 padding columns), fp32 and bf16
    from tests.models.kernels.test_conv_dt import _run

    with bounds_checked() as launches:
        _run(case, torch.float32)
        _run(case, torch.bfloat16)
    assert launches == ["_conv_walk_fwd_kernel", "_conv_dt_bwd_kernel"] * 2


def test_conv_forward_wider_than_the_walk_takes_the_tile_kernel() -> None:
    # a conv of more taps than the row walk holds (DPRE_MAX_WIDTH) runs the tile kernel
    from lobsurf.models.kernels import conv_triton

    width = conv_triton.DPRE_MAX_WIDTH + 1
    leaves = _conv_inputs(2, 37, 40, width, 56, torch.float32)
    with bounds_checked() as launches, torch.no_grad():
        out = conv_triton.conv_silu(*leaves)
    assert launches == ["_conv_fwd_kernel"]
    assert _max_rel(out, _float64_conv(leaves)[1]) < 2e-5
