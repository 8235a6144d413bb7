"""The conv + dt softplus with its one backward kernel (``conv_dt_triton.py``, the learner's
forward on CUDA) against a float64 numpy reference written here (forward and a
hand-derived backward), and the block on it against the PyTorch block in float64.

Without CUDA the kernels run in Triton's CPU interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 before Triton is imported); the GPU-marked tests run them on CUDA. The
numpy reference shares no code with the kernel or the PyTorch conv.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("triton", reason="the conv kernels need Triton (dev extra on Linux)")

from lobsurf.models.config import EncoderConfig  # noqa: E402
from lobsurf.models.kernels import conv_dt_triton, conv_triton  # noqa: E402
from lobsurf.models.kernels.triton_support import use_kernels_  # noqa: E402
from lobsurf.models.mamba2 import Mamba2Block  # noqa: E402
from tests.models.conftest import count_calls, perturbed_block  # noqa: E402

#: max |kernel - reference| / max |reference| per output and gradient: fp32, and bf16 inputs
#: (the d pre rows rounded to bf16 as PyTorch's bf16 backward holds them)
TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2}
#: (batch, length, channels, heads, width, padding columns): the default layer (384
#: channels in 3 tiles, 4 heads, 4 padding columns), a ragged window with a channel tail and
#: odd padding, W = 3, 2 and 1, no padding, a window shorter than the conv
CASES = [(2, 64, 384, 4, 4, 4), (3, 37, 200, 3, 4, 5), (2, 20, 40, 2, 3, 0),
         (2, 16, 24, 4, 2, 4), (1, 9, 16, 1, 1, 7), (2, 2, 24, 4, 4, 4)]
#: the interpreter's costliest cases, run in the full suite only (``slow``): the default
#: layer (seconds per run; its several channel blocks and padding are CASES[1]'s classes
#: too) and CASES[1] in bf16 (bf16 is also every smaller case's)
SLOW = {(0, torch.float32), (0, torch.bfloat16), (1, torch.bfloat16)}


def _case_dtypes() -> list:
    """Every case in fp32 and bf16 as pytest params, SLOW's pairs marked slow."""
    return [pytest.param(case, dtype, id=f"case{i}-dtype{j}",
                         marks=[pytest.mark.slow] if (i, dtype) in SLOW else [])
            for i, case in enumerate(CASES)
            for j, dtype in enumerate((torch.float32, torch.bfloat16))]


@pytest.fixture(autouse=True)
def _interpreter_or_gpu(request):
    # on a CUDA machine Triton is not in its interpreter: only the GPU-marked tests run there
    if torch.cuda.is_available() and request.node.get_closest_marker("gpu") is None:
        pytest.skip("interpreter test (CPU); the GPU-marked tests run the compiled kernel")


def numpy_conv_dt(xbcdt: np.ndarray, w: np.ndarray, b: np.ndarray, dt_bias: np.ndarray,
                  dxbc: np.ndarray, ddt: np.ndarray, channels: int):
    """Outputs and gradients in float64, row by row: (xBC, dt) and (d xbcdt, d w, d b,
    d dt_bias) for the incoming gradients dxbc, ddt."""
    batch, length, _ = xbcdt.shape
    width, heads = w.shape[0], dt_bias.shape[0]
    x = xbcdt[..., :channels]
    pre = np.zeros_like(x)
    for t in range(length):
        pre[:, t] = b
        for back in range(width):  # tap W-1-back reads the input `back` steps ago
            if t - back >= 0:
                pre[:, t] += w[width - 1 - back] * x[:, t - back]
    sig = 1.0 / (1.0 + np.exp(-pre))
    xbc = pre * sig
    v = xbcdt[..., channels:channels + heads] + dt_bias
    dt = np.logaddexp(0.0, v)
    dpre = dxbc * (sig + pre * sig * (1.0 - sig))  # d SiLU(p) / dp
    dx_all = np.zeros_like(xbcdt)
    dw, db = np.zeros_like(w), dpre.sum((0, 1))
    for t in range(length):
        for back in range(width):
            if t - back >= 0:  # pre[t] read x[t - back] through tap W-1-back
                dx_all[:, t - back, :channels] += w[width - 1 - back] * dpre[:, t]
                dw[width - 1 - back] += (dpre[:, t] * x[:, t - back]).sum(0)
    draw = ddt / (1.0 + np.exp(-v))  # d softplus(v) / dv = sigmoid(v)
    dx_all[..., channels:channels + heads] = draw
    return (xbc, dt), (dx_all, dw, db, draw.sum((0, 1)))


