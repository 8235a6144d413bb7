"""Vectorised process primitives of the synthetic market against step-by-step references."""

from __future__ import annotations

import numpy as np
import pytest

from lobsurf.data.synth.synth_processes import (
    RunState,
    alternating_runs,
    ar1_filter,
    ar1_filter_reference,
    forward_fill,
    forward_fill_reference,
    refresh_source,
)


@pytest.mark.parametrize("phi", [0.2, 0.9, 0.97, 0.999])
@pytest.mark.parametrize("n", [0, 1, 1023, 1024, 5000])
def test_ar1_matches_reference(phi: float, n: int) -> None:
    eps = np.random.default_rng(n).normal(size=n)
    fast = ar1_filter(eps, phi, x0=1.7)
    slow = ar1_filter_reference(eps, phi, x0=1.7)
    err = float(np.abs(fast - slow).max()) if n else 0.0
    print(f"phi={phi} n={n} max abs diff {err:.2e}")
    assert fast.shape == (n,)
    assert err < 1e-9


def test_ar1_chunks_continue() -> None:
    eps = np.random.default_rng(0).normal(size=3000)
    whole = ar1_filter(eps, 0.95, 0.0)
    first = ar1_filter(eps[:1234], 0.95, 0.0)
    second = ar1_filter(eps[1234:], 0.95, first[-1])
    np.testing.assert_allclose(np.concatenate([first, second]), whole, atol=1e-10)


def test_forward_fill_matches_reference() -> None:
    rng = np.random.default_rng(3)
    initial = rng.integers(1, 100, 9)
    refresh = rng.random((500, 9)) < 0.1
    refresh[7] = True  # a row refreshing every column
    fresh = rng.integers(1, 100, (500, 9))
    np.testing.assert_array_equal(forward_fill(initial, fresh, refresh_source(refresh)),
                                  forward_fill_reference(initial, refresh, fresh))


def _runs_in_chunks(sizes: list[int], mean_run: tuple[float, float], seed: int):
    rng = np.random.default_rng(seed)
    state = RunState(phase=0, value=-1, left=5)
    phases, values = [], []

    def sample(r: np.random.Generator, p: np.ndarray) -> np.ndarray:
        return r.integers(0, 2**40, p.shape[0])  # a distinct value per run

    for n in sizes:
        phase, value, state = alternating_runs(rng, n, state, mean_run, sample)
        phases.append(phase)
        values.append(value)
    return np.concatenate(phases), np.concatenate(values)


def test_alternating_runs_structure_and_lengths() -> None:
    phase, value = _runs_in_chunks([1, 7, 20_000, 3, 60_000, 19_989], (40.0, 10.0), seed=1)
    assert phase.shape == (100_000,)
    assert (phase[:5] == 0).all() and (value[:5] == -1).all()  # the carried run finishes first
    starts = np.flatnonzero(np.diff(value) != 0) + 1
    # Runs alternate in phase, and the phase never changes inside a run (even across chunks).
    np.testing.assert_array_equal(np.flatnonzero(np.diff(phase) != 0) + 1, starts)
    lengths = np.diff(starts)
    run_phase = phase[starts[:-1]]
    mean_calm, mean_busy = lengths[run_phase == 0].mean(), lengths[run_phase == 1].mean()
    print(f"mean run lengths {mean_calm:.1f} (want 40), {mean_busy:.1f} (want 10)")
    assert abs(mean_calm - 40) < 3 and abs(mean_busy - 10) < 1


def test_alternating_runs_tiny_means_cover_the_chunk() -> None:
    # Mean length 1 needs many batches of runs; the sequence must still be complete.
    phase, value = _runs_in_chunks([10_000], (1.0, 1.0), seed=2)
    assert phase.shape == (10_000,)
    assert (phase[:5] == 0).all()  # the carried run (5 rows left)
    assert (np.diff(phase[4:]) != 0).all()  # then runs of exactly one row


def test_alternating_runs_do_not_depend_on_chunking() -> None:
    whole = _runs_in_chunks([50_000], (30.0, 5.0), seed=4)
    pieces = _runs_in_chunks([1, 2, 997, 20_000, 3, 28_997], (30.0, 5.0), seed=4)
    np.testing.assert_array_equal(whole[0], pieces[0])
    np.testing.assert_array_equal(whole[1], pieces[1])
