"""Encoder: both kinds, output contract, causality, last-only path, config validation."""

from __future__ import annotations

import pytest
import torch

from lobsurf.models.encoder import Encoder, EncoderConfig, EncoderOutput

F_IN = 10


def _encoder(kind: str, **kw) -> Encoder:
    torch.manual_seed(0)
    cfg = EncoderConfig(kind=kind, d_model=16, n_layers=2, d_state=8, headdim=8, chunk_size=16,
                        cfc_backbone_units=16, **kw)
    return Encoder(cfg, in_features=F_IN)


@pytest.mark.parametrize("kind", ["mamba2", "cfc"])
def test_output_contract_and_last_only(kind: str) -> None:
    enc = _encoder(kind)
    x, log_dt = torch.randn(3, 40, F_IN), torch.randn(3, 40)
    out = enc(x, log_dt)
    assert isinstance(out, EncoderOutput)
    assert out.last.shape == (3, 16) and out.sequence.shape == (3, 40, 16)
    # sequence[:, k] is the embedding of snapshot k: the window cut after k ends with it.
    for k in (0, 17, 39):
        cut = enc(x[:, :k + 1], log_dt[:, :k + 1], return_sequence=False).last
        assert (cut - out.sequence[:, k]).abs().max().item() < 1e-5, k
    short = enc(x, log_dt, return_sequence=False)
    assert short.sequence is None
    err = (short.last - out.last).abs().max().item()
    print(f"{kind}: last-only vs full {err:.2e}")
    assert err < 1e-5


@pytest.mark.parametrize("kind", ["mamba2", "cfc"])
@pytest.mark.parametrize("k", [25, 39])
def test_causal_and_sees_its_own_snapshot(kind: str, k: int) -> None:
    # Changing snapshot k alone leaves every earlier position unchanged and changes
    # position k itself (an encoder that lagged its input by one snapshot would not);
    # with k the newest snapshot, that position is ``last``.
    enc = _encoder(kind)
    x, log_dt = torch.randn(2, 40, F_IN), torch.randn(2, 40)
    x2 = x.clone()
    x2[:, k] += 1.0
    with torch.no_grad():
        a, b = enc(x, log_dt), enc(x2, log_dt)
    assert (a.sequence[:, :k] - b.sequence[:, :k]).abs().max() < 1e-6
    assert (a.sequence[:, k] - b.sequence[:, k]).abs().max() > 1e-4
    if k == 39:
        assert (a.last - b.last).abs().max() > 1e-4


def test_log_dt_use() -> None:
    # CfC reads the gaps; Mamba2 reads only the features (which hold the log gap).
    x, log_dt = torch.randn(2, 12, F_IN), torch.randn(2, 12)
    for kind, changes in [("cfc", True), ("mamba2", False)]:
        enc = _encoder(kind)
        with torch.no_grad():
            diff = (enc(x, log_dt).last - enc(x, log_dt + 1.0).last).abs().max().item()
        assert (diff > 1e-4) == changes, (kind, diff)


@pytest.mark.parametrize("kind", ["mamba2", "cfc"])
def test_gradients_finite(kind: str) -> None:
    enc = _encoder(kind)
    out = enc(torch.randn(4, 20, F_IN), torch.randn(4, 20))
    (out.last.square().mean() + out.sequence.mean()).backward()
    for name, p in enc.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        EncoderConfig(kind="lstm")
    with pytest.raises(ValueError):
        EncoderConfig(d_model=100, headdim=64)  # E = 200 is not a multiple of 64
    with pytest.raises(ValueError):
        EncoderConfig(chunk_size=0)
    cfg = EncoderConfig()
    assert cfg.d_inner == 256 and cfg.n_heads == 4


def _kernel_calls(monkeypatch) -> list:
    # every kernel wrapper the Mamba2 mixer calls, each call recorded in one list
    from lobsurf.models.kernels import conv_dt_triton, conv_triton, ssd_window_triton

    calls: list = []
    for module, name in ((ssd_window_triton, "ssd_window"), (ssd_window_triton, "ssd_window_gated"),
                         (ssd_window_triton, "ssd_window_gated_projected"),
                         (conv_dt_triton, "conv_dt"), (conv_triton, "conv_silu")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name,
                            lambda *a, real=real, name=name: calls.append(name) or real(*a))
    return calls


