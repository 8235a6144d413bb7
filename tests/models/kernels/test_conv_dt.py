"""The conv + dt softplus with its one backward kernel (``conv_dt_triton.py``,
``conv_backend = "triton_dx"``) against a float64 numpy reference written here (forward and
a hand-derived backward), and the block on it against the PyTorch block in float64.

Without CUDA the kernels run in Triton's CPU interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 before Triton is imported); the GPU-marked tests run them on CUDA. The
numpy reference shares no code with the kernel or the PyTorch conv.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("triton", reason="the conv kernels need Triton (dev extra on Linux)")

from lobsurf.models.kernels import conv_dt_triton  # noqa: E402
from lobsurf.models.config import EncoderConfig  # noqa: E402
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


def _run_z(case, dtype, z_width, device="cpu", seed=0):
    # conv_dt_z on [z | xbcdt] rows (a slice of wider rows, as the in-projection's output
    # is), with gradients for z, xBC and dt
    batch, length, channels, heads, width, pad = case
    g = torch.Generator().manual_seed(seed + 7 * length)
    cols = z_width + channels + heads + pad
    proj = torch.randn(batch, length, cols + 8, generator=g)[..., 8:]
    w, b = torch.randn(width, channels, generator=g), torch.randn(channels, generator=g)
    dt_bias = torch.rand(heads, generator=g) * 4.0 - 2.0
    dz = torch.randn(batch, length, z_width, generator=g)
    dxbc = torch.randn(batch, length, channels, generator=g)
    ddt = torch.randn(batch, length, heads, generator=g)
    leaves = [t.to(device=device, dtype=dtype).requires_grad_() for t in (proj, w, b)]
    leaves.append(dt_bias.to(device).requires_grad_())
    z, xbc, dt = conv_dt_triton.conv_dt_z(leaves[0], *leaves[1:], z_width, channels, heads)
    grads = torch.autograd.grad((z.float() * dz.to(device)).sum()
                                + (xbc.float() * dxbc.to(device)).sum()
                                + (dt * ddt.to(device)).sum(), leaves)
    p64 = leaves[0].detach().double().cpu().numpy()
    want_out, want_grads = numpy_conv_dt(
        p64[..., z_width:], *(t.detach().double().cpu().numpy() for t in leaves[1:]),
        dxbc.double().numpy(), ddt.double().numpy(), channels)
    want_dproj = np.concatenate([dz.double().numpy(), want_grads[0]], axis=-1)
    return ((z, p64[..., :z_width]), (xbc, dt), grads, want_out,
            (want_dproj, *want_grads[1:]))


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", CASES)
def test_conv_dt_and_gradients_match_numpy(case, dtype) -> None:
    _check(case, dtype, *_run(case, dtype))


@pytest.mark.parametrize("case", [CASES[1], CASES[4]])
def test_one_row_per_step_matches_numpy(case, monkeypatch) -> None:
    """The walk's other setting (``ROWS_PER_STEP = 1``: each row's loads on their own)."""
    monkeypatch.setattr(conv_dt_triton, "ROWS_PER_STEP", 1)
    _check(case, torch.float32, *_run(case, torch.float32))


#: z widths: none past one tile's 128 columns, two tiles with a ragged tail
Z_CASES = [(CASES[0], 256), (CASES[1], 136), (CASES[4], 24)]


def _check_z(case, dtype, z_width, out):
    (z, want_z), outs, grads, want_out, want_grads = out
    # z is the projection's own columns, passed through
    assert z.shape[-1] == z_width and _rel(z, want_z) == 0.0
    assert grads[0].shape == want_grads[0].shape
    # the xBC, dt and padding columns as conv_dt's
    _check(case, dtype, outs, (grads[0][..., z_width:], *grads[1:]), want_out,
           (want_grads[0][..., z_width:], *want_grads[1:]))
    # the z columns' gradient is d z as given (a copy: exact, in the projection's dtype)
    assert _rel(grads[0][..., :z_width], want_grads[0][..., :z_width]) < (
        1e-7 if dtype == torch.float32 else 4e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("case", "z_width"), Z_CASES)
def test_conv_dt_z_writes_the_whole_projections_gradient(case, z_width, dtype) -> None:
    """conv_dt_z: z passed through, and the one backward kernel writes d z into the z
    columns beside the conv's and dt's gradient (numpy reference, the z columns d z)."""
    _check_z(case, dtype, z_width, _run_z(case, dtype, z_width))


@pytest.mark.parametrize("case", [CASES[0], CASES[1]])
def test_wide_channel_block_matches_numpy(case, monkeypatch) -> None:
    """The channel block of large batches (``BLOCK_C``; the tests' few windows otherwise
    take ``BLOCK_C_SMALL``), with and without the z columns."""
    monkeypatch.setattr(conv_dt_triton, "SMALL_BATCH", 1)
    assert conv_dt_triton.block_channels(case[0]) == conv_dt_triton.BLOCK_C
    _check(case, torch.float32, *_run(case, torch.float32))
    _check_z(case, torch.float32, 136, _run_z(case, torch.float32, 136))


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


def _blocks(conv_backend: str, seed: int = 3, one_in_projection: bool = False
            ) -> tuple[Mamba2Block, Mamba2Block]:
    cfg = EncoderConfig(d_model=32, headdim=16, d_state=16, ssd_backend="torch",
                        conv_backend="torch")
    ref = perturbed_block(cfg, seed).double()
    fast = Mamba2Block(EncoderConfig(**{**cfg.__dict__, "conv_backend": conv_backend,
                                        "one_in_projection": one_in_projection}))
    fast.load_state_dict(ref.state_dict())
    return ref, fast


@pytest.mark.parametrize("one_in_projection", [False, True])
@pytest.mark.parametrize("last_only", [False, True])
def test_block_on_triton_dx_matches_the_float64_block(last_only: bool, one_in_projection: bool,
                                                      monkeypatch) -> None:
    """The block with the conv + dt through conv_dt, z projected apart or (every row, with
    ``one_in_projection``) through conv_dt_z: its output and every parameter's and the
    input's gradient against the PyTorch block in float64."""
    ref, fast = _blocks("triton_dx", one_in_projection=one_in_projection)
    h = torch.randn(3, 37, 32)
    calls = count_calls(monkeypatch, conv_dt_triton, "_conv_dt_bwd_op")
    z_calls = count_calls(monkeypatch, conv_dt_triton, "conv_dt_z")
    hf = h.clone().requires_grad_()
    out = fast(hf, last_only=last_only)
    probe = torch.randn_like(out)  # a loss that weighs every output value
    grads = torch.autograd.grad((out * probe).sum(), [hf, *fast.parameters()])
    assert calls == [1]
    assert z_calls == ([1] if one_in_projection and not last_only else [])
    hr = h.double().requires_grad_()
    out_ref = ref(hr, last_only=last_only)
    ref_grads = torch.autograd.grad((out_ref * probe.double()).sum(), [hr, *ref.parameters()])
    names = ["h"] + [n for n, _ in ref.named_parameters()]
    assert _rel(out, out_ref.detach().numpy()) < 2e-5
    for name, got, want in zip(names, grads, ref_grads):
        if want.abs().max() == 0:  # the in-projection's padding rows: no gradient either way
            assert got.abs().max() == 0, name
            continue
        assert _rel(got, want.numpy()) < 2e-4, name


def test_dispatch() -> None:
    """"triton_dx" takes conv_dt only under autograd (the forward kernel without it), insists
    on a conv its kernel holds, and "auto" keeps CPU tensors on PyTorch."""
    _, fast = _blocks("triton_dx")
    h = torch.randn(2, 10, 32)
    assert fast.mixer._conv_dt(h)
    with torch.no_grad():
        assert not fast.mixer._conv_dt(h)
    _, auto = _blocks("auto")
    assert not auto.mixer._conv_dt(h)
    wide = Mamba2Block(EncoderConfig(d_model=32, headdim=16, d_state=16, d_conv=5,
                                     conv_backend="triton_dx"))
    with pytest.raises(RuntimeError, match="d_conv <= 4"):
        wide(torch.randn(1, 8, 32))
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
@pytest.mark.parametrize(("case", "z_width"), Z_CASES)
def test_conv_dt_z_on_cuda_matches_numpy(case, z_width, dtype) -> None:
    _check_z(case, dtype, z_width, _run_z(case, dtype, z_width, device="cuda"))
