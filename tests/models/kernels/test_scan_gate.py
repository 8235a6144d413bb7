"""The gated norm's gate in the one-chunk scan kernel of the forwards without autograd
(``ssd_window_triton.ssd_window_gated``, ``Mamba2Mixer._gated_scan_out``).

References that share no code with the kernel or the mixer's norm: the step-by-step float64
recurrence ``ssd_reference.ssd_recurrent`` with the gate, the sums of squares and the RMS
norm written out here in float64, and the float64 PyTorch block (``kernels = "off"``) for
whole blocks. Without CUDA the kernel runs in Triton's CPU interpreter (tests/conftest.py)
under the bounds check of every load and store.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="the kernels need Triton (dev extra on Linux)")

from lobsurf.models.config import EncoderConfig  # noqa: E402
from lobsurf.models.kernels import ssd_window_triton  # noqa: E402
from lobsurf.models.kernels.triton_support import use_kernels_  # noqa: E402
from lobsurf.models.mamba2 import Mamba2Block  # noqa: E402
from lobsurf.models.ssd_reference import ssd_recurrent  # noqa: E402
from tests.models.conftest import count_calls, perturbed_block  # noqa: E402

#: (batch, length, heads, headdim, d_state): the default model's window, a ragged window
#: (L = 37 inside a 64-row tile), one shorter than the smallest tile (L = 10 < 16)
SHAPES = [(2, 64, 4, 64, 64), (2, 37, 2, 32, 16), (3, 10, 3, 16, 32)]
#: relative error (norm of the difference / norm of the float64 value): IEEE fp32 products;
#: bf16 operands and a bf16 store of g w
TOL = {torch.float32: 1e-4, torch.bfloat16: 1.5e-2}
EPS = 1e-5
#: columns past the gate's in z's rows (z is a strided view of the in-projection there):
#: rows of E + 5 (no alignment) and of E + 8 (strides in units of 8 elements, ZALIGN = 8)
Z_PADS = (5, 8)


def _inputs(batch, length, heads, headdim, d_state, dtype, last_only, seed, z_pad=Z_PADS[0]):
    g = torch.Generator().manual_seed(seed)
    E = heads * headdim
    xbc = torch.randn(batch, length, E + 2 * d_state, generator=g).to(dtype)
    dt = torch.nn.functional.softplus(torch.randn(batch, length, heads, generator=g) - 1.0)
    A = -(torch.rand(heads, generator=g) * 2.0 + 0.1)
    D = torch.randn(heads, generator=g)
    z_rows = torch.randn(batch, length, E + z_pad, generator=g).to(dtype)
    z = z_rows[:, -1, :E].contiguous() if last_only else z_rows[..., :E]
    weight = 1.0 + 0.5 * torch.randn(E, generator=g)
    return xbc, dt, A, D, z, weight


def _float64_gate(xbc, dt, A, D, z, weight, heads, headdim, d_state, last_only):
    # (g w, ss, the normalised rows RMSNorm(g) w) in float64, step by step
    batch, length, _ = xbc.shape
    E = heads * headdim
    x, B, C = torch.split(xbc.double(), (E, d_state, d_state), dim=-1)
    xh = x.reshape(batch, length, heads, headdim)
    y, _ = ssd_recurrent(xh, dt.double(), A.double(), B, C)
    y = y + xh * D.double()[:, None]
    if last_only:
        y = y[:, -1]
    zd = z.double().reshape(y.shape)
    g = y * zd / (1.0 + torch.exp(-zd))
    ss = (g * g).sum(-1)
    g = g.reshape(*g.shape[:-2], E)
    normed = g / torch.sqrt((g * g).mean(-1, keepdim=True) + EPS) * weight.double()
    return g * weight.double(), ss, normed


def _rel(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


@pytest.mark.parametrize("z_pad", Z_PADS)
@pytest.mark.parametrize("last_only", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,length,heads,headdim,d_state", SHAPES)
def test_gated_scan_matches_the_float64_recurrence_inside_its_tensors(batch, length, heads,
                                                                      headdim, d_state, dtype,
                                                                      last_only, z_pad):
    # last_only: the last row as vectors over the rows (ssd_last_row_triton)
    from tests.models.kernels.triton_bounds import bounds_checked

    if torch.cuda.is_available():
        pytest.skip("interpreter test (CPU); the GPU test below runs the compiled kernel")
    xbc, dt, A, D, z, weight = _inputs(batch, length, heads, headdim, d_state, dtype,
                                       last_only, seed=length, z_pad=z_pad)
    with bounds_checked() as launches:
        gw, ss = ssd_window_triton.ssd_window_gated(xbc, dt, A, D, z, weight, headdim, d_state,
                                                    last_only=last_only)
    assert launches == ["_ssd_window_fwd_last" if last_only else "_ssd_window_fwd"]
    assert gw.dtype == dtype and ss.dtype == torch.float32
    want_gw, want_ss, want_normed = _float64_gate(xbc, dt, A, D, z, weight, heads, headdim,
                                                  d_state, last_only)
    assert gw.shape == want_gw.shape and ss.shape == want_ss.shape
    rstd = torch.rsqrt(ss.double().sum(-1, keepdim=True) / (heads * headdim) + EPS)
    errors = {"g w": _rel(gw, want_gw), "ss": _rel(ss, want_ss),
              "normalised": _rel(gw.double() * rstd, want_normed)}
    for name, err in errors.items():
        assert err < TOL[dtype], f"{name}: relative error {err:.2e}"


def test_gated_scan_rejects_a_z_of_the_wrong_shape():
    xbc, dt, A, D, z, weight = _inputs(1, 16, 2, 16, 16, torch.float32, False, seed=0)
    with pytest.raises(ValueError, match="z"):
        ssd_window_triton.ssd_window_gated(xbc, dt, A, D, z[:, :-1], weight, 16, 16)


#: a block width whose z the scan kernel reads from the in-projection (not a power of two:
#: the kernel computes z itself only for power-of-two widths, test_scan_z_proj.py)
GATE_D_MODEL = 48


def _blocks(length, device, d_model=GATE_D_MODEL, kernels="on"):
    # (the block in ``kernels`` mode on ``device``, the float64 PyTorch block of its weights)
    cfg = EncoderConfig(d_model=d_model, headdim=16, d_state=16)
    fast = use_kernels_(perturbed_block(cfg, seed=length), kernels)
    ref = use_kernels_(Mamba2Block(cfg), "off")
    ref.double().load_state_dict(fast.state_dict())
    return fast.to(device), ref


@pytest.mark.parametrize("last_only", [False, True])
@pytest.mark.parametrize("length", [37, 64])
def test_block_with_the_gate_in_the_scan_matches_the_float64_pytorch_block(length, last_only,
                                                                           monkeypatch):
    # the no-grad forward with the gate in the scan kernel, z read from the in-projection;
    # the last row's forward as vectors over the rows
    from lobsurf.models.kernels import ssd_last_row_triton

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        monkeypatch.setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee")
    calls = count_calls(monkeypatch, ssd_window_triton, "ssd_window_gated")
    vector_calls = count_calls(monkeypatch, ssd_last_row_triton, "fwd_last")
    fast, ref = _blocks(length, device)
    h = torch.randn(2, length, GATE_D_MODEL, generator=torch.Generator().manual_seed(length))
    err = no_grad_block_error(fast, ref, h, last_only)
    assert len(calls) == 1
    assert len(vector_calls) == last_only
    assert err < TOL[torch.float32], f"relative error {err:.2e}"


def no_grad_block_error(fast, ref, h, last_only: bool) -> float:
    """The relative error of ``fast``'s forward without autograd on h (on fast's device)
    against the float64 block ``ref``'s."""
    device = next(fast.parameters()).device
    with torch.no_grad():
        got = fast(h.to(device), last_only=last_only).cpu()
        want = ref(h.double(), last_only=last_only)
    return _rel(got, want)


