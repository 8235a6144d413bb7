"""The agent's heads as one merged, aligned product (AgentNetwork.heads / q_logits) against
a float64 reference that applies each layer on its own, from the raw parameters."""

from __future__ import annotations

import pytest
import torch

from lobsurf.agent import network
from lobsurf.agent.config import NetworkConfig
from lobsurf.agent.network import AgentNetwork
from lobsurf.agent.noisy import resample_noise_
from lobsurf.data.labels import LabelConfig
from lobsurf.models import align
from lobsurf.models.config import EncoderConfig
from lobsurf.models.features import FeatureConfig

ACTIONS = 5


def _net(hidden: int = 0) -> AgentNetwork:
    torch.manual_seed(0)
    net = AgentNetwork(FeatureConfig(), EncoderConfig(d_model=16, n_layers=1, d_state=8,
                                                      headdim=8, chunk_size=8),
                       NetworkConfig(q_hidden=13, num_atoms=7), LabelConfig(), ACTIONS)
    if hidden:  # auxiliary heads with a hidden layer (pretraining's option)
        from lobsurf.models.heads import DirectionHead, FRDHead, HeadConfig, OutcomeHead

        cfg = HeadConfig(hidden=hidden)
        labels = LabelConfig()
        net.frd = FRDHead(16, labels.num_horizons, labels.num_buckets, cfg)
        net.direction = DirectionHead(16, labels.num_horizons, cfg)
        net.outcome = OutcomeHead(16, cfg)
    net = net.double()
    resample_noise_(net, torch.Generator().manual_seed(1))
    return net


def _linear(x, w, b):
    return x @ w.T + b


def _noisy(layer):
    return (layer.weight_mu + layer.weight_sigma * layer.eps_out[:, None] * layer.eps_in[None, :],
            layer.bias_mu + layer.bias_sigma * layer.eps_out)


def _aux(net_seq, h):
    # an auxiliary head's own layers, one at a time (Linear, or Linear -> SiLU -> Linear)
    if isinstance(net_seq, torch.nn.Linear):
        return _linear(h, net_seq.weight, net_seq.bias)
    first, last = net_seq[0], net_seq[2]
    a = _linear(h, first.weight, first.bias)
    return _linear(a * torch.sigmoid(a), last.weight, last.bias)


def reference_heads(net: AgentNetwork, h: torch.Tensor, s: torch.Tensor) -> tuple:
    """Every head layer by layer (no merged product, no padding, no module forward)."""
    hs = torch.cat((h, s), dim=-1)
    q = _linear(torch.relu(_linear(hs, *_noisy(net.q_hidden))), *_noisy(net.q_out))
    q = q.reshape(h.shape[0], ACTIONS, -1)
    labels = LabelConfig()
    frd = _aux(net.frd.net, h).reshape(h.shape[0], labels.num_horizons, labels.num_buckets)
    return (q, _linear(hs, net.pi.weight, net.pi.bias),
            _linear(hs, net.value.weight, net.value.bias)[:, 0], frd,
            _aux(net.direction.net, h), _aux(net.outcome.net, h))


@pytest.mark.parametrize("hidden", [0, 6])
@pytest.mark.parametrize("aligned", [False, True])
def test_merged_heads_equal_each_layer_alone(monkeypatch, hidden, aligned):
    net = _net(hidden)
    if aligned:  # the CUDA padding, forced on the CPU (as under bf16 autocast)
        monkeypatch.setattr(network, "device_multiple",
                            lambda x: align.elements_per_alignment(torch.bfloat16))
    g = torch.Generator().manual_seed(2)
    h = torch.randn(9, 16, generator=g, dtype=torch.float64, requires_grad=True)
    s = torch.randn(9, 3, generator=g, dtype=torch.float64, requires_grad=True)
    params = [p for p in net.parameters() if p.requires_grad]
    got = tuple(net.heads(h, s))
    want = reference_heads(net, h, s)
    weights = [torch.randn(w.shape, generator=g, dtype=torch.float64) for w in want]

    def grads(outputs):
        loss = sum((o * w).sum() for o, w in zip(outputs, weights))
        return torch.autograd.grad(loss, [h, s] + params, allow_unused=True)

    for a, b in zip(got, want):
        assert a.shape == b.shape and torch.allclose(a, b, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads(got), grads(want)):
        if b is None:  # a parameter no head uses (the encoder's)
            assert a is None or torch.count_nonzero(a) == 0
            continue
        assert a is not None and torch.allclose(a, b, rtol=1e-11, atol=1e-12)
    q_only = net.q_logits(h, s)
    assert torch.allclose(q_only, want[0], rtol=1e-12, atol=1e-12)


def test_the_aligned_product_has_aligned_widths(monkeypatch):
    """On CUDA in bf16 the merged product and Q's output layer get widths of whole 16-byte
    rows (the default heads: 131 inputs, 11 x 21 = 231 Q outputs)."""
    net = AgentNetwork(FeatureConfig(), EncoderConfig(), NetworkConfig(), LabelConfig(), 11)
    widths = []

    def spy(x, weight, bias, multiple):
        out = align.linear_aligned(x, weight, bias, multiple)
        widths.append((x.shape[-1], weight.shape[0], multiple))
        return out

    monkeypatch.setattr(network, "linear_aligned", spy)
    monkeypatch.setattr(network, "device_multiple",
                        lambda x: align.elements_per_alignment(torch.bfloat16))
    net.heads(torch.randn(4, 128), torch.randn(4, 3))
    assert widths[0][:2] == (131, 256 + 11 + 1 + net.frd.first.out_features
                             + net.direction.first.out_features + net.outcome.first.out_features)
    assert widths[1][:2] == (256, 231)
    assert all(m == 8 for _, _, m in widths)


@pytest.mark.parametrize("rows", [231, 232, 3])
@pytest.mark.parametrize("cols", [131, 128])
def test_linear_aligned_is_the_same_product(rows, cols):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, cols, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(rows, cols, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(rows, generator=g, dtype=torch.float64, requires_grad=True)
    out = align.linear_aligned(x, w, b, 8)
    ref = x @ w.T + b
    assert out.shape == ref.shape and torch.allclose(out, ref, rtol=1e-12, atol=1e-12)
    up = torch.randn(ref.shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad((out * up).sum(), [x, w, b])
    want = torch.autograd.grad((ref * up).sum(), [x, w, b])
    for a, r in zip(got, want):
        assert a.shape == r.shape and torch.allclose(a, r, rtol=1e-12, atol=1e-12)
