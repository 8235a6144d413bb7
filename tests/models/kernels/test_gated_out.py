"""The mixer's output side in one kernel each way (``EncoderConfig.gated_out``,
``gated_out_triton.py``): z = u W_z^T, the gate, the gated RMS norm and the out-projection.

References that share no code with the kernels or the mixer: the function written out here
in float64 (its gradients by float64 autograd of those few lines), and the float64
PyTorch block (``gated_out = "torch"``) for whole blocks. Without CUDA the kernels run in
Triton's CPU interpreter (tests/conftest.py) under the bounds check of every load and store.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("triton", reason="the kernels need Triton (dev extra on Linux)")

from lobsurf.models.config import EncoderConfig  # noqa: E402
from lobsurf.models.kernels import gated_out_triton  # noqa: E402
from lobsurf.models.mamba2 import Mamba2Block  # noqa: E402
from tests.models.conftest import count_calls, perturbed_block  # noqa: E402

#: (leading shape, D, E): rows not a multiple of the kernels' 64 (2 x 37 = 74) with E walked
#: in two steps of 64 channels; one row per window (the last layer's call, 5 rows) with E
#: one step; the default model's widths (D 128, E 256: four steps)
SHAPES = [((2, 37), 32, 128), ((5,), 16, 64), ((1, 70), 128, 256)]
#: relative error (norm of the difference / norm of the float64 value): IEEE fp32 products;
#: bf16 operands and stores
TOL = {torch.float32: 1e-4, torch.bfloat16: 1.5e-2}
EPS = 1e-5
KERNELS = ["_gated_out_fwd_kernel", "_gated_out_bwd_kernel"]


def _inputs(lead, d_model, d_inner, seed):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(*lead, d_model, generator=g)
    y = torch.randn(*lead, d_inner, generator=g)
    w_z = torch.randn(d_inner, d_model, generator=g) / d_model ** 0.5
    # the norm's weight folded into W_o's columns, away from 1
    w_o = torch.randn(d_model, d_inner, generator=g) / d_inner ** 0.5 * (
        1.0 + 0.5 * torch.randn(d_inner, generator=g))
    return u, y, w_z, w_o


def _float64_output_side(u, y, w_z, w_o):
    z = u @ w_z.T
    g = y * z / (1.0 + torch.exp(-z))
    n = g / torch.sqrt((g * g).mean(-1, keepdim=True) + EPS)
    return n @ w_o.T


def _rel(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("lead,d_model,d_inner", SHAPES)
def test_gated_out_and_its_gradients_match_float64(lead, d_model, d_inner, dtype):
    from tests.models.kernels.triton_bounds import bounds_checked

    if torch.cuda.is_available():
        pytest.skip("interpreter test (CPU); the GPU test below runs the compiled kernels")
    leaves = [t.to(dtype).requires_grad_() for t in _inputs(lead, d_model, d_inner, d_model)]
    dout = torch.randn(*lead, d_model, generator=torch.Generator().manual_seed(1))
    with bounds_checked() as launches:
        out = gated_out_triton.gated_out(*leaves, EPS)
        out.backward(dout.to(dtype))
    assert launches == KERNELS
    assert out.dtype == dtype and out.shape == (*lead, d_model)
    want_leaves = [t.detach().double().requires_grad_() for t in leaves]
    want = _float64_output_side(*want_leaves)
    want.backward(dout.double())
    errors = {"out": _rel(out, want)}
    for name, got, ref in zip(("d u", "d y", "d W_z", "d W_o"), leaves, want_leaves):
        assert got.grad.dtype == dtype
        errors[name] = _rel(got.grad, ref.grad)
    for name, err in errors.items():
        assert err < TOL[dtype], f"{name}: relative error {err:.2e}"


def test_gated_out_rejects_shapes_it_cannot_take():
    u, y, w_z, w_o = _inputs((2, 8), 16, 64, 0)
    with pytest.raises(ValueError, match="w_z"):
        gated_out_triton.gated_out(u, y, w_z.T, w_o, EPS)
    with pytest.raises(ValueError, match="rows differ"):
        gated_out_triton.gated_out(u[:, :-1], y, w_z, w_o, EPS)
    u, y, w_z, w_o = _inputs((2, 8), 16, 48, 0)
    with pytest.raises(ValueError, match="powers of two"):
        gated_out_triton.gated_out(u, y, w_z, w_o, EPS)


def _blocks(length, device, **options):
    # (the block with ``options`` on ``device``, the float64 PyTorch block of its weights)
    cfg = EncoderConfig(d_model=32, headdim=16, d_state=16, ssd_backend="torch",
                        conv_backend="torch")
    fast = perturbed_block(dataclasses.replace(cfg, **options), seed=length)
    ref = Mamba2Block(cfg)
    ref.double().load_state_dict(fast.state_dict())
    return fast.to(device), ref


@pytest.mark.parametrize("fold", [True, False])
@pytest.mark.parametrize("last_only", [False, True])
@pytest.mark.parametrize("conv", ["torch", "triton_dx"])
def test_block_with_the_output_side_kernels_matches_the_float64_pytorch_block(conv, last_only,
                                                                              fold,
                                                                              monkeypatch):
    # forward and every gradient (the input's and each parameter's); on the conv_dt path
    # (triton_dx: z projected apart, as on CUDA) and on the PyTorch conv's (z's columns then
    # left out of the in-projection); the norm weights folded into the products or not
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        monkeypatch.setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee")
    calls = count_calls(monkeypatch, gated_out_triton, "gated_out")
    fast, ref = _blocks(37, device, gated_out="triton", conv_backend=conv,
                        fold_norm_weights=fold)
    h = torch.randn(2, 37, 32, generator=torch.Generator().manual_seed(5))
    h_fast = h.clone().to(device).requires_grad_()
    out = fast(h_fast, last_only=last_only)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(6))
    out.backward(dout.to(device))
    h_ref = h.double().requires_grad_()
    want = ref(h_ref, last_only=last_only)
    want.backward(dout.double())
    assert len(calls) == 1
    errors = {"out": _rel(out.cpu(), want), "d h": _rel(h_fast.grad.cpu(), h_ref.grad)}
    for (name, p), (_, q) in zip(fast.named_parameters(), ref.named_parameters()):
        if q.grad is not None and q.grad.norm() > 0:
            errors[name] = _rel(p.grad.cpu(), q.grad)
    for name, err in errors.items():
        assert err < TOL[torch.float32], f"{name}: relative error {err:.2e}"


def test_the_output_side_stays_in_pytorch_by_default_on_cpu_and_without_autograd(monkeypatch):
    # "torch" (the default) never takes the kernels, "auto" never on CPU, "triton" not in a
    # forward without autograd (the scan's gate serves those on CUDA)
    if torch.cuda.is_available():
        pytest.skip("interpreter test (CPU): the CPU blocks' kernels need Triton's interpreter")
    assert EncoderConfig().gated_out == "torch"
    calls = count_calls(monkeypatch, gated_out_triton, "gated_out")
    h = torch.randn(2, 24, 32, generator=torch.Generator().manual_seed(3))
    for choice in ("torch", "auto"):
        block, _ = _blocks(24, "cpu", gated_out=choice)
        block(h).sum().backward()
    block, ref = _blocks(24, "cpu", gated_out="triton")
    with torch.no_grad():
        torch.testing.assert_close(block(h).double(), ref(h.double()), rtol=1e-4, atol=1e-5)
    assert not calls


def test_gated_out_insisted_on_says_why_it_cannot_run():
    # with one_in_projection z comes out of the one product, not apart
    if torch.cuda.is_available():
        pytest.skip("interpreter test (CPU)")
    block, _ = _blocks(24, "cpu", gated_out="triton", conv_backend="triton_dx",
                       one_in_projection=True)
    with pytest.raises(RuntimeError, match="one_in_projection"):
        block(torch.randn(2, 24, 32))


def test_gated_out_takes_only_its_three_choices():
    with pytest.raises(ValueError, match="gated_out"):
        EncoderConfig(gated_out="kernel")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("lead,d_model,d_inner", SHAPES + [((256, 64), 128, 256)])
def test_compiled_gated_out_and_its_gradients_match_float64_on_the_gpu(lead, d_model, d_inner,
                                                                       dtype, monkeypatch):
    # the compiled kernels; the last shape is B = 256 windows of the default model
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    monkeypatch.setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee")
    cpu = _inputs(lead, d_model, d_inner, d_model)
    leaves = [t.to("cuda", dtype).requires_grad_() for t in cpu]
    dout = torch.randn(*lead, d_model, generator=torch.Generator().manual_seed(1))
    out = gated_out_triton.gated_out(*leaves, EPS)
    out.backward(dout.to("cuda", dtype))
    want_leaves = [t.to(dtype).double().requires_grad_() for t in cpu]
    want = _float64_output_side(*want_leaves)
    want.backward(dout.double())
    errors = {"out": _rel(out.cpu(), want)}
    for name, got, ref in zip(("d u", "d y", "d W_z", "d W_o"), leaves, want_leaves):
        errors[name] = _rel(got.grad.cpu(), ref.grad)
    for name, err in errors.items():
        assert err < TOL[dtype], f"{name}: relative error {err:.2e}"
