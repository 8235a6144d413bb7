"""C51 projection against a float64 numpy reference written as Bellemare et al.'s
Algorithm 1 (floor/ceil split of each target atom: a different algorithm from the dense
clip(1 - |Tz - z|/dz) form under test)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lobsurf.agent.distributional import categorical_cross_entropy, project_categorical, support


def projection_reference(p, r, done, gamma, v_min, v_max):
    """Algorithm 1 of Bellemare et al. 2017, one row and one atom at a time, float64."""
    b_rows, n = p.shape
    dz = (v_max - v_min) / (n - 1)
    z = v_min + dz * np.arange(n)
    out = np.zeros((b_rows, n))
    for b in range(b_rows):
        for j in range(n):
            tz = min(max(r[b] + (0.0 if done[b] else gamma) * z[j], v_min), v_max)
            pos = (tz - v_min) / dz
            lo, hi = int(np.floor(pos)), int(np.ceil(pos))
            if lo == hi:
                out[b, lo] += p[b, j]
            else:
                out[b, lo] += p[b, j] * (hi - pos)
                out[b, hi] += p[b, j] * (pos - lo)
    return out


@pytest.mark.parametrize("v_min,v_max", [(-1.0, 1.0), (-3.0, 1.0), (-1.7, 1.3)])
def test_projection_matches_algorithm_1(v_min, v_max):
    rng = np.random.default_rng(0)
    b, n = 64, 21
    p = rng.dirichlet(np.ones(n), size=b)
    # rewards well inside, on the edges and far outside the span; half the rows terminal
    r = np.concatenate([rng.uniform(-0.5, 0.5, 32), [v_min, v_max, -50.0, 50.0],
                        rng.uniform(-6, 6, 28)])
    done = rng.random(b) < 0.5
    gamma = 0.97
    z = support(torch.tensor(v_min, dtype=torch.float64), torch.tensor(v_max, dtype=torch.float64), n)
    got = project_categorical(torch.tensor(p, dtype=torch.float32), torch.tensor(r),
                              torch.tensor(done), gamma, z)
    want = projection_reference(p, r, done, gamma, v_min, v_max)
    print("max abs diff", np.abs(got.double().numpy() - want).max())
    np.testing.assert_allclose(got.double().numpy(), want, atol=2e-6)
    np.testing.assert_allclose(got.sum(-1).numpy(), 1.0, atol=1e-5)


def test_moving_span_changes_the_projection():
    # the same target projected on [-1, 1] and on a span that has moved toward [-3, 1]
    p = torch.full((1, 21), 1 / 21)
    r, done = torch.tensor([-0.8]), torch.tensor([True])
    for lo in (-1.0, -2.2):
        z = support(torch.tensor(lo), torch.tensor(1.0), 21)
        got = project_categorical(p, r, done, 0.99, z)
        want = projection_reference(p.double().numpy(), r.numpy(), done.numpy(), 0.99, lo, 1.0)
        np.testing.assert_allclose(got.double().numpy(), want, atol=1e-6)
    assert support(torch.tensor(-2.2), torch.tensor(1.0), 21)[0] == pytest.approx(-2.2)


def test_identity_when_target_is_the_support():
    z = support(torch.tensor(-1.0), torch.tensor(1.0), 11)
    p = torch.softmax(torch.randn(5, 11), -1)
    got = project_categorical(p, torch.zeros(5), torch.zeros(5, dtype=torch.bool), 1.0, z)
    torch.testing.assert_close(got, p, atol=1e-6, rtol=0)


def test_cross_entropy_is_minimal_at_the_target():
    target = torch.softmax(torch.randn(3, 21), -1)
    at_target = categorical_cross_entropy(target.log(), target)
    elsewhere = categorical_cross_entropy(torch.zeros(3, 21), target)
    assert (at_target < elsewhere).all()
    entropy = -(target * target.log()).sum(-1)
    torch.testing.assert_close(at_target, entropy)
