"""The one-kernel Mamba2 block (``mamba2_fused.py``) against the float64 step-by-step numpy
block and against the PyTorch block, and its dispatch from ``Mamba2Block.forward``.

Without CUDA the kernel runs in Triton's CPU interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 before Triton is imported); on CUDA the kernel is off for now
(``mamba2_fused.CUDA_DISABLED``), which the GPU-marked test checks.
The numpy reference shares no code with either path (tests/models/mamba2_numpy_reference.py).
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
import torch

pytest.importorskip("triton", reason="the fused kernel needs Triton (dev extra on Linux)")

from lobsurf.models import mamba2_fused  # noqa: E402
from lobsurf.models.config import EncoderConfig  # noqa: E402
from lobsurf.models.encoder import Encoder  # noqa: E402
from lobsurf.models.mamba2 import Mamba2Block  # noqa: E402
from tests.models.conftest import perturbed_block  # noqa: E402
from tests.models.mamba2_numpy_reference import mamba2_block_reference  # noqa: E402

#: max |fused - reference| / max |reference|: fp32 products (IEEE on CPU; the PyTorch fp32
#: block is 5e-6 off at the default shape too), and bf16 operands with fp32 sums (at the
#: default shape on CPU, four inputs: the kernel 1.5-2.8e-2 off, the PyTorch block under
#: bf16 autocast 3.2-6.4e-2, which keeps its bf16 activations between ops)
TOL_FP32, TOL_BF16 = 2e-5, 3e-2
#: (d_model, headdim, d_state, window): a ragged window (37 < tile 64), a full one, the
#: training default shape
SHAPES = [(32, 16, 16, 37), (32, 16, 16, 64), (128, 64, 64, 64)]


def _block(d_model: int, headdim: int, d_state: int, backend: str, seed: int,
           device: str = "cpu") -> Mamba2Block:
    cfg = EncoderConfig(d_model=d_model, headdim=headdim, d_state=d_state,
                        fused_inference=backend)
    return perturbed_block(cfg, seed).to(device)


def _reference(block: Mamba2Block, h: torch.Tensor) -> np.ndarray:
    cfg = block.mixer.cfg
    return mamba2_block_reference(block.state_dict(), h.double().cpu().numpy(), cfg.d_state,
                                  cfg.headdim, cfg.norm_eps)


def _rel(got: torch.Tensor, ref: np.ndarray) -> float:
    return float(np.abs(got.double().cpu().numpy() - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("d_model,headdim,d_state,window", SHAPES)
def test_fused_block_matches_numpy_reference(d_model, headdim, d_state, window) -> None:
    block = _block(d_model, headdim, d_state, "triton", seed=window)
    h = torch.randn(3, window, d_model)
    ref = _reference(block, h)
    with torch.no_grad():
        full, last = block(h), block(h, last_only=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = block(h.bfloat16())
    assert full.shape == h.shape and last.shape == (3, d_model)
    assert low.dtype == torch.bfloat16
    assert _rel(full, ref) < TOL_FP32
    assert _rel(last, ref[:, -1]) < TOL_FP32
    assert _rel(low, ref) < TOL_BF16


def test_auto_uses_the_kernel_only_without_autograd_on_cuda() -> None:
    """``auto`` leaves CPU runs (and every forward with autograd) on the PyTorch block; the
    kernel, which has no backward, never sees a forward that needs gradients."""
    fused = _block(32, 16, 16, "triton", seed=1)
    auto = _block(32, 16, 16, "auto", seed=1)
    h = torch.randn(2, 20, 32)
    assert not auto._fused(h)  # CPU tensor: PyTorch
    with torch.no_grad():
        assert fused._fused(h)
    assert not fused._fused(h)  # autograd on: PyTorch even when "triton" is asked for
    out = fused(h)  # with grad: the PyTorch block, differentiable
    out.sum().backward()
    assert fused.mixer.in_proj.weight.grad is not None


def test_encoder_no_grad_forward_equals_the_pytorch_encoder() -> None:
    cfg = EncoderConfig(d_model=32, headdim=16, d_state=16, n_layers=2)
    torch.manual_seed(3)
    ref = Encoder(dataclasses.replace(cfg, fused_inference="torch"), in_features=7)
    fast = Encoder(dataclasses.replace(cfg, fused_inference="triton"), in_features=7)
    fast.load_state_dict(ref.state_dict())
    x, log_dt = torch.randn(4, 48, 7), torch.randn(4, 48)
    with torch.no_grad():
        want = ref(x, log_dt, return_sequence=False).last
        got = fast(x, log_dt, return_sequence=False).last
    assert (got - want).abs().max() / want.abs().max() < TOL_FP32


def test_triton_backend_says_why_it_cannot_run() -> None:
    block = _block(32, 16, 16, "triton", seed=0)
    long_window = torch.randn(1, block.mixer.cfg.chunk_size + 1, 32)
    with torch.no_grad(), pytest.raises(RuntimeError, match="window of at most chunk_size"):
        block(long_window)
    assert not mamba2_fused.supports(24, 16, 16, 32, 64)  # d_model not a power of two
    with pytest.raises(ValueError, match="fused_inference"):
        EncoderConfig(fused_inference="cuda")


def test_a_kernel_disabled_on_cuda_falls_back_or_says_why() -> None:
    """``use_fused``'s CUDA switch (mamba2_fused.CUDA_DISABLED): on a CUDA tensor "auto"
    takes PyTorch and "triton" raises with the reason; CPU (interpreter) tensors keep it."""
    cuda_like = types.SimpleNamespace(is_cuda=True)
    args = ("fused_inference", cuda_like, True, True, "a shape rule", "a shape", "the reason")
    assert not mamba2_fused.use_fused("auto", *args)
    with pytest.raises(RuntimeError, match="disabled on CUDA: the reason"):
        mamba2_fused.use_fused("triton", *args)
    assert mamba2_fused.use_fused("triton", "fused_inference", torch.zeros(1), True, True,
                                  "a shape rule", "a shape", "the reason")


@pytest.mark.gpu
def test_block_kernel_is_off_on_cuda() -> None:
    """The block's own switch on a real CUDA tensor: "auto" runs the PyTorch block, "triton"
    says why it cannot run (the kernel reads outside its shared memory in the GPU test that
    this replaces, now benchmarks/repro_fused_block_fault.py; RESULTS.md)."""
    auto = _block(32, 16, 16, "auto", seed=1, device="cuda")
    insist = _block(32, 16, 16, "triton", seed=1, device="cuda")
    pytorch = _block(32, 16, 16, "torch", seed=1, device="cuda")
    h = torch.randn(2, 20, 32, device="cuda")
    with torch.no_grad():
        assert not auto._fused(h)
        assert torch.equal(auto(h), pytorch(h))
        with pytest.raises(RuntimeError, match="disabled on CUDA"):
            insist(h)