def _run(case, dtype, device="cpu", seed=0):
    batch, length, channels, heads, width, pad = case
    g = torch.Generator().manual_seed(seed + length)
    cols = channels + heads + pad
    # a slice of wider rows with unit column stride, as the in-projection's output is
    xbcdt = torch.randn(batch, length, cols + 8, generator=g)[..., 8:]
    w, b = torch.randn(width, channels, generator=g), torch.randn(channels, generator=g)
    dt_bias = torch.rand(heads, generator=g) * 4.0 - 2.0
    dxbc = torch.randn(batch, length, channels, generator=g)
    ddt = torch.randn(batch, length, heads, generator=g)
    leaves = [t.to(device=device, dtype=dtype).requires_grad_() for t in (xbcdt, w, b)]
    leaves.append(dt_bias.to(device).requires_grad_())  # fp32, as the parameter is
    xbc, dt = conv_dt_triton.conv_dt(*leaves, channels, heads)
    grads = torch.autograd.grad((xbc.float() * dxbc.to(device)).sum()
                                + (dt * ddt.to(device)).sum(), leaves)
    want_out, want_grads = numpy_conv_dt(
        *(t.detach().double().cpu().numpy() for t in leaves), dxbc.double().numpy(),
        ddt.double().numpy(), channels)
    return (xbc, dt), grads, want_out, want_grads


def _rel(got: torch.Tensor, ref: np.ndarray) -> float:
    return float(np.abs(got.detach().double().cpu().numpy() - ref).max() / np.abs(ref).max())


def _check(case, dtype, outs, grads, want_out, want_grads):
    channels, heads = case[2], case[3]
    xbc, dt = outs
    assert xbc.dtype == dtype and dt.dtype == torch.float32
    assert grads[0].dtype == grads[1].dtype == grads[2].dtype == dtype
    assert grads[3].dtype == torch.float32
    names = ("xBC", "dt", "d xbcdt", "d weight", "d bias", "d dt_bias")
    for name, got, ref in zip(names, (*outs, *grads), (*want_out, *want_grads)):
        assert got.shape == ref.shape, name
        err = _rel(got, ref)
        assert err < TOL[dtype], f"{name}: relative error {err:.1e}"
    # the padding columns' gradient is written, and zero (the GEMMs read it)
    assert torch.count_nonzero(grads[0][..., channels + heads:]) == 0


@pytest.mark.parametrize("case,dtype", _case_dtypes())
def test_conv_dt_and_gradients_match_numpy(case, dtype) -> None:
    # in the interpreter under the bounds check of every load and store (triton_bounds.py):
    # the forward kernel and the backward writing the in-projection columns' gradient
    from tests.models.kernels.triton_bounds import bounds_checked

    with bounds_checked() as launches:
        out = _run(case, dtype)
    assert launches == ["_conv_walk_fwd_kernel", "_conv_dt_bwd_kernel"]
    _check(case, dtype, *out)


@pytest.mark.parametrize("case", [pytest.param(CASES[1], id="case0", marks=pytest.mark.slow),
                                  pytest.param(CASES[4], id="case1")])
def test_one_row_per_step_matches_numpy(case, monkeypatch) -> None:
    """The walk's other setting (``ROWS_PER_STEP = 1``: each row's loads on their own)."""
    monkeypatch.setattr(conv_dt_triton, "ROWS_PER_STEP", 1)
    _check(case, torch.float32, *_run(case, torch.float32))


@pytest.mark.parametrize("case", [pytest.param(CASES[0], id="case0", marks=pytest.mark.slow),
                                  pytest.param(CASES[1], id="case1")])
