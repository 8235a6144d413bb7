"""The noisy layers' resampling against a numpy reference of factorised Gaussian noise."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from lobsurf.agent.noisy import NoisyLinear, resample_noise_


def _nets() -> list[nn.Module]:
    torch.manual_seed(0)
    return [nn.Sequential(NoisyLinear(5, 7, 0.5), nn.ReLU(), NoisyLinear(7, 3, 0.5)),
            nn.Sequential(NoisyLinear(4, 2, 0.5))]


def test_resampling_fills_each_buffer_with_f_of_its_share_of_one_draw() -> None:
    nets = _nets()
    gen = torch.Generator().manual_seed(3)
    twin = torch.Generator().manual_seed(3)
    resample_noise_(nets, gen)
    layers = [m for net in nets for m in net.modules() if isinstance(m, NoisyLinear)]
    sizes = [n for m in layers for n in (m.in_features, m.out_features)]
    # the reference: one draw of standard normals, laid end to end in module order
    # (eps_in then eps_out per layer), each mapped through f(e) = sign(e) sqrt(|e|)
    e = torch.empty(sum(sizes)).normal_(generator=twin).double().numpy()
    want = np.sign(e) * np.sqrt(np.abs(e))
    got = np.concatenate([t.double().numpy() for m in layers for t in (m.eps_in, m.eps_out)])
    np.testing.assert_allclose(got, want, rtol=2.5e-7, atol=0)  # float32 sqrt: within an ulp
    assert torch.equal(gen.get_state(), twin.get_state())


def test_forward_uses_the_factorised_noise() -> None:
    layer = _nets()[0][0]
    resample_noise_(layer, torch.Generator().manual_seed(1))
    x = torch.randn(4, 5)
    w = (layer.weight_mu + layer.weight_sigma * torch.outer(layer.eps_out, layer.eps_in))
    b = layer.bias_mu + layer.bias_sigma * layer.eps_out
    torch.testing.assert_close(layer(x), x @ w.T + b)
    before = layer.eps_in.clone()
    resample_noise_(layer, torch.Generator().manual_seed(2))
    assert not torch.equal(before, layer.eps_in)  # fresh noise, in the same buffer
