"""The C51 target kernel (lobsurf.agent.c51_triton) against a float64 numpy loop that
shares no code with it, and against the PyTorch c51_target it replaces on CUDA. Without
CUDA the kernel runs in Triton's CPU interpreter (tests/conftest.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lobsurf.agent.c51_triton import c51_target_triton, kernel_applies
from lobsurf.agent.learn import c51_target
from lobsurf.errors import UserError
from lobsurf.models.kernels.triton_support import available_for
from lobsurf.training.config import resolve_run_config

needs_kernel = pytest.mark.skipif(not available_for(torch.device("cpu")),
                                  reason="needs Triton (its CPU interpreter without CUDA)")


def numpy_c51_target(q, reward, done, gamma, z):
    """E[Q(s, .)] [B, A] and the projected target [B, N], sample by sample in float64."""
    q = np.asarray(q, dtype=np.float64)
    b, num_actions, n = q.shape[0] // 2, q.shape[1], q.shape[2]
    z = np.asarray(z, dtype=np.float64)
    dz = z[1] - z[0]
    means, target = np.zeros((b, num_actions)), np.zeros((b, n))
    for s in range(b):
        for a in range(num_actions):
            e = np.exp(q[s, a] - q[s, a].max())
            means[s, a] = (e / e.sum() * z).sum()
        best, best_value, best_probs = -1, -math.inf, None
        for a in range(num_actions):
            e = np.exp(q[b + s, a] - q[b + s, a].max())
            p = e / e.sum()
            value = (p * z).sum()
            if value > best_value:  # the first of equal maxima
                best, best_value, best_probs = a, value, p
        g = gamma[s] if np.ndim(gamma) else gamma
        for j in range(n):
            tz = min(max(reward[s] + g * (1.0 - float(done[s])) * z[j], z[0]), z[-1])
            for i in range(n):
                target[s, i] += max(0.0, 1.0 - abs(tz - z[i]) / dz) * best_probs[j]
    return means, target


def _inputs(b=5, num_actions=11, n=21, dtype=torch.float32, seed=0, padded=False):
    g = torch.Generator().manual_seed(seed)
    # logits as the heads' aligned product leaves them: a view of wider rows when padded
    width = num_actions * n + (13 if padded else 0)
    q = (2.0 * torch.randn(2 * b, width, generator=g)).to(dtype)[:, :num_actions * n]
    q = q.unflatten(-1, (num_actions, n))
    # rewards that push Tz past both ends of the support, and inside it
    reward = torch.linspace(-3.0, 3.0, b)
    done = torch.arange(b) % 3 == 0
    z = torch.linspace(-1.5, 1.5, n)
    return q, reward, done, z


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("gamma_kind", ["float", "rows"])
@pytest.mark.parametrize("padded", [False, True])
def test_kernel_matches_the_float64_loop(dtype, gamma_kind, padded):
    q, reward, done, z = _inputs(dtype=dtype, padded=padded)
    assert q.is_contiguous() != padded
    gamma = 0.9 if gamma_kind == "float" else torch.linspace(0.5, 0.99, q.shape[0] // 2)
    want_means, want_target = numpy_c51_target(q.float().numpy(), reward.numpy(),
                                               done.numpy(), np.asarray(gamma), z.numpy())
    means, target = c51_target_triton(q, reward, done, gamma, z)
    assert means.dtype == target.dtype == torch.float32
    np.testing.assert_allclose(means.numpy(), want_means, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(target.numpy(), want_target, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(target.sum(1).numpy(), 1.0, rtol=1e-5)
    # the PyTorch reference it stands in for agrees too
    ref_means, ref_target = c51_target(q, reward, done, gamma, z)
    torch.testing.assert_close(means, ref_means, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(target, ref_target, rtol=1e-5, atol=1e-6)


@needs_kernel
def test_per_sample_values_read_at_their_strides():
    # in the step, reward, done and a per-row gamma are columns of the replay's packed rows
    # (lobsurf.agent.transitions.unpack): views with a row stride, read as such
    q, reward, done, z = _inputs(b=6)
    gamma = torch.linspace(0.5, 0.99, 6)
    packed = torch.stack((torch.zeros(6), reward, done.float(), gamma, torch.ones(6)), 1)
    columns = packed[:, 1], packed[:, 2], packed[:, 3]
    assert all(c.stride(0) == 5 for c in columns)
    want = numpy_c51_target(q.numpy(), reward.numpy(), done.numpy(), gamma.numpy(),
                            z.numpy())
    for got, w in zip(c51_target_triton(q, *columns, z), want):
        np.testing.assert_allclose(got.numpy(), w, rtol=1e-5, atol=1e-6)


@needs_kernel
def test_the_greedy_action_is_the_first_of_equal_maxima():
    # at s' action 1 has all its mass on z = 0 and action 3 half on -0.5, half on +0.5:
    # equal expectations (0, exactly: -inf logits give exact zeros) and different
    # distributions; the first is taken, as torch.argmax does, and a wrong pick would show
    q, _, _, z = _inputs(b=3, num_actions=4, n=7)  # z: -1.5 .. 1.5 in steps of 0.5
    inf = float("inf")
    q[3:] = -inf
    q[3:, 0, 0] = q[3:, 2, 1] = 0.0  # the other two: -1.5 and -1.0
    q[3:, 1, 3] = 0.0
    q[3:, 3, 2] = q[3:, 3, 4] = 0.0
    reward, done = torch.full((3,), 0.1), torch.zeros(3, dtype=torch.bool)
    want = numpy_c51_target(q.numpy(), reward.numpy(), done.numpy(), 0.9, z.numpy())[1]
    other = numpy_c51_target(q[:, [0, 3, 2, 1]].numpy(), reward.numpy(), done.numpy(), 0.9,
                             z.numpy())[1]
    assert np.abs(want - other).max() > 0.1  # the tied pair's targets differ
    target = c51_target_triton(q, reward, done, 0.9, z)[1]
    np.testing.assert_allclose(target.numpy(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(target, c51_target(q, reward, done, 0.9, z)[1], rtol=1e-5,
                               atol=1e-6)


@needs_kernel
def test_a_nan_logit_at_s_prime_makes_that_target_nan():
    # torch.argmax takes NaN for the largest, so a diverged logit reaches the loss (and the
    # divergence guard) through the target instead of being passed over
    q, reward, done, z = _inputs(b=4)
    q[4 + 2, 5, 7] = float("nan")
    for means, target in (c51_target_triton(q, reward, done, 0.9, z),
                          c51_target(q, reward, done, 0.9, z)):
        assert torch.isnan(target[2]).all()
        assert torch.isfinite(target[[0, 1, 3]]).all() and torch.isfinite(means).all()


@needs_kernel
def test_one_action_and_a_float_done_flag():
    q, reward, done, z = _inputs(b=4, num_actions=1, n=5)
    done = done.float()
    want = numpy_c51_target(q.numpy(), reward.numpy(), done.numpy(), 0.5, z.numpy())
    got = c51_target_triton(q, reward, done, 0.5, z)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)


def test_the_choice_of_kernel():
    assert not kernel_applies("off", "cpu")
    assert not kernel_applies("auto", "cpu")  # the kernel is for CUDA; CPU keeps PyTorch
    with pytest.raises(ValueError, match="kernel mode"):
        kernel_applies("fast", "cpu")
    if available_for(torch.device("cpu")):
        assert kernel_applies("on", "cpu")  # the interpreter asked for by name
    else:
        with pytest.raises(UserError, match="needs Triton"):
            kernel_applies("on", "cpu")
    # the retired setting is named with where it went
    with pytest.raises(UserError, match="train.c51_kernel no longer exists.*train.kernels"):
        resolve_run_config(None, ["train.c51_kernel=triton"])


@needs_kernel
def test_odd_or_too_small_logits_are_refused():
    q = torch.zeros(3, 2, 5)
    with pytest.raises(ValueError, match="2B, A, N"):
        c51_target_triton(q, torch.zeros(1), torch.zeros(1), 0.9, torch.linspace(-1, 1, 5))
    # a value per sample is read by index: anything but [B] is refused, not read past
    q, z = torch.zeros(4, 2, 5), torch.linspace(-1, 1, 5)
    for reward, done, gamma, name in ((torch.zeros(1), torch.zeros(2), 0.9, "reward"),
                                      (torch.zeros(2), torch.zeros(2, 1), 0.9, "done"),
                                      (torch.zeros(2), torch.zeros(2), torch.tensor(0.9),
                                       "gamma")):
        with pytest.raises(ValueError, match=f"{name} must be"):
            c51_target_triton(q, reward, done, gamma, z)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_matches_the_float64_loop_on_the_gpu(dtype):
    # the compiled kernel at the step's shape (B = 256, 11 actions x 21 atoms), logits as
    # the heads' aligned product leaves them (a view of wider rows), gamma per row
    q, reward, done, z = _inputs(b=256, padded=True, dtype=dtype, seed=3)
    gamma = torch.linspace(0.5, 0.99, 256)
    want = numpy_c51_target(q.float().numpy(), reward.numpy(), done.numpy(), gamma.numpy(),
                            z.numpy())
    got = c51_target_triton(q.cuda(), reward.cuda(), done.cuda(), gamma.cuda(), z.cuda())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.cpu().numpy(), w, rtol=1e-5, atol=1e-6)


@needs_kernel
def test_the_step_with_the_kernel_learns_as_the_plain_step(tiny_store):
    # the kernel (here Triton's interpreter) against the PyTorch functions: the runs take
    # the same transitions and end with the same parameters to rounding; build_state takes
    # the kernel on CUDA only (train.kernels), so CPU keeps PyTorch
    from lobsurf.agent.step import train_step
    from lobsurf.training.data import load_training_data
    from lobsurf.training.run.state import build_state, step_config
    from tests.agent.conftest import assert_same_learning, tiny_config

    cfgs = [tiny_config(tiny_store.path)] * 2
    data = load_training_data(cfgs[0], "cpu", tiny_store.path)
    states = [build_state(cfg, data, "cpu") for cfg in cfgs]
    assert states[0].kernels.c51_target is c51_target  # CPU: PyTorch
    states[1].kernels.c51_target = c51_target_triton
    for cfg, state in zip(cfgs, states):
        for step in range(8):
            train_step(state, data.train_book, step_config(cfg), learning=step >= 4)
    assert_same_learning(*states, learn_steps=4)
