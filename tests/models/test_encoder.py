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


def test_conv_auto_keeps_pytorch_on_the_cpu_and_the_conv_kernels_match_it(monkeypatch) -> None:
    # conv_backend "auto": the kernels only for CUDA tensors; "triton_dpre", "triton_fwd" and
    # "triton_dx" insist (here in Triton's interpreter) and give PyTorch's outputs and
    # gradients, with and without autograd
    pytest.importorskip("triton", reason="the conv kernels need Triton")
    from lobsurf.models.kernels import conv_dt_triton, conv_triton
    from lobsurf.models.mamba2 import Mamba2Block

    small = dict(d_model=16, d_state=16, headdim=16, chunk_size=16, ssd_backend="torch")
    torch.manual_seed(3)
    names = ("torch", "auto", "triton_dpre", "triton_fwd", "triton_dx")
    blocks = {name: Mamba2Block(EncoderConfig(**small, conv_backend=name)) for name in names}
    for block in blocks.values():
        block.load_state_dict(blocks["torch"].state_dict())
    h = torch.randn(2, 12, 16)
    calls = {"dpre": [], "kernels": [], "dx": []}
    real = {"dpre": conv_triton.conv_silu_dpre, "kernels": conv_triton.conv_silu_fwd_dpre,
            "dx": conv_dt_triton.conv_dt, "dx_z": conv_dt_triton.conv_dt_z}
    # "triton_dx" takes conv_dt_z (encoder.one_in_projection) or conv_dt
    monkeypatch.setattr(conv_dt_triton, "conv_dt",
                        lambda *a: calls["dx"].append(1) or real["dx"](*a))
    monkeypatch.setattr(conv_dt_triton, "conv_dt_z",
                        lambda *a: calls["dx"].append(1) or real["dx_z"](*a))
    monkeypatch.setattr(conv_triton, "conv_silu_dpre",
                        lambda *a: calls["dpre"].append(1) or real["dpre"](*a))
    monkeypatch.setattr(conv_triton, "conv_silu_fwd_dpre",
                        lambda *a: calls["kernels"].append(1) or real["kernels"](*a))
    launches = []
    real_fwd = conv_triton._conv_silu_op
    monkeypatch.setattr(conv_triton, "_conv_silu_op",
                        lambda *a: launches.append(1) or real_fwd(*a))
    grads, no_grad = {}, {}
    for name, block in blocks.items():
        before = {k: len(v) for k, v in calls.items()}
        block(h).square().sum().backward()
        grads[name] = [p.grad for p in block.parameters()]
        assert (len(calls["dpre"]) > before["dpre"]) == (name == "triton_dpre"), name
        assert (len(calls["kernels"]) > before["kernels"]) == (name == "triton_fwd"), name
        assert (len(calls["dx"]) > before["dx"]) == (name == "triton_dx"), name
        before_launches = len(launches)
        with torch.no_grad():
            no_grad[name] = block(h)
        # without autograd "triton_fwd" and "triton_dx" run the forward kernel alone
        assert (len(launches) > before_launches) == (name in ("triton_fwd", "triton_dx")), name
    for name in names[1:]:
        for a, b in zip(grads[name], grads["torch"]):
            # fp32 sums in another order: ~1e-6 of the tensor's largest entry apart
            atol = 1e-6 * (1.0 + b.abs().max())
            assert torch.allclose(a, b, rtol=1e-4, atol=atol), name
        assert torch.allclose(no_grad[name], no_grad["torch"], rtol=1e-4, atol=1e-6), name


def test_conv_triton_dpre_refuses_a_conv_wider_than_its_kernel_holds() -> None:
    # the d pre kernel keeps the last W-1 inputs in named registers (W <= DPRE_MAX_WIDTH):
    # a wider conv is an error with "triton_dpre", never a silently wrong gradient
    pytest.importorskip("triton", reason="the d pre kernel needs Triton")
    from lobsurf.models.kernels import conv_triton
    from lobsurf.models.mamba2 import Mamba2Block

    wide = conv_triton.DPRE_MAX_WIDTH + 1
    block = Mamba2Block(EncoderConfig(d_model=16, d_state=16, headdim=16, chunk_size=16,
                                      ssd_backend="torch", conv_backend="triton_dpre",
                                      d_conv=wide))
    with pytest.raises(RuntimeError, match=f"d_conv <= {conv_triton.DPRE_MAX_WIDTH}"):
        block(torch.randn(2, 12, 16))
    block.mixer.cfg = EncoderConfig(**{**block.mixer.cfg.__dict__, "conv_backend": "triton_fwd"})
    with pytest.raises(RuntimeError, match="conv_backend='triton_fwd'"):
        block(torch.randn(2, 12, 16))
    x, dout = torch.randn(2, 12, 8), torch.randn(2, 12, 8)
    with pytest.raises(ValueError, match="taps"):
        conv_triton._conv_dpre_op(dout, x, torch.randn(wide, 8), torch.randn(8))


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
