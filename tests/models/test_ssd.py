"""Chunked SSD scan (ssd.py) against the step-by-step recurrence (ssd_reference.py)."""

from __future__ import annotations

import pytest
import torch

from lobsurf.models.ssd import ssd_chunked, ssd_final_state, ssd_step
from lobsurf.models.ssd_reference import ssd_recurrent

# (length L, chunk Q): one chunk, L < Q, L not a multiple of Q, exact multiples, L = 1.
SHAPES = [(64, 64), (5, 64), (1, 16), (37, 16), (48, 16), (100, 32), (130, 64)]
TOL = {torch.float32: 1e-4, torch.float64: 1e-10}


def _inputs(length: int, dtype: torch.dtype, seed: int, decay_scale: float = 1.0,
            batch: int = 2, heads: int = 3, headdim: int = 8, d_state: int = 16):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, heads, headdim, generator=g, dtype=dtype)
    # dt in about [0.02, 2]: decays from ~1 to strong, so the mask/decay math matters.
    dt = torch.nn.functional.softplus(torch.randn(batch, length, heads, generator=g,
                                                  dtype=dtype) - 1.0)
    A = -(torch.rand(heads, generator=g, dtype=dtype) * 2.0 + 0.1) * decay_scale
    B = torch.randn(batch, length, d_state, generator=g, dtype=dtype)
    C = torch.randn(batch, length, d_state, generator=g, dtype=dtype)
    h0 = torch.randn(batch, heads, headdim, d_state, generator=g, dtype=dtype)
    return x, dt, A, B, C, h0


def _rel(fast: torch.Tensor, ref: torch.Tensor) -> float:
    return ((fast.double() - ref.double()).abs().max() / ref.double().abs().max()).item()


def _reference64(x, dt, A, B, C, h0=None):
    return ssd_recurrent(x.double(), dt.double(), A.double(), B.double(), C.double(),
                         None if h0 is None else h0.double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("length,chunk", SHAPES)
def test_chunked_matches_recurrence(length: int, chunk: int, dtype: torch.dtype) -> None:
    x, dt, A, B, C, _ = _inputs(length, dtype, seed=length * 7 + chunk)
    y, final = ssd_chunked(x, dt, A, B, C, chunk, return_final_state=True)
    y_ref, final_ref = _reference64(x, dt, A, B, C)
    assert y.shape == x.shape and y.dtype == dtype and final.shape == (2, 3, 8, 16)
    err_y, err_s = _rel(y, y_ref), _rel(final, final_ref)
    print(f"L={length} Q={chunk} {dtype}: rel err y {err_y:.2e} state {err_s:.2e}")
    assert err_y < TOL[dtype] and err_s < TOL[dtype]
    # Without the final state the output is the same tensor math (inter-chunk pass skipped
    # only when it is not needed).
    assert _rel(ssd_chunked(x, dt, A, B, C, chunk), y_ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("length,chunk", [(5, 64), (37, 16), (64, 32)])
def test_initial_state_and_final_state_only(length: int, chunk: int, dtype: torch.dtype) -> None:
    x, dt, A, B, C, h0 = _inputs(length, dtype, seed=3 + length)
    y, final = ssd_chunked(x, dt, A, B, C, chunk, initial_state=h0, return_final_state=True)
    y_ref, final_ref = _reference64(x, dt, A, B, C, h0)
    only = ssd_final_state(x, dt, A, B, chunk, initial_state=h0)
    only0 = ssd_final_state(x, dt, A, B, chunk)
    errs = [_rel(y, y_ref), _rel(final, final_ref), _rel(only, final_ref),
            _rel(only0, _reference64(x, dt, A, B, C)[1])]
    print(f"L={length} Q={chunk} {dtype}: {errs}")
    assert max(errs) < TOL[dtype]


def test_split_sequence_continues_from_state() -> None:
    # Scanning [0, 23) then [23, 61) from its final state equals one scan of [0, 61).
    x, dt, A, B, C, _ = _inputs(61, torch.float64, seed=11)
    y_full = ssd_chunked(x, dt, A, B, C, 16)
    y1, s1 = ssd_chunked(x[:, :23], dt[:, :23], A, B[:, :23], C[:, :23], 16,
                         return_final_state=True)
    y2 = ssd_chunked(x[:, 23:], dt[:, 23:], A, B[:, 23:], C[:, 23:], 16, initial_state=s1)
    assert _rel(torch.cat([y1, y2], 1), y_full) < 1e-12


def test_step_matches_recurrence() -> None:
    x, dt, A, B, C, h0 = _inputs(20, torch.float64, seed=5)
    state = h0.clone()
    ys = torch.stack([ssd_step(x[:, t], dt[:, t], A, B[:, t], C[:, t], state)
                      for t in range(20)], dim=1)
    y_ref, final_ref = ssd_recurrent(x, dt, A, B, C, h0)
    assert _rel(ys, y_ref) < 1e-12 and _rel(state, final_ref) < 1e-12


@pytest.mark.parametrize("length,chunk", [(37, 16), (64, 64)])
def test_gradients_match_reference_and_are_finite(length: int, chunk: int) -> None:
    # Strong decay (|dt A| up to ~20 per step) exercises the masked exp in the backward pass.
    leaves = [t.requires_grad_() for t in _inputs(length, torch.float64, seed=1,
                                                  decay_scale=10.0)[:5]]
    weight = torch.randn(2, length, 3, 8, dtype=torch.float64,
                         generator=torch.Generator().manual_seed(2))
    (ssd_chunked(*leaves, chunk) * weight).sum().backward()
    fast = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    (ssd_recurrent(*leaves)[0] * weight).sum().backward()
    for name, g_fast, t in zip("x dt A B C".split(), fast, leaves, strict=True):
        err = _rel(g_fast, t.grad)
        print(f"grad {name}: rel err {err:.2e}")
        assert torch.isfinite(g_fast).all() and err < 1e-9


def test_float32_gradients_finite_under_extreme_decay() -> None:
    x, dt, A, B, C, _ = _inputs(100, torch.float32, seed=4, decay_scale=200.0)
    leaves = [t.requires_grad_() for t in (x, dt, A, B, C)]
    y, final = ssd_chunked(*leaves, 32, return_final_state=True)
    (y.square().sum() + final.sum()).backward()
    assert torch.isfinite(y).all()
    assert all(torch.isfinite(t.grad).all() for t in leaves)