def test_the_gate_stays_in_pytorch_under_autograd_and_on_cpu_by_default(monkeypatch):
    # with autograd the PyTorch norm (which has a backward) runs; "auto" never takes the
    # kernel on CPU; "off" never
    if torch.cuda.is_available():
        pytest.skip("interpreter test (CPU): the CPU blocks' kernels need Triton's interpreter")
    calls = count_calls(monkeypatch, ssd_window_triton, "ssd_window_gated")
    h = torch.randn(2, 24, GATE_D_MODEL, generator=torch.Generator().manual_seed(3))
    on = run_where_the_gate_never_runs(_blocks, h)
    assert not calls and on.mixer.norm_weight.grad is not None


def run_where_the_gate_never_runs(blocks, h: torch.Tensor):
    """Run the CPU blocks of ``blocks`` (length 24) where the gate must stay out of the scan
    kernel: on the kernels ("on") under autograd (forward and backward; the forward checked
    against the float64 block), then without autograd in "auto" and "off". Returns the
    first block; the caller checks that the gated kernels were never called."""
    on, ref = blocks(24, "cpu")
    out = on(h)
    out.sum().backward()
    torch.testing.assert_close(out.double(), ref(h.double()), rtol=1e-4, atol=1e-5)
    for mode in ("auto", "off"):
        block, _ = blocks(24, "cpu", kernels=mode)
        with torch.no_grad():
            block(h)
    return on


