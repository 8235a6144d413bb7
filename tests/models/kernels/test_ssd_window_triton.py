"""The one-chunk SSD kernels (``ssd_window_triton.py``, the last row's
``ssd_last_row_triton.py``).

References that share no code with the kernels: the step-by-step recurrence
``ssd_reference.ssd_recurrent`` in float64 for the op (output and the gradients of xbc, dt,
A and D), and the PyTorch block (chunked scan) in float64 for a whole block. Without CUDA
the kernels run in Triton's CPU interpreter (tests/conftest.py) under the bounds check of
every load and store; the GPU-marked tests run the compiled kernels, eager and under
torch.compile.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="the kernels need Triton (dev extra on Linux)")

from lobsurf.models.config import EncoderConfig  # noqa: E402
from lobsurf.models.kernels import ssd_window_triton  # noqa: E402
from lobsurf.models.kernels.ssd_window_triton import ssd_window  # noqa: E402
from lobsurf.models.kernels.triton_support import use_kernels_  # noqa: E402
from lobsurf.models.mamba2 import Mamba2Block  # noqa: E402
from lobsurf.models.ssd_reference import ssd_recurrent  # noqa: E402
from tests.models.conftest import count_calls, perturbed_block  # noqa: E402

#: (batch, length, heads, headdim, d_state): the default model's window, a ragged window
#: (L = 37 inside a 64-row tile), one shorter than the smallest tile (L = 10 < 16)
SHAPES = [(2, 64, 4, 64, 64), (2, 37, 2, 32, 16), (3, 10, 3, 16, 32)]
#: relative error (norm of the difference / norm of the float64 value): IEEE fp32 products;
#: bf16 operands (the PyTorch scan under autocast is as far off: ~3e-3 at these shapes)
TOL = {torch.float32: 1e-4, torch.bfloat16: 1.5e-2}
#: a whole block in fp32: the dt_bias and A_log gradients sum products of cancelling terms
#: over every token, so the PyTorch fp32 block is itself 2e-5 to 2.5e-4 off float64 (CPU) and
#: more on CUDA; a parameter passes under TOL_BLOCK or within CONDITIONING x the PyTorch fp32
#: block's own error on the same device (a planted kernel bug is off by O(1))
TOL_BLOCK = 3e-4
CONDITIONING = 4.0
NAMES = ("y", "d xbc", "d dt", "d A", "d D")


def _inputs(batch, length, heads, headdim, d_state, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    xbc = torch.randn(batch, length, heads * headdim + 2 * d_state, generator=g)
    # dt after softplus, a spread of decays (|dt A| up to ~4 per step) and D of either sign
    dt = torch.nn.functional.softplus(torch.randn(batch, length, heads, generator=g) - 1.0)
    A = -(torch.rand(heads, generator=g) * 2.0 + 0.1)
    D = torch.randn(heads, generator=g)
    return [xbc.to(dtype), dt, A, D], [t.to(device) for t in (xbc.to(dtype), dt, A, D)]


def _op_errors(batch, length, heads, headdim, d_state, dtype, device, last_only=False):
    cpu, leaves = _inputs(batch, length, heads, headdim, d_state, dtype, device, seed=length)
    leaves = [t.clone().requires_grad_() for t in leaves]
    y = ssd_window(*leaves, headdim, d_state, last_only=last_only)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad((y.float() * dy.to(device)).sum(), leaves)
    assert y.dtype == dtype and grads[0].dtype == dtype

    ref = [t.double().requires_grad_() for t in cpu]
    E = heads * headdim
    x, B, C = torch.split(ref[0], (E, d_state, d_state), dim=-1)
    xh = x.reshape(batch, length, heads, headdim)
    y_ref, _ = ssd_recurrent(xh, ref[1], ref[2], B, C)
    y_ref = (y_ref + xh * ref[3][:, None]).reshape(batch, length, E)
    if last_only:
        y_ref = y_ref[:, -1]
    ref_grads = torch.autograd.grad((y_ref * dy.double()).sum(), ref)
    return {name: ((got.detach().cpu().double() - want).norm() / want.norm()).item()
            for name, got, want in zip(NAMES, (y, *grads), (y_ref, *ref_grads))}


def _check(errors, tol):
    for name, err in errors.items():
        assert err < tol, f"{name}: relative error {err:.2e}"


LAUNCHES = ["_ssd_window_fwd", "_ssd_window_bwd_head", "_ssd_window_bwd_scores"]
#: the last row only: forward and backward as vectors over the rows (ssd_last_row_triton.py)
LAUNCHES_LAST = ["_ssd_window_fwd_last", "_ssd_window_bwd_last"]


@pytest.mark.parametrize("last_only", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,length,heads,headdim,d_state", SHAPES)
def test_kernels_match_the_float64_recurrence_inside_their_tensors(batch, length, heads,
                                                                    headdim, d_state, dtype,
                                                                    last_only):
    # last_only: the last row [B, H P] (the encoder's last layer), its gradient from that row
    from tests.models.kernels.triton_bounds import bounds_checked

    if torch.cuda.is_available():
        pytest.skip("interpreter test (CPU); the GPU test below runs the compiled kernels")
    with bounds_checked() as launches:
        errors = _op_errors(batch, length, heads, headdim, d_state, dtype, "cpu", last_only)
    assert launches == (LAUNCHES_LAST if last_only else LAUNCHES)
    _check(errors, TOL[dtype])


def _blocks(length, kernels, device, chunk_size=64):
    # (the block in ``kernels`` mode on ``device``, the float64 PyTorch block of its weights)
    cfg = EncoderConfig(d_model=32, headdim=16, d_state=16, chunk_size=chunk_size)
    fast = use_kernels_(perturbed_block(cfg, seed=length), kernels)
    ref = use_kernels_(Mamba2Block(cfg).double(), "off")
    ref.load_state_dict(fast.state_dict())
    return fast.to(device), ref


def _block_grads(block, h, last_only=False):
    leaf = h.clone().requires_grad_()
    out = block(leaf, last_only=last_only)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
    (out.double() * weight.to(out.device, torch.float64)).sum().backward()
    grads = {"out": out.detach(), "d h": leaf.grad}
    grads.update({n.removeprefix("_orig_mod."): p.grad for n, p in block.named_parameters()})
    return {k: v.cpu().double() for k, v in grads.items()}


@pytest.mark.parametrize("last_only", [False, True])
@pytest.mark.parametrize("length", [37, 64])
def test_block_on_the_kernels_matches_the_float64_pytorch_block(length, last_only,
                                                                monkeypatch):
    # every parameter's gradient goes through the kernels' d xbc, d dt, d A and d D (and
    # conv_dt's, the learner's conv + dt kernel)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        monkeypatch.setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee")
    from lobsurf.models.kernels import ssd_last_row_triton

    vector_calls = count_calls(monkeypatch, ssd_last_row_triton, "fwd_last")
    fast, ref = _blocks(length, "on", device)
    fp32_torch, _ = _blocks(length, "off", device)
    h = torch.randn(2, length, 32, generator=torch.Generator().manual_seed(length))
    got = _block_grads(fast, h.to(device), last_only)
    assert len(vector_calls) == last_only
    conditioning = _block_grads(fp32_torch, h.to(device), last_only)
    want = _block_grads(ref, h.double(), last_only)
    for name, exact in want.items():
        err = ((got[name] - exact).norm() / exact.norm()).item()
        torch_err = ((conditioning[name] - exact).norm() / exact.norm()).item()
        assert err < max(TOL_BLOCK, CONDITIONING * torch_err), (
            f"{name}: relative error {err:.2e} (PyTorch fp32 block {torch_err:.2e})"
        )


def test_a_window_longer_than_a_chunk_takes_the_pytorch_scan(monkeypatch):
    # the kernels hold one chunk: a longer window runs the chunked PyTorch scan in every
    # mode ("on" included), with the same outputs as the PyTorch block
    calls = count_calls(monkeypatch, ssd_window_triton, "ssd_window")
    gated = count_calls(monkeypatch, ssd_window_triton, "ssd_window_gated")
    long_window = torch.randn(1, 20, 32, generator=torch.Generator().manual_seed(0))
    fast, ref = _blocks(20, "on", "cpu", chunk_size=16)
    for last_only in (False, True):
        with torch.no_grad():
            want = ref(long_window.double(), last_only=last_only)
            torch.testing.assert_close(fast(long_window, last_only=last_only).double(), want,
                                       rtol=1e-4, atol=1e-5)
    assert not calls and not gated


def _gpu_check(precision, shape, label, last_only=False):
    # the op on CUDA at one precision (fp32 products IEEE or TF32, or bf16) against float64
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    saved = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "tf32" if precision == "tf32" else "ieee"
    try:
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        errors = _op_errors(*shape, dtype, "cuda", last_only)
    finally:
        torch.backends.cuda.matmul.fp32_precision = saved
    print(f"{label}{precision} {'x'.join(map(str, shape))}: "
          + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()))
    _check(errors, {"ieee": TOL[torch.float32], "tf32": 5e-3, "bf16": TOL[torch.bfloat16]}
           [precision])


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["ieee", "tf32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES)
def test_compiled_kernels_match_the_float64_recurrence_on_the_gpu(shape, precision):
    _gpu_check(precision, shape, "")


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["ieee", "tf32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES)
def test_last_row_matches_the_float64_recurrence_on_the_gpu(shape, precision):
    # the last row's forward and backward as vectors over the rows
    _gpu_check(precision, shape, "last row, ", last_only=True)


@pytest.mark.gpu
def test_compiled_block_on_the_kernels_tracks_the_pytorch_block_under_autocast():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    fast, ref = _blocks(64, "auto", "cuda")
    plain = use_kernels_(Mamba2Block(fast.mixer.cfg), "off").cuda()
    plain.load_state_dict(fast.state_dict())
    h = torch.randn(4, 64, 32, generator=torch.Generator().manual_seed(4))
    want = _block_grads(ref, h.double())
    errors = {}
    for name, block in (("kernels", torch.compile(fast, fullgraph=True)),
                        ("pytorch", torch.compile(plain, fullgraph=True))):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            got = _block_grads(block, h.cuda())
        errors[name] = {k: ((got[k] - v).norm() / v.norm()).item() for k, v in want.items()}
    print(errors)
    for k, err in errors["kernels"].items():
        # bf16 products on both sides: the kernels may not be much further off than PyTorch
        assert err < max(TOL[torch.bfloat16], 2.0 * errors["pytorch"][k]), (k, err)
