"""Heads' shapes, losses against float64 loops, and batch-size-independent gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lobsurf.models.heads import (
    DirectionHead,
    FRDHead,
    HeadConfig,
    OutcomeHead,
    direction_loss,
    direction_loss_per_horizon,
    frd_loss,
    frd_loss_per_horizon,
    masked_mean,
    outcome_loss,
)

D, H, C = 8, 3, 5


def _batch(b: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return dict(
        h=torch.randn(b, D, generator=g),
        direction=(torch.rand(b, H, generator=g) > 0.5).float(),
        direction_valid=torch.rand(b, H, generator=g) > 0.3,
        bucket=torch.randint(0, C, (b, H), generator=g),
        bucket_valid=torch.rand(b, H, generator=g) > 0.2,
    )


@pytest.mark.parametrize("hidden", [0, 16])
def test_head_shapes(hidden: int) -> None:
    cfg = HeadConfig(hidden=hidden)
    h2, h3 = torch.randn(4, D), torch.randn(4, 7, D)
    assert DirectionHead(D, H, cfg)(h2).shape == (4, H)
    assert DirectionHead(D, H, cfg)(h3).shape == (4, 7, H)
    assert FRDHead(D, H, C, cfg)(h2).shape == (4, H, C)
    assert FRDHead(D, H, C, cfg)(h3).shape == (4, 7, H, C)
    assert OutcomeHead(D, cfg)(h2).shape == (4, 2)


def test_losses_match_float64_loops() -> None:
    b = _batch(50, 0)
    g = torch.Generator().manual_seed(3)
    dl, fl = torch.randn(50, H, generator=g), torch.randn(50, H, C, generator=g)
    got_d = direction_loss_per_horizon(dl, b["direction"], b["direction_valid"]).numpy()
    got_f = frd_loss_per_horizon(fl, b["bucket"], b["bucket_valid"]).numpy()
    for j in range(H):
        d_terms, f_terms = [], []
        for i in range(50):
            x, y = float(dl[i, j]), float(b["direction"][i, j])
            p = 1 / (1 + math.exp(-x))
            if b["direction_valid"][i, j]:
                d_terms.append(-(y * math.log(p) + (1 - y) * math.log(1 - p)))
            if b["bucket_valid"][i, j]:
                z = fl[i, j].double().numpy()
                logp = z - np.log(np.exp(z).sum())
                f_terms.append(-logp[int(b["bucket"][i, j])])
        assert got_d[j] == pytest.approx(np.mean(d_terms), rel=1e-5)
        assert got_f[j] == pytest.approx(np.mean(f_terms), rel=1e-5)
    assert float(direction_loss(dl, b["direction"], b["direction_valid"])) == \
        pytest.approx(got_d.mean(), rel=1e-6)
    assert float(frd_loss(fl, b["bucket"], b["bucket_valid"])) == pytest.approx(got_f.mean(), rel=1e-6)


def test_outcome_loss_and_empty_masks() -> None:
    logits = torch.tensor([[0.0, 2.0], [1.0, -1.0]], requires_grad=True)
    targets = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    mask = torch.tensor([[True, False], [False, True]])
    # Valid: (logit 0, y 1) → ln 2; (logit -1, y 1) → ln(1 + e).
    expected = (math.log(2) + math.log(1 + math.e)) / 2
    assert float(outcome_loss(logits, targets, mask).detach()) == pytest.approx(expected, rel=1e-6)
    none = outcome_loss(logits, targets, torch.zeros_like(mask))
    none.backward()
    assert float(none.detach()) == 0.0 and torch.isfinite(logits.grad).all()
    assert masked_mean(torch.ones(3, 2), torch.zeros(3, 2, dtype=torch.bool)).tolist() == [0, 0]


def _grads(batch: dict) -> list[torch.Tensor]:
    torch.manual_seed(0)
    trunk = nn.Linear(D, D)  # stands in for the shared encoder
    dh, fh = DirectionHead(D, H, HeadConfig()), FRDHead(D, H, C, HeadConfig())
    z = torch.tanh(trunk(batch["h"]))
    dl, fl = dh(z), fh(z)
    loss = direction_loss(dl, batch["direction"], batch["direction_valid"]) + \
        frd_loss(fl, batch["bucket"], batch["bucket_valid"])
    loss.backward()
    return [p.grad.clone() for m in (trunk, dh, fh) for p in m.parameters() if p.grad is not None]


def _repeat(batch: dict, n: int) -> dict:
    return {k: v.repeat(n, *([1] * (v.dim() - 1))) for k, v in batch.items()}


@pytest.mark.parametrize("factor", [2, 16])
def test_gradient_scale_is_batch_size_independent(factor: int) -> None:
    # The same samples repeated: the losses' gradients into the trunk are exactly the same.
    small = _batch(32, 1)
    g1, gn = _grads(small), _grads(_repeat(small, factor))
    for a, b in zip(g1, gn):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_each_valid_entry_weighs_one_over_its_horizons_count() -> None:
    # The gradient of the library losses at each logit, against the closed form of a mean
    # over each horizon's valid entries and then over the H horizons:
    #   d direction_loss / d l[i, j] = valid[i, j] (sigmoid(l) - y) / (H n_j)
    #   d frd_loss / d l[i, j, :]    = valid[i, j] (softmax(l) - onehot(bucket)) / (H n_j)
    # so no entry's weight grows with the batch (the original's summed loss scaled by B).
    b = _batch(40, 2)
    g = torch.Generator().manual_seed(4)
    dl = torch.randn(40, H, generator=g, dtype=torch.float64, requires_grad=True)
    fl = torch.randn(40, H, C, generator=g, dtype=torch.float64, requires_grad=True)
    direction_loss(dl, b["direction"], b["direction_valid"]).backward()
    frd_loss(fl, b["bucket"], b["bucket_valid"]).backward()
    with torch.no_grad():
        vd, vf = b["direction_valid"].double(), b["bucket_valid"].double()
        want_d = vd * (torch.sigmoid(dl) - b["direction"].double()) / (H * vd.sum(0))
        onehot = F.one_hot(b["bucket"], C).double()
        want_f = (vf / (H * vf.sum(0)))[..., None] * (torch.softmax(fl, -1) - onehot)
    torch.testing.assert_close(dl.grad, want_d, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(fl.grad, want_f, rtol=1e-10, atol=1e-12)


def test_gradient_norm_similar_across_independent_batches() -> None:
    # Fresh samples at B = 64 and B = 4096: gradient norms of the same order (no B factor).
    n_small = torch.linalg.vector_norm(_grads(_batch(64, 5))[0])
    n_large = torch.linalg.vector_norm(_grads(_batch(4096, 6))[0])
    assert 0.25 < float(n_large / n_small) < 4.0
