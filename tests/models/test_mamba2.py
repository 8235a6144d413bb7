"""Mamba2 block: chunked fast path against the step-by-step recurrence of the same block."""

from __future__ import annotations

import pytest
import torch

from lobsurf.models.config import EncoderConfig
from lobsurf.models.mamba2 import Mamba2Block

TOL = {torch.float32: 1e-4, torch.float64: 1e-10}


def perturbed_block(chunk: int, dtype: torch.dtype, seed: int = 0) -> Mamba2Block:
    """A small seeded block (D 16, P 8, N 8, W 4) with every parameter off its init value."""
    torch.manual_seed(seed)
    cfg = EncoderConfig(d_model=16, headdim=8, d_state=8, expand=2, d_conv=4, chunk_size=chunk)
    block = Mamba2Block(cfg).to(dtype)
    # Move parameters off their init values so every term (large dt, skip D, gated-norm
    # weight, RMSNorm weight) contributes to the output and a wrong one would show.
    with torch.no_grad():
        block.mixer.dt_bias.uniform_(-1.0, 1.0)
        block.mixer.D.normal_()
        block.mixer.norm_weight.uniform_(0.5, 1.5)
        block.norm.weight.uniform_(0.5, 1.5)
        block.mixer.conv_bias.normal_(0.0, 0.5)
    return block


def _rel(fast: torch.Tensor, ref: torch.Tensor) -> float:
    return ((fast - ref).abs().max() / ref.abs().max()).item()


def _stepwise(block: Mamba2Block, h: torch.Tensor) -> tuple[torch.Tensor, object]:
    state = block.allocate_state(h.shape[0], dtype=h.dtype)
    with torch.no_grad():
        ys = torch.stack([block.step(h[:, t], state) for t in range(h.shape[1])], dim=1)
    return ys, state


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("length,chunk", [(16, 16), (7, 64), (20, 8), (33, 16), (64, 32)])
def test_block_fast_path_matches_step_recurrence(length: int, chunk: int,
                                                 dtype: torch.dtype) -> None:
    block = perturbed_block(chunk, dtype, seed=length)
    h = torch.randn(3, length, 16, dtype=dtype)
    with torch.no_grad():
        fast = block(h)
    ref, _ = _stepwise(block, h)
    err = _rel(fast, ref)
    print(f"L={length} Q={chunk} {dtype}: block rel err {err:.2e}")
    assert fast.shape == h.shape and err < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_with_state_continues_into_steps(dtype: torch.dtype) -> None:
    # Forward over a prefix writes conv and SSM states that ``step`` continues from.
    block = perturbed_block(8, dtype, seed=1)
    h = torch.randn(2, 30, 16, dtype=dtype)
    ref, ref_state = _stepwise(block, h)
    state = block.allocate_state(2, dtype=dtype)
    with torch.no_grad():
        first = block(h[:, :19], state)
        rest = torch.stack([block.step(h[:, t], state) for t in range(19, 30)], dim=1)
    errs = (_rel(torch.cat([first, rest], 1), ref), _rel(state.ssm_state, ref_state.ssm_state),
            _rel(state.conv_state, ref_state.conv_state))
    print(f"{dtype}: {errs}")
    assert max(errs) < TOL[dtype]


@pytest.mark.parametrize("length,chunk", [(20, 8), (3, 64), (64, 64)])
def test_last_only_matches_last_row(length: int, chunk: int) -> None:
    block = perturbed_block(chunk, torch.float64, seed=2)
    h = torch.randn(2, length, 16, dtype=torch.float64)
    with torch.no_grad():
        full = block(h)
        last = block(h, last_only=True)
    assert last.shape == (2, 16) and _rel(last, full[:, -1]) < 1e-10


def test_gradients_finite_and_reach_every_parameter() -> None:
    block = perturbed_block(8, torch.float32, seed=3)
    h = torch.randn(4, 21, 16, requires_grad=True)
    block(h).square().mean().backward()
    assert torch.isfinite(h.grad).all() and h.grad.abs().sum() > 0
    for name, p in block.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_in_proj_order_sizes() -> None:
    cfg = EncoderConfig(d_model=32, headdim=16, d_state=8, expand=2)
    mixer = Mamba2Block(cfg).mixer
    E, N, H = cfg.d_inner, cfg.d_state, cfg.n_heads
    assert mixer.split_sizes == (E, E + 2 * N, H)
    assert mixer.in_proj.out_features == sum(mixer.split_sizes)
    assert mixer.A_log.shape == mixer.D.shape == mixer.dt_bias.shape == (H,)
    # Init: dt = softplus(dt_bias) lies in [dt_min, dt_max]; -A in [a_init_min, a_init_max].
    dt = torch.nn.functional.softplus(mixer.dt_bias)
    assert (dt >= cfg.dt_min * 0.999).all() and (dt <= cfg.dt_max * 1.001).all()
    A = torch.exp(mixer.A_log)
    assert (A >= cfg.a_init_min).all() and (A <= cfg.a_init_max).all()
