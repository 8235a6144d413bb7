"""TensorAdam over flat buffers (with and without its Polyak step) against a float64 numpy
Adam and Polyak written out here."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lobsurf.agent.flat import flatten_parameters_
from lobsurf.agent.optim import TensorAdam, flat_adam_

BETAS, EPS = (0.9, 0.999), 1e-8
#: steps run; the learning rate is lowered in place (as a rollback does) after LOWER_AT
STEPS, LOWER_AT, LR, LOWER = 12, 6, 1e-2, 0.5
#: fp32 arithmetic against float64, relative to the largest change of the parameters
TOL = 1e-5


#: gradient divisors per step (a clip's factor), 1 = no clip
DIVISORS = [1.0, 3.0, 1.0, 1.0, 7.5, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0, 1.25]


#: Polyak rate of the flat path's target (large, so a wrong pairing shows)
TAU = 0.2


def _numpy_adam(params: list[np.ndarray], grads: list[list[np.ndarray]],
                divisors: list[float] | None = None, target: list[np.ndarray] | None = None
                ) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """(parameters, target) after STEPS steps; the target (if given) follows each step's
    new parameters by TAU."""
    b1, b2 = BETAS
    divisors = divisors or [1.0] * STEPS
    p = [x.astype(np.float64) for x in params]
    tp = None if target is None else [x.astype(np.float64) for x in target]
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
            if tp is not None:
                tp[i] = (1 - TAU) * tp[i] + TAU * p[i]
    return p, tp


def _grads(shapes, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    # some gradients tiny, so eps and the bias corrections matter
    return [[rng.standard_normal(s) * rng.choice([1.0, 1e-6]) for s in shapes]
            for _ in range(STEPS)]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("clipped", [False, True])
@pytest.mark.parametrize("path", ["flat", "flat + Polyak"])
def test_adam_matches_numpy_reference(path, clipped, device) -> None:
    shapes = [(7, 5), (5,), (3, 2, 4)]
    rng = np.random.default_rng(0)
    start = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    target_start = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = _grads(shapes, 1)
    params = [torch.nn.Parameter(torch.from_numpy(x.copy()).to(device)) for x in start]
    opt = TensorAdam(params, lr=LR, betas=BETAS, eps=EPS)
    polyak = None
    if path == "flat + Polyak":
        target = [torch.nn.Parameter(torch.from_numpy(x.copy()).to(device), requires_grad=False)
                  for x in target_start]
        polyak = (flatten_parameters_(target, with_grads=False), TAU)
    for t in range(STEPS):
        if t == LOWER_AT:
            opt.lr.mul_(LOWER)
        new = [torch.from_numpy(g.astype(np.float32)).to(device) for g in grads[t]]
        opt.flat.write_gradients_(new)  # flat gradients are written into their buffer
        divisor = torch.tensor(DIVISORS[t], device=device) if clipped else None
        opt.step(grad_divisor=divisor, polyak=polyak)
        if clipped:  # the divided gradients stay
            for p, g in zip(params, grads[t]):
                np.testing.assert_allclose(p.grad.cpu().numpy(), g / DIVISORS[t], rtol=1e-6)
    want, want_target = _numpy_adam(start, grads, DIVISORS if clipped else None,
                                     target_start if polyak else None)
    scale = max(np.abs(w - s).max() for w, s in zip(want, start))
    for p, w in zip(params, want):
        assert np.abs(p.detach().double().cpu().numpy() - w).max() < TOL * scale
    if polyak is not None:
        for p, w in zip(target, want_target):
            assert np.abs(p.detach().double().cpu().numpy() - w).max() < TOL * scale
    # the gaps between segments stay zero
    for buffer in (opt.flat.data, opt.flat.grad, opt.exp_avg_flat, opt.exp_avg_sq_flat):
        assert float(buffer.abs().sum()) == pytest.approx(
            sum(float(v.abs().sum()) for v in opt.flat.views(buffer)), rel=1e-6)
    assert float(opt.step_count) == STEPS


def test_compiled_flat_adam_writes_its_buffers_like_eager() -> None:
    # flat_adam_ writes its 1-d inputs in place; compiled by Inductor (CPU) the writes must
    # land as eagerly (torch drops in-place writes to 0-d CPU inputs: the step count is
    # returned instead, and must come back advanced)
    compiled = torch.compile(flat_adam_, backend="inductor", fullgraph=True)
    results = []
    for fn in (flat_adam_, compiled):
        gen = torch.Generator().manual_seed(3)
        p, g, m, target = (torch.randn(300, generator=gen) for _ in range(4))
        v = torch.rand(300, generator=gen)
        count = fn(p, g, m, v, torch.tensor(4.0), torch.tensor(1e-2), torch.tensor(2.0),
                   target, *BETAS, EPS, TAU)
        results.append((p, g, m, v, target, count))
    for eager, comp in zip(*results):
        torch.testing.assert_close(comp, eager, rtol=1e-6, atol=1e-7)
    assert float(results[1][-1]) == 5.0
