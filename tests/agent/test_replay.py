"""Prioritized replay: sampling frequencies against p^alpha, importance weights against
the formula in numpy float64, duplicate-safe priority updates, the ring, and what is stored."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
import torch

from lobsurf.agent.config import ReplayConfig
from lobsurf.agent.replay import PrioritizedReplay
from lobsurf.agent.transitions import Transitions


def batch(n: int, start: int = 0) -> Transitions:
    rows = torch.arange(start, start + n)
    return Transitions(row=rows, position=rows % 3, time_in_trade=rows % 5,
                       unrealized_pnl=rows.double(), action=rows % 11,
                       reward=rows.float() / 10, done=rows % 7 == 0, trade_closed=rows % 2 == 0,
                       next_row=rows + 1,
                       next_position=rows % 3, next_time_in_trade=rows % 5,
                       next_unrealized_pnl=rows.double(), outcome_valid=rows < 0,
                       outcome_win=rows < 0)


def test_sampling_frequencies_follow_priority_to_the_alpha():
    cfg = ReplayConfig(capacity=8, alpha=0.6, priority_eps=1e-12)
    rb = PrioritizedReplay(cfg, "cpu", seed=0)
    rb.add(batch(8))
    priorities = np.array([0.1, 0.5, 1.0, 2.0, 4.0, 0.2, 3.0, 0.05])
    rb.update_priorities(torch.arange(8), torch.tensor(priorities))
    draws = 200_000
    s = rb.sample(draws, torch.tensor(0.4, dtype=torch.float64))
    freq = np.bincount(s.index.numpy(), minlength=8) / draws
    want = priorities ** 0.6 / (priorities ** 0.6).sum()
    print("freq", freq.round(4), "want", want.round(4))
    np.testing.assert_allclose(freq, want, atol=4 * np.sqrt(want.max() / draws))
    # importance weights (N P(i))^-beta / max, per drawn index
    w = (8 * want[s.index.numpy()]) ** -0.4
    np.testing.assert_allclose(s.weight.numpy(), w / w.max(), rtol=1e-5)
    # the sampled transitions are the stored ones
    assert torch.equal(s.transitions.row, s.index)


def test_unfilled_slots_are_never_sampled():
    rb = PrioritizedReplay(ReplayConfig(capacity=64), "cpu", seed=1)
    rb.add(batch(5))
    s = rb.sample(10_000, torch.tensor(1.0, dtype=torch.float64))
    assert int(s.index.max()) < 5 and int(rb.size) == 5


def test_reserved_slots_are_never_sampled_even_across_the_ring_end():
    # a sample drawn before a write of 3 leaves out the 3 slots that write replaces (the
    # oldest when full, wrapping past the end), however high their priority
    cfg = ReplayConfig(capacity=8, alpha=1.0, priority_eps=1e-12)
    rb = PrioritizedReplay(cfg, "cpu", seed=0)
    rb.add(batch(8))
    rb.add(batch(6, start=100))  # full, pointer at slot 6
    rb.update_priorities(torch.tensor([6, 7, 0]), torch.tensor([1e6, 1e6, 1e6]))
    beta = torch.tensor(1.0, dtype=torch.float64)
    s = rb.sample(20_000, beta, reserved=3)
    drawn = set(s.index.tolist())
    assert drawn == {1, 2, 3, 4, 5}
    assert {6, 7, 0} <= set(rb.sample(100, beta).index.tolist())  # without: mostly those
    # the importance weights are those of the draw among the slots left
    np.testing.assert_allclose(s.weight.numpy(), np.ones(20_000), rtol=1e-6)


def test_duplicate_indices_keep_the_largest_priority():
    cfg = ReplayConfig(capacity=4, alpha=1.0, priority_eps=1e-12)
    rb = PrioritizedReplay(cfg, "cpu", seed=0)
    rb.add(batch(4))
    rb.update_priorities(torch.tensor([1, 1, 1, 2]), torch.tensor([0.3, 2.0, 0.7, 0.5]))
    np.testing.assert_allclose(rb.weight.numpy(), [1.0, 2.0, 0.5, 1.0])
    assert abs(float(rb.max_priority) - 2.0) < 1e-9


def test_ring_overwrites_the_oldest_and_new_entries_get_the_max_priority():
    cfg = ReplayConfig(capacity=6, alpha=1.0, priority_eps=1e-12)
    rb = PrioritizedReplay(cfg, "cpu", seed=0)
    rb.add(batch(4, start=0))
    rb.update_priorities(torch.tensor([0]), torch.tensor([5.0]))
    rb.add(batch(4, start=100))
    assert rb.storage.row.tolist() == [102, 103, 2, 3, 100, 101]
    assert int(rb.pointer) == 2 and int(rb.size) == 6
    # the slots just written carry the max priority seen (5), the survivors keep theirs
    np.testing.assert_allclose(rb.weight.numpy(), [5.0, 5.0, 1.0, 1.0, 5.0, 5.0])


def test_storage_holds_indices_and_agent_state_not_windows():
    rb = PrioritizedReplay(ReplayConfig(capacity=16), "cpu", seed=0)
    for f in fields(Transitions):
        assert getattr(rb.storage, f.name).shape == (16,), f.name


def test_state_dict_round_trip_continues_identically():
    cfg = ReplayConfig(capacity=32)
    a = PrioritizedReplay(cfg, "cpu", seed=3)
    a.add(batch(20))
    a.update_priorities(torch.arange(0, 20, 2), torch.rand(10))
    b = PrioritizedReplay(cfg, "cpu", seed=99)
    b.load_state_dict(a.state_dict())
    beta = torch.tensor(0.5, dtype=torch.float64)
    sa, sb = a.sample(50, beta), b.sample(50, beta)
    assert torch.equal(sa.index, sb.index) and torch.equal(sa.weight, sb.weight)


def test_n_step_targets_match_a_per_env_loop():
    """n-step returns walk each env's own transitions, stop after an episode end, and
    shorten at the newest step; checked against a plain loop over the write history."""
    rng = np.random.default_rng(0)
    b, steps, cap, n, gamma = 3, 9, 30, 4, 0.9  # the ring wraps: 27 writes into 30 slots
    cfg = ReplayConfig(capacity=cap)
    rb = PrioritizedReplay(cfg, "cpu", seed=0)
    history = []  # (slot, env, step, reward, done)
    for k in range(steps):
        t = batch(b, start=10 * k)
        t.reward = torch.tensor(rng.normal(size=b), dtype=torch.float32)
        t.done = torch.tensor(rng.random(b) < 0.25)
        slots = [(int(rb.pointer) + e) % cap for e in range(b)]
        rb.add(t)
        history += [(slots[e], e, k, float(t.reward[e]), bool(t.done[e])) for e in range(b)]
    latest = {}
    for slot, e, k, r, d in history:
        latest[slot] = (e, k, r, d)  # what the ring holds now
    by_env_step = {(e, k): (slot, r, d) for slot, (e, k, r, d) in latest.items()}
    index = torch.tensor(sorted(latest))
    got = rb.n_step_targets(index, n, gamma, b)
    for i, slot in enumerate(index.tolist()):
        e, k, _, _ = latest[slot]
        ret, disc, boot = 0.0, 1.0, slot
        m = 0
        for j in range(n):
            if (e, k + j) not in by_env_step:
                break  # not written yet: the return stops at the newest step
            s_j, r_j, d_j = by_env_step[(e, k + j)]
            ret += gamma ** j * r_j
            boot, m = s_j, j + 1
            if d_j:
                disc = 0.0
                break
        disc = disc * gamma ** m if disc else 0.0
        assert got.ret[i].item() == pytest.approx(ret, abs=1e-5), slot
        assert got.discount[i].item() == pytest.approx(disc, abs=1e-6), slot
        assert int(got.bootstrap_index[i]) == boot, slot
