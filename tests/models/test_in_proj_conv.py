"""The pre-norm + in-projection + conv + dt kernel (``in_proj_conv_triton.py``) against a
float64 numpy reference written here, the block's dispatch to it (``fused_in_proj``), and
the whole block on it against the float64 step-by-step numpy block.

Without CUDA the kernel runs in Triton's CPU interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 before Triton is imported); the GPU-marked test runs it on CUDA. The
references share no code with the kernel or the PyTorch block.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("triton", reason="the fused kernel needs Triton (dev extra on Linux)")

from lobsurf.models import in_proj_conv_triton  # noqa: E402
from lobsurf.models.config import EncoderConfig  # noqa: E402
from lobsurf.models.mamba2 import Mamba2Block  # noqa: E402
from tests.models.conftest import count_calls, perturbed_block  # noqa: E402
from tests.models.mamba2_numpy_reference import mamba2_block_reference  # noqa: E402

#: max |kernel - reference| / max |reference|: fp32 products (IEEE on CPU), and bf16
#: operands with fp32 sums (the projection rounded to bf16 before the conv, as the PyTorch
#: block's is; its outputs stored in bf16)
TOL_FP32, TOL_BF16 = 2e-5, 3e-2
#: (batch, window, d_model, headdim, d_state, d_conv): a ragged window (37 in a 64-row
#: slot) with a tile's second window missing (3 windows, 2 per tile), full windows, a
#: 3-tap conv, short windows packed 8 to a tile, the training default shape
CASES = [(3, 37, 32, 16, 16, 4), (4, 64, 32, 16, 16, 4), (3, 64, 32, 16, 16, 3),
         (9, 16, 32, 16, 16, 4), (2, 64, 128, 64, 64, 4)]


@pytest.fixture(autouse=True)
def _interpreter_or_gpu(request):
    # on a CUDA machine Triton is not in its interpreter: only the GPU-marked test runs there
    if torch.cuda.is_available() and request.node.get_closest_marker("gpu") is None:
        pytest.skip("interpreter test (CPU); the GPU-marked test runs the compiled kernel")


def _cfg(d_model: int, headdim: int, d_state: int, d_conv: int, choice: str,
         **kwargs) -> EncoderConfig:
    return EncoderConfig(d_model=d_model, headdim=headdim, d_state=d_state, d_conv=d_conv,
                         fused_in_proj=choice, **kwargs)


def numpy_in_proj_conv(block: Mamba2Block, h: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(z, xBC, dt) of windows h [B, L, D] in float64, token by token."""
    p = {k: v.detach().double().numpy() for k, v in block.state_dict().items()}
    cfg = block.mixer.cfg
    E, C, H, W = cfg.d_inner, block.mixer.conv_channels, cfg.n_heads, cfg.d_conv
    u = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + cfg.norm_eps) * p["norm.weight"]
    proj = u @ p["mixer.in_proj.weight"].T
    z, v, dt_raw = proj[..., :E], proj[..., E:E + C], proj[..., E + C:E + C + H]
    xbc = np.zeros_like(v)
    for t in range(h.shape[1]):
        pre = p["mixer.conv_bias"].copy()
        for back in range(W):  # tap W-1-back reads the input `back` steps ago
            if t - back >= 0:
                pre = pre + p["mixer.conv_weight"][W - 1 - back] * v[:, t - back]
        xbc[:, t] = pre / (1.0 + np.exp(-pre))
    dt = np.logaddexp(0.0, dt_raw + p["mixer.dt_bias"])
    return z, xbc, dt


def _rel(got: torch.Tensor, ref: np.ndarray) -> float:
    return float(np.abs(got.double().numpy() - ref).max() / np.abs(ref).max())


def _kernel(block: Mamba2Block, h: torch.Tensor, last_only: bool):
    m = block.mixer
    return in_proj_conv_triton.in_proj_conv(
        h, block.norm.weight, block.norm.eps, m.in_proj.weight, m.conv_weight, m.conv_bias,
        m.dt_bias, m.cfg.d_inner, last_only)


