"""z computed inside the gated scan kernel of the forwards without autograd, on every row
(``ssd_window_triton.ssd_window_gated_projected``, ``Mamba2Mixer._gated_scan_out``).

References that share no code with the kernel: z = u W_z^T in float64 here, then the gate
and the step-by-step float64 recurrence of ``test_scan_gate._float64_gate``; for whole
blocks the float64 PyTorch block (``kernels = "off"``). Without CUDA the kernel runs in
Triton's CPU interpreter under the bounds check of every load and store.
"""

from __future__ import annotations

import functools

import pytest
import torch

pytest.importorskip("triton", reason="the kernels need Triton (dev extra on Linux)")

from lobsurf.models.kernels import ssd_window_triton  # noqa: E402
from tests.models.conftest import count_calls  # noqa: E402
from tests.models.kernels.test_scan_gate import _blocks as gate_blocks  # noqa: E402
from tests.models.kernels.test_scan_gate import (SHAPES, TOL, _float64_gate,  # noqa: E402
                                                 _inputs, _rel, compiled_bf16_errors,
                                                 no_grad_block_error,
                                                 run_where_the_gate_never_runs)

#: widths of the block input u: the default model's, the smallest tile, and u's rows padded
#: past the width (a strided view: row stride 40 for 32 columns)
U_WIDTHS = [(128, 0), (16, 0), (32, 8)]


def _projected_inputs(batch, length, heads, headdim, d_state, dtype, d_model, pad, seed):
    xbc, dt, A, D, _z, weight = _inputs(batch, length, heads, headdim, d_state, dtype, False,
                                        seed)
    g = torch.Generator().manual_seed(seed + 1)
    u = torch.randn(batch, length, d_model + pad, generator=g).to(dtype)[..., :d_model]
    wz = (torch.randn(heads * headdim, d_model, generator=g) / d_model ** 0.5).to(dtype)
    return xbc, dt, A, D, u, wz, weight


@pytest.mark.parametrize("d_model,pad", U_WIDTHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,length,heads,headdim,d_state", SHAPES)
def test_projected_gate_matches_the_float64_recurrence(batch, length, heads, headdim,
                                                       d_state, dtype, d_model, pad):
    from tests.models.kernels.triton_bounds import bounds_checked

    if torch.cuda.is_available():
        pytest.skip("interpreter test (CPU)")
    xbc, dt, A, D, u, wz, weight = _projected_inputs(batch, length, heads, headdim, d_state,
                                                     dtype, d_model, pad, seed=length)
    with bounds_checked() as launches:
        gw, ss = ssd_window_triton.ssd_window_gated_projected(xbc, dt, A, D, u, wz, weight,
                                                              headdim, d_state)
    assert launches == ["_ssd_window_fwd"]
    z = u.double() @ wz.double().T
    want_gw, want_ss, _ = _float64_gate(xbc, dt, A, D, z, weight, heads, headdim, d_state,
                                        False)
    for name, got, want in (("g w", gw, want_gw), ("ss", ss, want_ss)):
        err = _rel(got, want)
        assert err < TOL[dtype], f"{name}: relative error {err:.2e}"


def test_projected_gate_rejects_mismatched_inputs():
    xbc, dt, A, D, u, wz, weight = _projected_inputs(1, 16, 2, 16, 16, torch.float32, 16, 0,
                                                     seed=0)
    for bad_u, bad_wz in ((u[:, :-1], wz), (u, wz[:-1]), (torch.randn(1, 16, 24), wz[:, :8]),
                          (u, wz.to(torch.bfloat16))):
        with pytest.raises(ValueError, match="ssd_window_gated_projected"):
            ssd_window_triton.ssd_window_gated_projected(xbc, dt, A, D, bad_u, bad_wz, weight,
                                                         16, 16)


#: blocks of a power-of-two width, whose z the scan kernel computes
_blocks = functools.partial(gate_blocks, d_model=32)


@pytest.mark.parametrize("last_only", [False, True])
@pytest.mark.parametrize("length", [37, 64])
def test_block_with_z_in_the_scan_matches_the_float64_pytorch_block(length, last_only,
                                                                    monkeypatch):
    # every row: the projected kernel, no z product; the last row keeps its own z product
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        monkeypatch.setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee")
    projected = count_calls(monkeypatch, ssd_window_triton, "ssd_window_gated_projected")
    gated = count_calls(monkeypatch, ssd_window_triton, "ssd_window_gated")
    fast, ref = _blocks(length, device)
    h = torch.randn(2, length, 32, generator=torch.Generator().manual_seed(length))
    err = no_grad_block_error(fast, ref, h, last_only)
    assert (len(projected), len(gated)) == ((0, 1) if last_only else (1, 0))
    assert err < TOL[torch.float32], f"relative error {err:.2e}"


def test_z_stays_in_the_projection_under_autograd_by_default_and_off_cuda(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("interpreter test (CPU)")
    projected = count_calls(monkeypatch, ssd_window_triton, "ssd_window_gated_projected")
    h = torch.randn(2, 24, 32, generator=torch.Generator().manual_seed(5))
    # autograd on: PyTorch's gated norm, z from the projection; "auto" off CUDA, "off"
    # anywhere: never
    run_where_the_gate_never_runs(_blocks, h)
    assert not projected


@pytest.mark.gpu
@pytest.mark.parametrize("d_model,pad", U_WIDTHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,length,heads,headdim,d_state", SHAPES)
def test_compiled_projected_gate_matches_the_float64_recurrence_on_the_gpu(
        batch, length, heads, headdim, d_state, dtype, d_model, pad, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    monkeypatch.setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee")
    cpu = _projected_inputs(batch, length, heads, headdim, d_state, dtype, d_model, pad,
                            seed=length)
    gw, ss = ssd_window_triton.ssd_window_gated_projected(*(t.cuda() for t in cpu), headdim,
                                                          d_state)
    xbc, dt, A, D, u, wz, weight = cpu
    want_gw, want_ss, _ = _float64_gate(xbc, dt, A, D, u.double() @ wz.double().T, weight,
                                        heads, headdim, d_state, False)
    for name, got, want in (("g w", gw, want_gw), ("ss", ss, want_ss)):
        err = _rel(got.cpu(), want)
        assert err < TOL[dtype], f"{name}: relative error {err:.2e}"


@pytest.mark.gpu
def test_compiled_block_with_z_in_the_scan_tracks_the_pytorch_block_under_autocast():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    # z in the scan ("kernel", the default path) no further off float64 than PyTorch's
    fast, ref = _blocks(64, "cuda", kernels="auto")
    errors = compiled_bf16_errors(fast, ref)
    assert errors["kernel"] < max(TOL[torch.bfloat16], 2.0 * errors["pytorch"]), errors
