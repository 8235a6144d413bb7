"""CfC cell: vectorised-input fast path vs the literal per-step formula, causality, time gate."""

from __future__ import annotations

import math

import pytest
import torch

from lobsurf.models.cfc import (CfCBlock, CfCCell, cfc_reference, elapsed_time, lecun_tanh,
                                typical_gap_scale)
from lobsurf.models.config import EncoderConfig


def _cfg(**kw) -> EncoderConfig:
    base = dict(kind="cfc", d_model=12, cfc_backbone_units=20)
    base.update(kw)
    return EncoderConfig(**base)


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_matches_reference(layers: int, dtype: torch.dtype) -> None:
    torch.manual_seed(layers)
    cell = CfCCell(_cfg(cfc_backbone_layers=layers)).to(dtype)
    u = torch.randn(3, 17, 12, dtype=dtype)
    t = torch.rand(3, 17, dtype=dtype) * 3.0
    with torch.no_grad():
        fast, ref = cell(u, t), cfc_reference(cell, u, t)
    err = ((fast - ref).abs().max() / ref.abs().max()).item()
    print(f"layers={layers} {dtype}: rel err {err:.2e}")
    assert fast.shape == (3, 17, 12)
    assert err < (1e-5 if dtype == torch.float32 else 1e-12)


def test_step_matches_forward() -> None:
    torch.manual_seed(0)
    cell = CfCCell(_cfg()).double()
    u, t = torch.randn(2, 9, 12, dtype=torch.float64), torch.rand(2, 9, dtype=torch.float64)
    h = torch.zeros(2, 12, dtype=torch.float64)
    with torch.no_grad():
        steps = torch.stack([cell.step(u[:, k], t[:, k], h) for k in range(9)], dim=1)
        full = cell(u, t)
    assert (steps - full).abs().max() < 1e-12 and (h - full[:, -1]).abs().max() < 1e-12


def test_explicit_formula_with_constant_heads() -> None:
    # Zero weights leave only biases: h = tanh(a)(1 - s) + s tanh(c), s = sigmoid(alpha t + beta),
    # so the output depends on the elapsed time exactly as Eq. 10 says.
    cell = CfCCell(_cfg(d_model=1, cfc_backbone_units=2)).double()
    a, c, alpha, beta = 0.7, -1.2, 2.0, -0.5
    with torch.no_grad():
        for p in cell.parameters():
            p.zero_()
        cell.heads.bias.copy_(torch.tensor([a, c, alpha, beta], dtype=torch.float64))
    times = torch.tensor([[0.0, 0.5, 3.0]], dtype=torch.float64)
    out = cell(torch.zeros(1, 3, 1, dtype=torch.float64), times)[0, :, 0]
    for k, t in enumerate(times[0].tolist()):
        s = 1.0 / (1.0 + math.exp(-(alpha * t + beta)))
        assert out[k].item() == pytest.approx(math.tanh(a) * (1 - s) + s * math.tanh(c), abs=1e-14)
    assert lecun_tanh(torch.tensor(1.0)).item() == pytest.approx(1.7159 * math.tanh(0.666))


def test_causal_output_ignores_future_inputs() -> None:
    torch.manual_seed(1)
    block = CfCBlock(_cfg())
    u, t = torch.randn(2, 15, 12), torch.rand(2, 15)
    cut = 8
    u2, t2 = u.clone(), t.clone()
    u2[:, cut + 1:] = torch.randn(2, 15 - cut - 1, 12)
    t2[:, cut + 1:] = 5.0
    with torch.no_grad():
        a, b = block(u, t), block(u2, t2)
    assert torch.equal(a[:, :cut + 1], b[:, :cut + 1])
    assert (a[:, cut + 1:] - b[:, cut + 1:]).abs().max() > 1e-3  # the future does change later


def test_elapsed_time_scale_and_clamp() -> None:
    cfg = _cfg(cfc_max_time=10.0)
    t = elapsed_time(torch.log(torch.tensor([[0.5, 1.0, 100.0]])), cfg, 2.0)
    assert torch.allclose(t, torch.tensor([[1.0, 2.0, 10.0]]))


def test_fitted_gap_scale_maps_the_median_gap_to_one() -> None:
    gaps_s = torch.tensor([2e-4, 1e-3, 5e-3, 0.4, 1e-3])  # tick-data gaps: median 1 ms
    scale = typical_gap_scale(torch.log(gaps_s))
    assert torch.isclose(scale, torch.tensor(1000.0), rtol=1e-5)
    cfg = _cfg(cfc_max_time=100.0)
    t = elapsed_time(torch.log(gaps_s)[None], cfg, scale)
    assert torch.allclose(t, torch.tensor([[0.2, 1.0, 5.0, 100.0, 1.0]]), rtol=1e-5)


def test_gradients_finite() -> None:
    torch.manual_seed(2)
    block = CfCBlock(_cfg(cfc_backbone_layers=2))
    u = torch.randn(4, 10, 12, requires_grad=True)
    block(u, torch.rand(4, 10) * 4).square().mean().backward()
    assert torch.isfinite(u.grad).all()
    for name, p in block.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
