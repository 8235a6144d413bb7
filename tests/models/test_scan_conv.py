"""The conv + SiLU and the dt softplus inside the gated scan's kernel
(``EncoderConfig.scan_conv``, ``ssd_window_conv_triton.ssd_window_gated_conv``).

References that share no code with the kernel: the causal conv and the softplus written out
here in float64, then the float64 step-by-step recurrence with the gate
(``test_scan_gate._float64_gate``); for whole blocks the float64 PyTorch block
(``scan_conv = scan_gate = "torch"``). Without CUDA the kernel runs in Triton's CPU
interpreter (tests/conftest.py) under the bounds check of every load and store.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("triton", reason="the kernels need Triton (dev extra on Linux)")

from lobsurf.models import conv_triton, ssd_window_conv_triton, ssd_window_triton  # noqa: E402
from lobsurf.models.config import EncoderConfig  # noqa: E402
from lobsurf.models.mamba2 import Mamba2Block  # noqa: E402
from tests.models.conftest import count_calls, perturbed_block  # noqa: E402
from tests.models.test_scan_gate import SHAPES, TOL, _float64_gate, _rel  # noqa: E402

#: columns of the in-projection's rows past [x | B | C | dt]: none, 5 (rows not 16-byte
#: aligned) and 8 (the default model's 644 -> 648 padding: strides in units of 8 elements)
ROW_PADS = (0, 5, 8)
#: conv widths: Mamba2's 4 and a narrower one (taps past the first rows reach t < 0)
WIDTHS = (4, 2)


def _inputs(batch, length, heads, headdim, d_state, dtype, last_only, seed, row_pad, width):
    # views of one in-projection [B, L, z | x B C | dt | padding], as the mixer slices it
    g = torch.Generator().manual_seed(seed)
    E = heads * headdim
    channels = E + 2 * d_state
    proj = torch.randn(batch, length, E + channels + heads + row_pad, generator=g)
    proj[..., E + channels:] -= 1.0  # raw dt around -1: softplus away from its linear part
    proj = proj.to(dtype)
    z = proj[:, -1, :E].contiguous() if last_only else proj[..., :E]
    pre = proj[..., E:E + channels]
    dt_raw = proj[..., E + channels:E + channels + heads]
    conv_w = (0.5 * torch.randn(width, channels, generator=g)).to(dtype)
    conv_b = (0.3 * torch.randn(channels, generator=g)).to(dtype)
    dt_bias = 0.5 * torch.randn(heads, generator=g)
    A = -(torch.rand(heads, generator=g) * 2.0 + 0.1)
    D = torch.randn(heads, generator=g)
    weight = 1.0 + 0.5 * torch.randn(E, generator=g)
    return pre, dt_raw, conv_w, conv_b, dt_bias, A, D, z, weight


def _float64_conv_dt(pre, dt_raw, conv_w, conv_b, dt_bias):
    # SiLU(b + sum_k w[k] pre[t - (W-1) + k]) with zeros before t = 0, and
    # log(1 + exp(raw + bias)), one time step at a time in float64
    pre, w, bias = pre.double(), conv_w.double(), conv_b.double()
    width, length = w.shape[0], pre.shape[1]
    out = torch.empty_like(pre)
    for t in range(length):
        acc = bias.expand_as(pre[:, t]).clone()
        for k in range(width):
            src = t - (width - 1) + k
            if src >= 0:
                acc = acc + w[k] * pre[:, src]
        out[:, t] = acc / (1.0 + torch.exp(-acc))
    dt = torch.log1p(torch.exp(dt_raw.double() + dt_bias.double()))
    return out, dt


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("row_pad", ROW_PADS)
@pytest.mark.parametrize("last_only", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,length,heads,headdim,d_state", SHAPES)
def test_scan_with_the_conv_matches_float64_inside_its_tensors(batch, length, heads, headdim,
                                                               d_state, dtype, last_only,
                                                               row_pad, width):
    from tests.models.triton_bounds import bounds_checked

    if torch.cuda.is_available():
        pytest.skip("interpreter test (CPU); the GPU test below runs the compiled kernel")
    pre, dt_raw, conv_w, conv_b, dt_bias, A, D, z, weight = _inputs(
        batch, length, heads, headdim, d_state, dtype, last_only, length, row_pad, width)
    with bounds_checked() as launches:
        gw, ss = ssd_window_conv_triton.ssd_window_gated_conv(
            pre, dt_raw, conv_w, conv_b, dt_bias, A, D, z, weight, headdim, d_state,
            last_only=last_only)
    assert launches == ["_ssd_window_conv_fwd"]
    assert gw.dtype == dtype and ss.dtype == torch.float32
    xbc, dt = _float64_conv_dt(pre, dt_raw, conv_w, conv_b, dt_bias)
    want_gw, want_ss, want_normed = _float64_gate(xbc, dt, A, D, z, weight, heads, headdim,
                                                  d_state, last_only)
    assert gw.shape == want_gw.shape and ss.shape == want_ss.shape
    rstd = torch.rsqrt(ss.double().sum(-1, keepdim=True) / (heads * headdim) + 1e-5)
    errors = {"g w": _rel(gw, want_gw), "ss": _rel(ss, want_ss),
              "normalised": _rel(gw.double() * rstd, want_normed)}
    for name, err in errors.items():
        assert err < TOL[dtype], f"{name}: relative error {err:.2e}"


@pytest.mark.parametrize("last_only", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,length,heads,headdim,d_state", SHAPES)
def test_one_program_per_window_matches_float64_too(batch, length, heads, headdim, d_state,
                                                    dtype, last_only):
    # the other grid (per_head off): B, C and their scores once per window, a loop over heads
    from tests.models.triton_bounds import bounds_checked

    if torch.cuda.is_available():
        pytest.skip("interpreter test (CPU); the GPU tests run the compiled kernel")
    pre, dt_raw, conv_w, conv_b, dt_bias, A, D, z, weight = _inputs(
        batch, length, heads, headdim, d_state, dtype, last_only, length + 1, ROW_PADS[-1],
        WIDTHS[0])
    with bounds_checked():
        gw, ss = ssd_window_conv_triton.ssd_window_gated_conv(
            pre, dt_raw, conv_w, conv_b, dt_bias, A, D, z, weight, headdim, d_state,
            last_only=last_only, per_head=False)
    xbc, dt = _float64_conv_dt(pre, dt_raw, conv_w, conv_b, dt_bias)
    want_gw, want_ss, _ = _float64_gate(xbc, dt, A, D, z, weight, heads, headdim, d_state,
                                        last_only)
    for name, got, want in (("g w", gw, want_gw), ("ss", ss, want_ss)):
        err = _rel(got, want)
        assert err < TOL[dtype], f"{name}: relative error {err:.2e}"


def test_softplus_keeps_small_values_and_the_identity_above_the_threshold():
    # raw dt far below 0 (softplus ~ exp(raw), where log(1 + e) would lose e's digits) and
    # above PyTorch's threshold (the identity); one head, a 16-row window
    if torch.cuda.is_available():
        pytest.skip("interpreter test (CPU)")
    pre, dt_raw, conv_w, conv_b, dt_bias, A, D, z, weight = _inputs(
        1, 16, 1, 16, 16, torch.float32, False, 0, 0, 4)
    raw = torch.linspace(-30.0, 30.0, 16)
    dt_raw.copy_(raw[None, :, None])
    dt_bias.zero_()
    gw, _ = ssd_window_conv_triton.ssd_window_gated_conv(pre, dt_raw, conv_w, conv_b, dt_bias,
                                                         A, D, z, weight, 16, 16)
    xbc, dt = _float64_conv_dt(pre, dt_raw, conv_w, conv_b, dt_bias)
    want, _, _ = _float64_gate(xbc, dt, A, D, z, weight, 1, 16, 16, False)
    assert _rel(gw, want) < TOL[torch.float32]


def test_scan_with_the_conv_rejects_weights_of_the_wrong_shape():
    pre, dt_raw, conv_w, conv_b, dt_bias, A, D, z, weight = _inputs(
        1, 16, 2, 16, 16, torch.float32, False, 0, 0, 4)
    for bad in ({"conv_weight": conv_w[:, :-1]}, {"conv_bias": conv_b[:-1]},
                {"dt_bias": dt_bias[:1]}):
        args = dict(conv_weight=conv_w, conv_bias=conv_b, dt_bias=dt_bias) | bad
        with pytest.raises(ValueError, match="conv weight"):
            ssd_window_conv_triton.ssd_window_gated_conv(
                pre, dt_raw, args["conv_weight"], args["conv_bias"], args["dt_bias"], A, D, z,
                weight, 16, 16)


def _blocks(length, device, **options):
    cfg = EncoderConfig(d_model=32, headdim=16, d_state=16, ssd_backend="triton_window",
                        scan_gate="triton")
    fast = perturbed_block(dataclasses.replace(cfg, **options), seed=length)
    ref = Mamba2Block(dataclasses.replace(cfg, ssd_backend="torch", scan_gate="torch",
                                          scan_conv="torch"))
    ref.double().load_state_dict(fast.state_dict())
    return fast.to(device), ref


@pytest.mark.parametrize("programs", ["head", "window"])
@pytest.mark.parametrize("last_only", [False, True])
@pytest.mark.parametrize("length", [37, 64])
def test_block_with_the_conv_in_the_scan_matches_the_float64_pytorch_block(length, last_only,
                                                                           programs,
                                                                           monkeypatch):
    # each grid of scan_conv_programs, reached from the block's config
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        monkeypatch.setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee")
    real, fused = ssd_window_conv_triton.ssd_window_gated_conv, []

    def recorded(*args):  # the mixer's call, positional: per_head last
        fused.append(args[-1])
        return real(*args)

    monkeypatch.setattr(ssd_window_conv_triton, "ssd_window_gated_conv", recorded)
    gated = count_calls(monkeypatch, ssd_window_triton, "ssd_window_gated")
    conv = count_calls(monkeypatch, conv_triton, "conv_silu")
    fast, ref = _blocks(length, device, scan_conv="triton", scan_conv_programs=programs)
    h = torch.randn(2, length, 32, generator=torch.Generator().manual_seed(length))
    with torch.no_grad():
        got = fast(h.to(device), last_only=last_only).cpu()
        want = ref(h.double(), last_only=last_only)
    assert (fused, len(gated), len(conv)) == ([programs == "head"], 0, 0)
    err = _rel(got, want)
    assert err < TOL[torch.float32], f"relative error {err:.2e}"


def test_the_conv_stays_outside_the_scan_under_autograd_with_torch_and_on_cpu(monkeypatch):
    # with autograd the conv with a backward runs; "auto" never takes the kernel on CPU;
    # "torch" keeps the conv apart from the gated scan, which still runs
    if torch.cuda.is_available():
        pytest.skip("interpreter test (CPU): the CPU blocks' kernels need Triton's interpreter")
    fused = count_calls(monkeypatch, ssd_window_conv_triton, "ssd_window_gated_conv")
    gated = count_calls(monkeypatch, ssd_window_triton, "ssd_window_gated")
    h = torch.randn(2, 24, 32, generator=torch.Generator().manual_seed(3))
    insist, ref = _blocks(24, "cpu", scan_conv="triton")
    out = insist(h)
    out.sum().backward()
    assert not fused and insist.mixer.conv_weight.grad is not None
    torch.testing.assert_close(out.double(), ref(h.double()), rtol=1e-4, atol=1e-5)
    block, _ = _blocks(24, "cpu", scan_conv="auto", scan_gate="auto")
    with torch.no_grad():
        block(h)
    assert not fused and not gated
    block, _ = _blocks(24, "cpu", scan_conv="torch")
    with torch.no_grad():
        block(h)
    assert not fused and len(gated) == 1


def test_scan_conv_takes_only_its_choices():
    with pytest.raises(ValueError, match="scan_conv"):
        EncoderConfig(scan_conv="kernel")
    with pytest.raises(ValueError, match="scan_conv_programs"):
        EncoderConfig(scan_conv_programs="row")
    with pytest.raises(ValueError, match="scan_conv_warps"):
        EncoderConfig(scan_conv_warps=0)


@pytest.mark.gpu
@pytest.mark.parametrize("last_only", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,length,heads,headdim,d_state", SHAPES)
def test_compiled_scan_with_the_conv_matches_float64_on_the_gpu(batch, length, heads,
                                                                headdim, d_state, dtype,
                                                                last_only, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    monkeypatch.setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee")
    cpu = _inputs(batch, length, heads, headdim, d_state, dtype, last_only, length,
                  ROW_PADS[-1], WIDTHS[0])
    gw, ss = ssd_window_conv_triton.ssd_window_gated_conv(*(t.cuda() for t in cpu), headdim,
                                                          d_state, last_only=last_only)
    pre, dt_raw, conv_w, conv_b, dt_bias, A, D, z, weight = cpu
    xbc, dt = _float64_conv_dt(pre, dt_raw, conv_w, conv_b, dt_bias)
    want_gw, want_ss, _ = _float64_gate(xbc, dt, A, D, z, weight, heads, headdim, d_state,
                                        last_only)
    for name, got, want in (("g w", gw, want_gw), ("ss", ss, want_ss)):
        err = _rel(got.cpu(), want)
        assert err < TOL[dtype], f"{name}: relative error {err:.2e}"


@pytest.mark.gpu
def test_compiled_block_with_the_conv_in_the_scan_tracks_the_pytorch_block_under_autocast(
        monkeypatch):
    # "auto" on CUDA, compiled, bf16: no further off float64 than the block with the conv
    # kernel and PyTorch's softplus before the gated scan
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    fused = count_calls(monkeypatch, ssd_window_conv_triton, "ssd_window_gated_conv")
    fast, ref = _blocks(64, "cuda", scan_conv="auto", scan_gate="auto")
    plain = Mamba2Block(dataclasses.replace(fast.mixer.cfg, scan_conv="torch")).cuda()
    plain.load_state_dict(fast.state_dict())
    h = torch.randn(4, 64, 32, generator=torch.Generator().manual_seed(4))
    errors, calls = {}, {}
    with torch.no_grad():
        want = ref(h.double())
        for name, block in (("kernel", fast), ("conv apart", plain)):
            before = len(fused)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                got = torch.compile(block, fullgraph=True)(h.cuda())
            errors[name] = _rel(got.cpu(), want)
            calls[name] = len(fused) - before  # traced by torch.compile: the wrapper ran
    print(errors, calls)
    assert calls["kernel"] >= 1 and calls["conv apart"] == 0, calls
    assert errors["kernel"] < max(TOL[torch.bfloat16], 2.0 * errors["conv apart"]), errors


#: relative difference allowed between the kernel and the conv kernel + gated scan in bf16
#: on the GPU: both round the conv's outputs to bf16 the same way, so they differ only where
#: sums in another order round to another bf16 (H200: g w 8.5e-5 and ss 1.1e-4 over every
#: row, 0 and 1.3e-10 for the last row; twenty-fifth session)
SAME_ROUTE_TOL = 5e-4


@pytest.mark.gpu
@pytest.mark.parametrize("last_only", [False, True])
def test_scan_with_the_conv_equals_the_conv_kernel_then_the_gated_scan_on_the_gpu(last_only):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pre, dt_raw, conv_w, conv_b, dt_bias, A, D, z, weight = (
        t.cuda() for t in _inputs(64, 64, 4, 64, 64, torch.bfloat16, last_only, 7,
                                  ROW_PADS[-1], WIDTHS[0]))
    fused = ssd_window_conv_triton.ssd_window_gated_conv(
        pre, dt_raw, conv_w, conv_b, dt_bias, A, D, z, weight, 64, 64, last_only=last_only)
    xbc = conv_triton.conv_silu(pre, conv_w, conv_b)
    dt = torch.nn.functional.softplus(dt_raw + dt_bias)
    apart = ssd_window_triton.ssd_window_gated(xbc, dt, A, D, z, weight, 64, 64,
                                               last_only=last_only)
    errors = {name: _rel(got, want.double()) for name, got, want in
              zip(("g w", "ss"), fused, apart)}
    print(errors)
    for name, err in errors.items():
        assert err < SAME_ROUTE_TOL, f"{name}: relative difference {err:.2e}"
