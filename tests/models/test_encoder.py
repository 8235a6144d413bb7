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
@pytest.mark.parametrize("append", [False, True])
def test_output_contract_and_last_only(kind: str, append: bool) -> None:
    enc = _encoder(kind, append_log_dt=append)
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
    # CfC reads the gaps; Mamba2 ignores them unless append_log_dt is set.
    x, log_dt = torch.randn(2, 12, F_IN), torch.randn(2, 12)
    for kind, append, changes in [("cfc", False, True), ("mamba2", False, False),
                                  ("mamba2", True, True)]:
        enc = _encoder(kind, append_log_dt=append)
        with torch.no_grad():
            diff = (enc(x, log_dt).last - enc(x, log_dt + 1.0).last).abs().max().item()
        assert (diff > 1e-4) == changes, (kind, append, diff)


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


def test_kernel_backends_validated_and_default_to_pytorch_on_the_cpu() -> None:
    # ssd_backend "auto": the one-chunk Triton scan on CUDA, the PyTorch scan here
    cfg = EncoderConfig()
    assert cfg.ssd_backend == "auto" and cfg.conv_backend == "auto"
    with pytest.raises(ValueError):
        EncoderConfig(ssd_backend="cuda")
    with pytest.raises(ValueError):
        EncoderConfig(conv_backend="cuda")
    # The Triton kernels need CUDA tensors: asking for them on the CPU fails loudly instead
    # of silently running the PyTorch path.
    for field in ("ssd_backend", "conv_backend"):
        enc = Encoder(EncoderConfig(d_model=16, n_layers=1, d_state=16, headdim=16,
                                    chunk_size=16, **{field: "triton"}), in_features=F_IN)
        with pytest.raises(RuntimeError, match="triton"):
            enc(torch.randn(2, 8, F_IN), torch.randn(2, 8))


def test_conv_auto_keeps_pytorch_on_the_cpu_and_triton_dpre_matches_it(monkeypatch) -> None:
    # conv_backend "auto": the d pre kernel only for CUDA tensors; "triton_dpre" insists
    # (here in Triton's interpreter) and gives PyTorch's gradients
    pytest.importorskip("triton", reason="the d pre kernel needs Triton")
    from lobsurf.models import conv_triton
    from lobsurf.models.mamba2 import Mamba2Block

    small = dict(d_model=16, d_state=16, headdim=16, chunk_size=16, ssd_backend="torch")
    torch.manual_seed(3)
    blocks = {name: Mamba2Block(EncoderConfig(**small, conv_backend=name))
              for name in ("torch", "auto", "triton_dpre")}
    for block in blocks.values():
        block.load_state_dict(blocks["torch"].state_dict())
    h = torch.randn(2, 12, 16)
    calls = []
    real = conv_triton.conv_silu_dpre
    monkeypatch.setattr(conv_triton, "conv_silu_dpre", lambda *a: calls.append(1) or real(*a))
    grads = {}
    for name, block in blocks.items():
        before = len(calls)
        block(h).square().sum().backward()
        grads[name] = [p.grad for p in block.parameters()]
        assert (len(calls) > before) == (name == "triton_dpre"), name
    for name in ("auto", "triton_dpre"):
        for a, b in zip(grads[name], grads["torch"]):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), name


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
