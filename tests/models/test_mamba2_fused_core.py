"""The fused mixer core with autograd, in both grids (one program per window,
``mamba2_fused_core.py``; per (window, head), ``mamba2_fused_heads.py``): forward and every
gradient of a whole block against PyTorch autograd of the PyTorch block in float64.

The float64 PyTorch block shares no code with the Triton kernels (its forward is itself
checked against the step-by-step numpy block in test_mamba2_reference.py). Without CUDA the
kernels run in Triton's CPU interpreter (tests/conftest.py); the GPU-marked test runs the
compiled kernels.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

pytest.importorskip("triton", reason="the fused kernels need Triton (dev extra on Linux)")

from lobsurf.models.config import EncoderConfig  # noqa: E402
from lobsurf.models.mamba2 import Mamba2Block  # noqa: E402
from tests.models.conftest import perturbed_block  # noqa: E402

#: relative error (norm of the difference / norm of the float64 value) allowed for fp32
#: products, per output and gradient; the PyTorch fp32 block is as far off (dt_bias and A_log
#: gradients, sums over every token of products of cancelling terms, ~5e-5 at the default
#: shape). bf16 operands: ~1e-2.
TOL_FP32, TOL_BF16 = 3e-4, 6e-2
#: TF32 products (10-bit mantissas) on the GPU
TOL_TF32 = 1e-2
#: GPU bf16: the fused core may be this many times as far off as the PyTorch block under
#: the same autocast (real bf16 products; both against float64), when that exceeds TOL_BF16
BF16_SLACK = 2.0
#: (d_model, headdim, d_state, window, last_only)
CASES = [(32, 16, 16, 37, False), (32, 16, 16, 64, True), (128, 64, 64, 64, False)]
#: EncoderConfig.fused_core_programs
GRIDS = ["window", "head"]


def _blocks(d_model, headdim, d_state, device="cpu", programs="window"):
    cfg = EncoderConfig(d_model=d_model, headdim=headdim, d_state=d_state,
                        fused_training="triton", fused_inference="torch",
                        fused_core_programs=programs)
    fused = perturbed_block(cfg, seed=d_model + d_state)
    ref = Mamba2Block(dataclasses.replace(cfg, fused_training="torch")).double()
    ref.load_state_dict(fused.state_dict())
    return fused.to(device), ref.to(device)


def _run(block, h, last_only, dtype, autocast=False):
    leaf = h.to(dtype).clone().requires_grad_()
    with torch.autocast(h.device.type, dtype=torch.bfloat16, enabled=autocast):
        out = block(leaf, last_only=last_only)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
    (out.double() * weight.to(out.device, torch.float64)).sum().backward()
    grads = {"out": out.detach(), "d h": leaf.grad}
    grads.update({n.removeprefix("_orig_mod."): p.grad for n, p in block.named_parameters()})
    block.zero_grad(set_to_none=True)
    return grads


def _errors(got, ref):
    """Relative error (norm of the difference / norm of the reference) per name."""
    return {name: ((got[name].double() - want).norm() / want.norm()).item()
            for name, want in ref.items()}


def _check(fused, ref, tol):
    for name, err in _errors(fused, ref).items():
        assert err < tol, f"{name}: relative error {err:.2e}"


@pytest.mark.parametrize("programs", GRIDS)
@pytest.mark.parametrize("d_model,headdim,d_state,window,last_only", CASES)
def test_fused_core_forward_and_gradients_match_float64(d_model, headdim, d_state, window,
                                                        last_only, programs) -> None:
    fused, ref = _blocks(d_model, headdim, d_state, programs=programs)
    h = torch.randn(3, window, d_model)
    want = _run(ref, h, last_only, torch.float64)
    assert fused.mixer._fused_core(h)
    _check(_run(fused, h, last_only, torch.float32), want, TOL_FP32)
    if d_model == 32:  # bf16 operands (emulated by the interpreter) at the small shapes
        _check(_run(fused, h, last_only, torch.float32, autocast=True), want, TOL_BF16)


def test_fused_core_only_under_autograd() -> None:
    fused, _ = _blocks(32, 16, 16)
    h = torch.randn(2, 16, 32)
    assert fused.mixer._fused_core(h)
    with torch.no_grad():
        assert not fused.mixer._fused_core(h)  # no-grad forwards: the whole-block kernel path
    auto = Mamba2Block(dataclasses.replace(fused.mixer.cfg, fused_training="auto"))
    assert not auto.mixer._fused_core(h)  # auto: CUDA only
    with pytest.raises(RuntimeError, match="window of at most chunk_size"):
        fused(torch.randn(1, fused.mixer.cfg.chunk_size + 1, 32))


#: the forward kernel of each grid (EncoderConfig.fused_core_programs)
FORWARD_KERNEL = {"window": "_core_fwd_kernel", "head": "_heads_fwd_kernel"}


@pytest.mark.parametrize("programs", GRIDS)
def test_fused_core_serves_no_grad_forwards_when_asked(programs) -> None:
    from tests.models.triton_bounds import bounds_checked

    fused, ref = _blocks(32, 16, 16, programs=programs)
    h = torch.randn(3, 37, 32)
    with torch.no_grad():
        assert not fused.mixer._fused_core(h)  # off by default
        fused.mixer.cfg = dataclasses.replace(fused.mixer.cfg, fused_core_no_grad=True)
        assert fused.mixer._fused_core(h)
        for last_only in (False, True):
            want = ref(h.double(), last_only=last_only)
            with bounds_checked() as launches:
                got = fused(h, last_only=last_only)
            assert launches == [FORWARD_KERNEL[programs]]  # the core ran, forward only
            err = ((got.double() - want).norm() / want.norm()).item()
            assert err < TOL_FP32, f"last_only={last_only}: relative error {err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("programs", GRIDS)
@pytest.mark.parametrize("d_model,headdim,d_state,window,last_only", [CASES[0], CASES[2]])
def test_compiled_core_matches_float64_on_cuda(tf32_products, d_model, headdim, d_state,
                                               window, last_only, programs) -> None:
    # TF32 products, as in training (IEEE fp32 dots take minutes to compile at D = 128).
    fused, ref = _blocks(d_model, headdim, d_state, device="cuda", programs=programs)
    h = torch.randn(5, window, d_model, device="cuda")
    want = _run(ref, h, last_only, torch.float64)
    _check(_run(fused, h, last_only, torch.float32), want, TOL_TF32)
    pytorch = copy.deepcopy(ref).float()  # the PyTorch block, fp32 weights, bf16 autocast
    pytorch_err = _errors(_run(pytorch, h, last_only, torch.float32, autocast=True), want)
    got = _errors(_run(fused, h, last_only, torch.float32, autocast=True), want)
    for name, err in got.items():
        tol = max(TOL_BF16, BF16_SLACK * pytorch_err[name])
        assert err < tol, f"{name}: bf16 relative error {err:.2e} (PyTorch block: " \
                          f"{pytorch_err[name]:.2e})"


@pytest.mark.parametrize("programs", GRIDS)
def test_fused_core_traces_whole_under_torch_compile(programs) -> None:
    """The kernels are opaque custom ops with fake shapes: a fullgraph compile (AOTAutograd
    traces the backward too) gives the eager results, as in a compiled ``embed``."""
    fused, _ = _blocks(32, 16, 16, programs=programs)
    h = torch.randn(2, 24, 32)
    want = _run(fused, h, False, torch.float32)
    compiled = torch.compile(fused, backend="aot_eager", fullgraph=True, dynamic=False)
    got = _run(compiled, h, False, torch.float32)
    for name, value in want.items():
        assert torch.allclose(got[name], value, rtol=1e-5, atol=1e-6), name