@pytest.mark.gpu
@pytest.mark.parametrize("last_only", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,length,heads,headdim,d_state", SHAPES)
def test_compiled_gated_scan_matches_the_float64_recurrence_on_the_gpu(batch, length, heads,
                                                                       headdim, d_state,
                                                                       dtype, last_only,
                                                                       monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    monkeypatch.setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee")
    cpu = _inputs(batch, length, heads, headdim, d_state, dtype, last_only, seed=length)
    gw, ss = ssd_window_triton.ssd_window_gated(*(t.cuda() for t in cpu), headdim, d_state,
                                                last_only=last_only)
    want_gw, want_ss, _ = _float64_gate(*cpu, heads, headdim, d_state, last_only)
    for name, got, want in (("g w", gw, want_gw), ("ss", ss, want_ss)):
        err = _rel(got.cpu(), want)
        assert err < TOL[dtype], f"{name}: relative error {err:.2e}"


@pytest.mark.gpu
def test_compiled_block_with_the_gate_in_the_scan_tracks_the_pytorch_block_under_autocast():
    # the default ("auto") on CUDA, compiled, bf16: no further off float64 than PyTorch's norm
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    fast, ref = _blocks(64, "cuda", kernels="auto")
    errors = compiled_bf16_errors(fast, ref)
    assert errors["kernel"] < max(TOL[torch.bfloat16], 2.0 * errors["pytorch"]), errors


def compiled_bf16_errors(fast, ref) -> dict[str, float]:
    """{"kernel": fast's, "pytorch": the same block on the PyTorch path ("off")} relative
    error against the float64 block ``ref``, each compiled under bf16 autocast on CUDA."""
    plain = use_kernels_(Mamba2Block(fast.mixer.cfg), "off").cuda()
    plain.load_state_dict(fast.state_dict())
    h = torch.randn(4, 64, fast.mixer.cfg.d_model, generator=torch.Generator().manual_seed(4))
    errors = {}
    with torch.no_grad():
        want = ref(h.double())
        for name, block in (("kernel", fast), ("pytorch", plain)):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                got = torch.compile(block, fullgraph=True)(h.cuda())
            errors[name] = _rel(got.cpu(), want)
    print(errors)
    return errors
