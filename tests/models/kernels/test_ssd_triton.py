"""Fused Triton kernels (ssd_triton.py, conv_triton.py) against the PyTorch paths (GPU only).

Run on a CUDA machine: ``python -m pytest -m gpu tests/models/test_ssd_triton.py``.
The SSD reference is ``ssd.ssd_chunked`` in float64 (itself tested against the step-by-step
recurrence in test_ssd.py), the conv reference the block's own PyTorch conv in float64;
outputs and all input gradients are compared, and whole blocks on either backend.
"""

from __future__ import annotations

import pytest
import torch

from lobsurf.models.config import EncoderConfig
from lobsurf.models.mamba2 import Mamba2Block
from lobsurf.models.ssd import ssd_chunked

pytestmark = pytest.mark.gpu

# (batch, length, heads, headdim, d_state, chunk): one chunk, L < Q, several chunks with a
# ragged end, the two benchmark head layouts.
CASES = [(3, 64, 4, 64, 64, 64), (2, 37, 2, 32, 16, 64), (2, 128, 8, 64, 64, 64),
         (2, 100, 3, 16, 32, 32), (1, 200, 2, 64, 64, 64)]
TOL = {torch.float32: 2e-4, torch.bfloat16: 3e-2}


def _rel(fast: torch.Tensor, ref: torch.Tensor) -> float:
    return ((fast.double() - ref).norm() / ref.norm()).item()


def _inputs(batch, length, heads, headdim, d_state, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    width = heads * headdim + 2 * d_state
    xbc = torch.randn(batch, length, width, device="cuda", generator=g).to(dtype)
    dt = torch.nn.functional.softplus(
        torch.randn(batch, length, heads, device="cuda", generator=g) - 1.0)
    A = -(torch.rand(heads, device="cuda", generator=g) * 2.0 + 0.1)
    return xbc, dt, A


@pytest.fixture(autouse=True)
def _ieee_matmuls():
    # Exact fp32 dots in the kernels and in torch, so the fp32 tolerance means something.
    saved = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    yield
    torch.backends.cuda.matmul.fp32_precision = saved


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,length,heads,headdim,d_state,chunk", CASES)
def test_scan_and_gradients_match_torch(batch, length, heads, headdim, d_state, chunk, dtype):
    from lobsurf.models.kernels.ssd_triton import ssd_scan

    xbc, dt, A = _inputs(batch, length, heads, headdim, d_state, dtype, seed=length + heads)
    leaves = [t.clone().requires_grad_() for t in (xbc, dt, A)]
    y = ssd_scan(*leaves, headdim, d_state, chunk, 4, 8)
    dy = torch.randn_like(y, dtype=torch.float32)
    grads = torch.autograd.grad((y.float() * dy).sum(), leaves)

    ref_leaves = [t.detach().double().requires_grad_() for t in (xbc, dt, A)]
    E = heads * headdim
    x, B, C = torch.split(ref_leaves[0], (E, d_state, d_state), dim=-1)
    y_ref = ssd_chunked(x.reshape(batch, length, heads, headdim), ref_leaves[1], ref_leaves[2],
                        B, C, chunk).reshape(batch, length, E)
    ref_grads = torch.autograd.grad((y_ref * dy.double()).sum(), ref_leaves)
    errors = [_rel(y, y_ref)] + [_rel(g, r) for g, r in zip(grads, ref_grads)]
    print(f"L={length} Q={chunk} H={heads} {dtype}: y, dxbc, ddt, dA rel err "
          + ", ".join(f"{e:.1e}" for e in errors))
    assert y.dtype == dtype and grads[0].dtype == dtype
    assert all(torch.isfinite(g).all() for g in grads)
    assert max(errors) < TOL[dtype]


@pytest.mark.parametrize("path", ["conv_silu", "conv_silu_dpre", "conv_silu_fwd_dpre"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,length,channels,width,row", [(3, 64, 384, 4, 648),
                                                             (2, 37, 200, 4, 209),
                                                             (2, 130, 640, 3, 649)])
def test_conv_silu_and_gradients_match_torch(batch, length, channels, width, row, dtype,
                                             path):
    from lobsurf.models.kernels import conv_triton

    conv_silu = getattr(conv_triton, path)  # conv_backend "triton" / "triton_dpre" / "triton_fwd"

    g = torch.Generator(device="cuda").manual_seed(length)
    # A strided view with unit channel stride, as the in_proj slice is (the default's
    # layout first: rows of 648, a multiple of 8, from column 256).
    x = torch.randn(batch, length, row, device="cuda", generator=g)[..., -channels - 8:-8]
    w = torch.randn(width, channels, device="cuda", generator=g)
    b = torch.randn(channels, device="cuda", generator=g)
    leaves = [t.to(dtype).requires_grad_() for t in (x, w, b)]
    out = conv_silu(*leaves)
    dout = torch.randn(out.shape, device="cuda", generator=g)
    grads = torch.autograd.grad((out.float() * dout).sum(), leaves)
    ref = [t.detach().double().requires_grad_() for t in leaves]
    padded = torch.nn.functional.pad(ref[0], (0, 0, width - 1, 0))
    pre = ref[2] + sum(padded[:, k:k + length] * ref[1][k] for k in range(width))
    out_ref = torch.nn.functional.silu(pre)
    ref_grads = torch.autograd.grad((out_ref * dout.double()).sum(), ref)
    errors = [_rel(out, out_ref)] + [_rel(a, r) for a, r in zip(grads, ref_grads)]
    print(f"{path} L={length} C={channels} W={width} {dtype}: out, dx, dw, db rel err "
          + ", ".join(f"{e:.1e}" for e in errors))
    assert out.dtype == dtype and max(errors) < TOL[dtype]


@pytest.mark.parametrize("last_only", [False, True])
@pytest.mark.parametrize("backends", [("triton", "torch"), ("torch", "triton"),
                                      ("triton", "triton"), ("torch", "triton_dpre"),
                                      ("torch", "triton_fwd"), ("torch", "triton_dx"),
                                      ("auto", "triton_dx")])
def test_block_triton_matches_torch_backend(last_only: bool, backends) -> None:
    torch.manual_seed(0)
    cfg = EncoderConfig(d_model=64, headdim=32, d_state=32, chunk_size=32, ssd_backend="torch",
                        conv_backend="torch")
    ref = Mamba2Block(cfg).cuda()
    fast_cfg = EncoderConfig(**{**cfg.__dict__, "ssd_backend": backends[0],
                                "conv_backend": backends[1]})
    fast = Mamba2Block(fast_cfg).cuda()
    fast.load_state_dict(ref.state_dict())
    h = torch.randn(4, 80, 64, device="cuda")
    out_ref, out = ref(h, last_only=last_only), fast(h, last_only=last_only)
    probe = torch.randn_like(out)  # a loss that weighs every output value
    g_ref = torch.autograd.grad((out_ref * probe).sum(), list(ref.parameters()))
    g = torch.autograd.grad((out * probe).sum(), list(fast.parameters()))
    assert _rel(out, out_ref.double()) < 2e-4
    for name, a, b in zip([n for n, _ in ref.named_parameters()], g, g_ref):
        assert _rel(a, b.double()) < 2e-3, name
    with torch.no_grad():  # the forwards without gradients (acting, target) take own paths
        assert _rel(fast(h, last_only=last_only), out_ref.double()) < 2e-4