@pytest.mark.parametrize("batch,window,d_model,headdim,d_state,d_conv", CASES)
def test_kernel_matches_numpy_reference(batch, window, d_model, headdim, d_state, d_conv):
    block = perturbed_block(_cfg(d_model, headdim, d_state, d_conv, "triton"), seed=window)
    h = torch.randn(batch, window, d_model)
    z_ref, xbc_ref, dt_ref = numpy_in_proj_conv(block, h.double().numpy())
    with torch.no_grad():
        z, xbc, dt = _kernel(block, h, last_only=False)
        z_last, xbc_last, _ = _kernel(block, h, last_only=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z16, xbc16, dt16 = _kernel(block, h.bfloat16(), last_only=False)
    assert z.dtype == xbc.dtype == torch.float32 and dt.dtype == torch.float32
    assert z16.dtype == xbc16.dtype == torch.bfloat16 and dt16.dtype == torch.float32
    assert z_last.shape == (batch, block.mixer.cfg.d_inner)
    for got, ref in ((z, z_ref), (xbc, xbc_ref), (dt, dt_ref), (z_last, z_ref[:, -1]),
                     (xbc_last, xbc_ref)):
        assert got.shape == ref.shape and _rel(got, ref) < TOL_FP32
    for got, ref in ((z16, z_ref), (xbc16, xbc_ref), (dt16, dt_ref)):
        assert _rel(got, ref) < TOL_BF16


def test_dt_softplus_keeps_small_and_large_values() -> None:
    """dt = softplus(raw) over raw from -30 to 40: small values keep their relative precision
    (log(1 + e) alone rounds e^-30 to 0), large ones pass through (PyTorch's threshold)."""
    block = perturbed_block(_cfg(32, 16, 16, 4, "triton"), seed=5)
    with torch.no_grad():
        block.mixer.dt_bias.copy_(torch.tensor([-30.0, -12.0, 5.0, 40.0]))
    h = torch.randn(2, 16, 32)
    _, _, dt_ref = numpy_in_proj_conv(block, h.double().numpy())
    with torch.no_grad():
        _, _, dt = _kernel(block, h, last_only=False)
    rel = np.abs(dt.double().numpy() - dt_ref) / dt_ref
    assert rel.max() < 1e-5


@pytest.mark.parametrize("d_model,headdim,d_state,window", [(32, 16, 16, 37),
                                                             (128, 64, 64, 64)])
def test_block_on_the_kernel_matches_the_numpy_block(d_model, headdim, d_state, window,
                                                     monkeypatch):
    block = perturbed_block(_cfg(d_model, headdim, d_state, 4, "triton"), seed=7)
    h = torch.randn(3, window, d_model)
    ref = mamba2_block_reference(block.state_dict(), h.double().numpy(), d_state, headdim,
                                 block.mixer.cfg.norm_eps)
    calls = count_calls(monkeypatch, in_proj_conv_triton, "_in_proj_conv_op")
    with torch.no_grad():
        full, last = block(h), block(h, last_only=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = block(h.bfloat16())
    assert len(calls) == 3
    assert _rel(full, ref) < TOL_FP32 and _rel(last, ref[:, -1]) < TOL_FP32
    assert low.dtype == torch.bfloat16 and _rel(low.float(), ref) < TOL_BF16


def test_dispatch_autograd_cpu_and_shapes() -> None:
    """Only forwards without autograd take the kernel (it has no backward); "auto" keeps CPU
    tensors on PyTorch; "triton" says why a shape cannot run; the option is checked."""
    insist = perturbed_block(_cfg(32, 16, 16, 4, "triton"), seed=1)
    auto = perturbed_block(_cfg(32, 16, 16, 4, "auto"), seed=1)
    h = torch.randn(2, 20, 32)
    with torch.no_grad():
        assert insist.mixer.fused_in_proj(h) and not auto.mixer.fused_in_proj(h)
    assert not insist.mixer.fused_in_proj(h)
    insist(h).sum().backward()  # with autograd: the PyTorch ops, differentiable
    assert insist.mixer.in_proj.weight.grad is not None
    too_long = torch.randn(1, in_proj_conv_triton.MAX_WINDOW + 1, 32)
    with torch.no_grad(), pytest.raises(RuntimeError, match="window of at most"):
        insist(too_long)
    odd = Mamba2Block(_cfg(48, 16, 16, 4, "triton"))
    with torch.no_grad(), pytest.raises(RuntimeError, match="power-of-two d_model"):
        odd(torch.randn(1, 8, 48))
    with pytest.raises(ValueError, match="fused_in_proj"):
        EncoderConfig(fused_in_proj="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("batch,window,d_model,headdim,d_state,d_conv", CASES)
def test_kernel_on_cuda_matches_numpy_reference(batch, window, d_model, headdim, d_state,
                                                d_conv, precision):
    saved = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "ieee"  # the fp32 tolerance means IEEE
    try:
        block = perturbed_block(_cfg(d_model, headdim, d_state, d_conv, "triton"),
                                seed=window)
        h = torch.randn(batch, window, d_model)
        z_ref, xbc_ref, dt_ref = numpy_in_proj_conv(block, h.double().numpy())
        block, h = block.cuda(), h.cuda()
        tol = TOL_FP32 if precision == "fp32" else TOL_BF16
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16,
                                             enabled=precision == "bf16"):
            z, xbc, dt = _kernel(block, h, last_only=False)
            z_last, _, _ = _kernel(block, h, last_only=True)
    finally:
        torch.backends.cuda.matmul.fp32_precision = saved
    for got, ref in ((z, z_ref), (xbc, xbc_ref), (dt, dt_ref), (z_last, z_ref[:, -1])):
        assert _rel(got.cpu(), ref) < tol
