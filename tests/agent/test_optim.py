"""TensorAdam, multi-tensor and fused, against a float64 numpy Adam written out here."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lobsurf.agent.optim import TensorAdam

BETAS, EPS = (0.9, 0.999), 1e-8
#: steps run; the learning rate is lowered in place (as a rollback does) after LOWER_AT
STEPS, LOWER_AT, LR, LOWER = 12, 6, 1e-2, 0.5
#: fp32 arithmetic against float64, relative to the largest change of the parameters
TOL = 1e-5


#: gradient divisors per step (a clip's factor), 1 = no clip
DIVISORS = [1.0, 3.0, 1.0, 1.0, 7.5, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0, 1.25]


def _numpy_adam(params: list[np.ndarray], grads: list[list[np.ndarray]],
                divisors: list[float] | None = None) -> list[np.ndarray]:
    b1, b2 = BETAS
    divisors = divisors or [1.0] * STEPS
    p = [x.astype(np.float64) for x in params]
    m = [np.zeros_like(x) for x in p]
    v = [np.zeros_like(x) for x in p]
    for t in range(1, STEPS + 1):
        lr = LR * (LOWER if t > LOWER_AT else 1.0)
        for i, g in enumerate(grads[t - 1]):
            g = g / divisors[t - 1]
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            m_hat, v_hat = m[i] / (1 - b1 ** t), v[i] / (1 - b2 ** t)
            p[i] = p[i] - lr * m_hat / (np.sqrt(v_hat) + EPS)
    return p


def _grads(shapes, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    # some gradients tiny, so eps and the bias corrections matter
    return [[rng.standard_normal(s) * rng.choice([1.0, 1e-6]) for s in shapes]
            for _ in range(STEPS)]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("clipped", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_adam_matches_numpy_reference(fused, clipped, device) -> None:
    shapes = [(7, 5), (5,), (3, 2, 4)]
    rng = np.random.default_rng(0)
    start = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = _grads(shapes, 1)
    params = [torch.nn.Parameter(torch.from_numpy(x.copy()).to(device)) for x in start]
    opt = TensorAdam(params, lr=LR, betas=BETAS, eps=EPS, fused=fused)
    for t in range(STEPS):
        if t == LOWER_AT:
            opt.lr.mul_(LOWER)
        for p, g in zip(params, grads[t]):
            p.grad = torch.from_numpy(g.astype(np.float32)).to(device)
        divisor = torch.tensor(DIVISORS[t], device=device) if clipped else None
        opt.step(grad_divisor=divisor)
        if clipped:  # the divided gradients stay, on both paths
            for p, g in zip(params, grads[t]):
                np.testing.assert_allclose(p.grad.cpu().numpy(), g / DIVISORS[t], rtol=1e-6)
    want = _numpy_adam(start, grads, DIVISORS if clipped else None)
    scale = max(np.abs(w - s).max() for w, s in zip(want, start))
    for p, w in zip(params, want):
        assert np.abs(p.detach().double().cpu().numpy() - w).max() < TOL * scale
    assert float(opt.step_count) == STEPS


def test_fused_and_multi_tensor_adam_agree_on_a_network() -> None:
    torch.manual_seed(0)
    nets = [torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
            for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    opts = [TensorAdam(n.parameters(), lr=1e-2, fused=f) for n, f in zip(nets, (False, True))]
    x = torch.randn(16, 6)
    for _ in range(20):
        for net, opt in zip(nets, opts):
            opt.zero_grad()
            net(x).square().mean().backward()
            opt.step()
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