def _kernel_encoder(mode: str) -> Encoder:
    # shapes the kernels take (power-of-two headdim and d_state >= 16, one-chunk windows)
    torch.manual_seed(0)
    cfg = EncoderConfig(d_model=16, n_layers=2, d_state=16, headdim=16, chunk_size=16)
    return Encoder(cfg, in_features=F_IN).use_kernels_(mode)


def test_kernels_default_to_auto_and_auto_keeps_the_cpu_on_pytorch(monkeypatch) -> None:
    # "auto" (every new block's mode) takes the kernels on CUDA only; "off" never; a mode
    # other than the three is an error; use_kernels_ sets every block of the stack
    from lobsurf.models.kernels import triton_support

    enc = Encoder(EncoderConfig(d_model=16, n_layers=2, d_state=16, headdim=16, chunk_size=16),
                  in_features=F_IN)
    assert [b.mixer.kernels for b in enc.blocks] == ["auto", "auto"]
    assert enc.use_kernels_("off") is enc
    assert [b.mixer.kernels for b in enc.blocks] == ["off", "off"]
    with pytest.raises(ValueError, match="kernels must be one of auto, off, on"):
        enc.use_kernels_("triton")
    calls = _kernel_calls(monkeypatch)
    x, log_dt = torch.randn(2, 8, F_IN), torch.randn(2, 8)
    for mode in ("auto", "off"):
        enc.use_kernels_(mode)
        enc(x, log_dt).last.sum().backward()
        with torch.no_grad():
            enc(x, log_dt, return_sequence=False)
    assert calls == []
    # "on" insists: where Triton cannot run on the tensors' device it says so, never
    # silently running the PyTorch path
    monkeypatch.setattr(triton_support, "interpreter_active", lambda: False)
    with pytest.raises(RuntimeError, match="kernels='on' needs Triton"):
        enc.use_kernels_("on")(x, log_dt)


def test_encoder_on_the_kernels_matches_the_pytorch_encoder(monkeypatch) -> None:
    # "on" (here in Triton's interpreter): the default CUDA path of the whole stack, with
    # autograd (the learner's) and without (acting, the target net), every row and the last
    pytest.importorskip("triton", reason="the kernels need Triton")
    x, log_dt = torch.randn(2, 12, F_IN), torch.randn(2, 12)
    outs, grads = {}, {}
    for mode in ("off", "on"):
        calls = _kernel_calls(monkeypatch)
        enc = _kernel_encoder(mode)
        out = enc(x, log_dt)
        (out.sequence.square().sum() + out.last.sum()).backward()
        grads[mode] = [p.grad for p in enc.parameters()]
        with torch.no_grad():
            outs[mode] = (out.sequence, enc(x, log_dt).sequence,
                          enc(x, log_dt, return_sequence=False).last)
        assert bool(calls) == (mode == "on"), calls
        monkeypatch.undo()
    assert set(calls) == {"ssd_window", "conv_dt", "conv_silu", "ssd_window_gated",
                          "ssd_window_gated_projected"}
    for a, b in zip(outs["on"], outs["off"]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for a, b in zip(grads["on"], grads["off"]):
        # fp32 sums over every row in another order: a relative error of ~1e-5 at most
        assert ((a - b).norm() / b.norm()).item() < 1e-4


def test_cfc_time_scale_is_fitted_and_checkpointed() -> None:
    from lobsurf.models.encoder import Encoder, EncoderConfig

    enc = Encoder(EncoderConfig(kind="cfc", d_model=8, n_layers=1, cfc_backbone_units=8), 3)
    assert float(enc.time_scale) == 1.0
    enc.fit_time_scale_(torch.log(torch.tensor([1e-3, 2e-3, 4e-3])))
    assert abs(float(enc.time_scale) - 500.0) < 1e-2
    again = Encoder(EncoderConfig(kind="cfc", d_model=8, n_layers=1, cfc_backbone_units=8), 3)
    again.load_state_dict(enc.state_dict())
    assert float(again.time_scale) == float(enc.time_scale)
    x, log_dt = torch.randn(2, 5, 3), torch.log(torch.full((2, 5), 2e-3))
    assert torch.equal(enc(x, log_dt).last, again(x, log_dt).last)