def test_wide_channel_block_matches_numpy(case, monkeypatch) -> None:
    """The channel block of large batches (``BLOCK_C``; the tests' few windows otherwise
    take ``BLOCK_C_SMALL``)."""
    monkeypatch.setattr(conv_dt_triton, "SMALL_BATCH", 1)
    assert conv_dt_triton.block_channels(case[0]) == conv_dt_triton.BLOCK_C
    _check(case, torch.float32, *_run(case, torch.float32))


def test_channel_block_by_batch() -> None:
    """Below SMALL_BATCH windows half the channels per program, from it on the full block."""
    small = conv_dt_triton.SMALL_BATCH
    assert conv_dt_triton.block_channels(small - 1) == conv_dt_triton.BLOCK_C_SMALL
    assert conv_dt_triton.block_channels(small) == conv_dt_triton.BLOCK_C
    assert conv_dt_triton.BLOCK_C_SMALL < conv_dt_triton.BLOCK_C


def test_softplus_gradient_above_the_threshold() -> None:
    """Past PyTorch's softplus threshold (20) the derivative is exactly 1, as PyTorch's."""
    x = torch.zeros(1, 3, 16 + 4 + 4)
    x[..., 16:20] = torch.tensor([-30.0, 0.0, 25.0, 60.0])
    leaves = [x.requires_grad_(), torch.randn(4, 16).requires_grad_(),
              torch.randn(16).requires_grad_(), torch.zeros(4, requires_grad=True)]
    _, dt = conv_dt_triton.conv_dt(*leaves, 16, 4)
    d_raw = torch.autograd.grad(dt.sum(), leaves[0])[0][..., 16:20]
    want = torch.autograd.grad(torch.nn.functional.softplus(x[..., 16:20]).sum(), x)[0]
    assert torch.equal(d_raw[0, 0, 2:], torch.ones(2))
    assert torch.allclose(d_raw, want[..., 16:20], rtol=1e-6, atol=1e-12)


def _blocks(kernels: str, seed: int = 3, d_conv: int = 4) -> tuple[Mamba2Block, Mamba2Block]:
    # (the float64 PyTorch block, the block of its weights in ``kernels`` mode); windows
    # longer than chunk_size, so that the scan stays PyTorch's and the conv + dt is what
    # the kernels change
    cfg = EncoderConfig(d_model=32, headdim=16, d_state=16, chunk_size=16, d_conv=d_conv)
    ref = use_kernels_(perturbed_block(cfg, seed).double(), "off")
    fast = use_kernels_(Mamba2Block(cfg), kernels)
    fast.load_state_dict(ref.state_dict())
    return ref, fast


@pytest.mark.parametrize("last_only", [False, True])
def test_block_on_conv_dt_matches_the_float64_block(last_only: bool, monkeypatch) -> None:
    """The block with the conv + dt through conv_dt (z projected apart): its output and
    every parameter's and the input's gradient against the PyTorch block in float64."""
    ref, fast = _blocks("on")
    h = torch.randn(3, 37, 32)
    calls = count_calls(monkeypatch, conv_dt_triton, "_conv_dt_bwd_op")
    hf = h.clone().requires_grad_()
    out = fast(hf, last_only=last_only)
    probe = torch.randn_like(out)  # a loss that weighs every output value
    grads = torch.autograd.grad((out * probe).sum(), [hf, *fast.parameters()])
    assert calls == [1]
    hr = h.double().requires_grad_()
    out_ref = ref(hr, last_only=last_only)
    ref_grads = torch.autograd.grad((out_ref * probe.double()).sum(), [hr, *ref.parameters()])
    names = ["h"] + [n for n, _ in ref.named_parameters()]
    assert _rel(out, out_ref.detach().numpy()) < 2e-5
    for name, got, want in zip(names, grads, ref_grads):
        assert _rel(got, want.numpy()) < 2e-4, name


def test_dispatch(monkeypatch) -> None:
    """"on" takes conv_dt only under autograd (the conv's forward kernel without it); "auto"
    keeps CPU tensors on PyTorch; a conv wider than the kernels hold runs PyTorch's conv in
    every mode, with the PyTorch block's output."""
    _, fast = _blocks("on")
    h = torch.randn(2, 10, 32)
    assert fast.mixer._conv_dt(h)
    launches = count_calls(monkeypatch, conv_triton, "conv_silu")
    with torch.no_grad():
        assert not fast.mixer._conv_dt(h)
        fast(h)
    assert launches == [1]
    _, auto = _blocks("auto")
    assert not auto.mixer._conv_dt(h)
    ref, wide = _blocks("on", d_conv=conv_dt_triton.MAX_WIDTH + 1)
    assert not wide.mixer._conv_dt(h)
    with torch.no_grad():
        torch.testing.assert_close(wide(h).double(), ref(h.double()), rtol=1e-5, atol=1e-6)
    assert launches == [1]
    with pytest.raises(ValueError, match="at most 4 taps"):
        conv_dt_triton.conv_dt(torch.zeros(1, 4, 24), torch.zeros(5, 16), torch.zeros(16),
                               torch.zeros(4), 16, 4)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", CASES)
def test_conv_dt_on_cuda_matches_numpy(case, dtype) -> None:
    _check(case, dtype, *_run(case, dtype, device="cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,length,channels,width,row", [(3, 64, 384, 4, 648),
                                                             (2, 37, 200, 4, 209),
                                                             (2, 130, 640, 3, 649)])
def test_conv_forward_on_cuda_matches_float64(batch, length, channels, width, row,
                                               dtype) -> None:
    """The conv's forward kernel alone (the no-grad forwards' conv), x a slice of wider
    rows as the in-projection's output is (the default's layout first: rows of 648)."""
    g = torch.Generator(device="cuda").manual_seed(length)
    x = torch.randn(batch, length, row, device="cuda", generator=g)[..., -channels - 8:-8]
    w = torch.randn(width, channels, device="cuda", generator=g)
    b = torch.randn(channels, device="cuda", generator=g)
    out = conv_triton.conv_silu(x.to(dtype), w.to(dtype), b.to(dtype))
    xd, wd, bd = (t.to(dtype).double().cpu().numpy() for t in (x, w, b))
    want = numpy_conv_dt(np.concatenate([xd, np.zeros((batch, length, 1))], -1), wd, bd,
                         np.zeros(1), np.zeros((batch, length, channels)),
                         np.zeros((batch, length, 1)), channels)[0][0]
    assert out.dtype == dtype and _rel(out, want) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("last_only", [False, True])
def test_block_on_the_default_cuda_path_matches_the_pytorch_block(last_only: bool,
                                                                   monkeypatch) -> None:
    """The block on CUDA in "auto" (the kernels; the window longer than a chunk, so the
    PyTorch scan with conv_dt) against "off": output, every parameter's gradient, and the
    forwards without gradients (acting, target)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    monkeypatch.setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee")
    torch.manual_seed(0)
    cfg = EncoderConfig(d_model=64, headdim=32, d_state=32, chunk_size=32)
    ref = use_kernels_(Mamba2Block(cfg), "off").cuda()
    fast = Mamba2Block(cfg).cuda()
    fast.load_state_dict(ref.state_dict())
    h = torch.randn(4, 80, 64, device="cuda")
    out_ref, out = ref(h, last_only=last_only), fast(h, last_only=last_only)
    probe = torch.randn_like(out)  # a loss that weighs every output value
    g_ref = torch.autograd.grad((out_ref * probe).sum(), list(ref.parameters()))
    g = torch.autograd.grad((out * probe).sum(), list(fast.parameters()))

    def rel(a, b):
        return ((a.double() - b.double()).norm() / b.double().norm()).item()

    assert rel(out, out_ref) < 2e-4
    for name, a, b in zip([n for n, _ in ref.named_parameters()], g, g_ref):
        assert rel(a, b) < 2e-3, name
    with torch.no_grad():  # the forwards without gradients (acting, target) take own paths
        assert rel(fast(h, last_only=last_only), out_ref) < 2e-4
