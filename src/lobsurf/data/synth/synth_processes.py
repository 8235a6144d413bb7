"""Vectorised stochastic-process primitives of the synthetic market (``lobsurf.data.synth``).

Each primitive generates one chunk of a long sequence at numpy speed (no Python loop per
element) and returns the state the next chunk continues from, so a day of any length is
produced in bounded memory. Each has a step-by-step ``*_reference`` twin used by the tests.

* ``ar1_filter``: x_t = phi * x_{t-1} + e_t (an Ornstein-Uhlenbeck process sampled on the
  event clock), computed in blocks with scaled cumulative sums.
* ``alternating_runs``: a two-phase regime sequence with geometric run lengths (a
  two-state Markov chain), each run carrying a value drawn when it starts.
* ``forward_fill``: per column, the most recent refreshed value (a level's queue size
  persists until an event refreshes it).
* ``SpawnedStreams``: one random generator per process, all from one seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields

import numpy as np

class SpawnedStreams:
    """Base of a dataclass whose fields are random generators, one per process: ``spawn``
    makes them all from one seed, so each stream is consumed in its own order whatever the
    chunk sizes."""

    @classmethod
    def spawn(cls, seed: np.random.SeedSequence):
        return cls(*(np.random.default_rng(s) for s in seed.spawn(len(fields(cls)))))


#: Largest exponent (natural log) of phi**-k inside one AR(1) block: keeps the scaled
#: cumulative sum far from float64 overflow (e**700) while leaving it exact to ~1e-16.
_AR1_MAX_LOG_SCALE = 600.0
#: Upper bound on an AR(1) block length; long blocks mean fewer carry steps per chunk.
_AR1_MAX_BLOCK = 1024


def ar1_filter(eps: np.ndarray, phi: float, x0: float) -> np.ndarray:
    """x_t = phi * x_{t-1} + eps_t for t = 0..n-1, with x_{-1} = x0 (float64).

    Within a block of L steps, x_{b,k} = phi^k * cumsum_j(eps_{b,j} * phi^-j) + phi^(k+1) * x_b,
    where x_b is the value before the block; only the n/L block carries are sequential.

    Args:
        eps: [n] innovations.
        phi: persistence in (0, 1).
        x0: value before the first step.
    Returns:
        [n] float64 path.
    """
    n = eps.shape[0]
    if n == 0:
        return np.zeros(0)
    block = int(min(_AR1_MAX_BLOCK, max(1, _AR1_MAX_LOG_SCALE // -np.log(phi))))
    blocks = -(-n // block)
    padded = np.zeros(blocks * block)
    padded[:n] = eps
    e = padded.reshape(blocks, block)
    power = phi ** np.arange(block, dtype=np.float64)  # phi^k
    y = np.cumsum(e / power, axis=1) * power  # [blocks, L] path of each block from zero
    before = np.empty(blocks)  # value just before each block
    carry = float(x0)
    decay = phi**block
    for b in range(blocks):  # one step per block (n / L of them), not per element
        before[b] = carry
        carry = y[b, -1] + decay * carry
    x = y + (power * phi)[None, :] * before[:, None]
    return x.reshape(-1)[:n]


def ar1_filter_reference(eps: np.ndarray, phi: float, x0: float) -> np.ndarray:
    x = np.empty(eps.shape[0])
    prev = float(x0)
    for t, e in enumerate(eps):
        prev = phi * prev + float(e)
        x[t] = prev
    return x


#: Runs drawn at a time by ``alternating_runs``. Fixed, so the random stream is consumed the
#: same way whatever the chunk sizes: the sequence does not depend on how it is chunked.
RUN_BATCH = 1024


@dataclass
class RunState:
    """Where a regime sequence stands between chunks.

    Attributes:
        phase: 0 or 1, the phase of the current run.
        value: the current run's value.
        left: rows of the current run still to come (0 = a new run starts next).
        queue_phase, queue_value, queue_length: [q] runs already drawn, not yet started.
    """

    phase: int
    value: int
    left: int
    queue_phase: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    queue_value: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    queue_length: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


#: Draws one value per run: (rng, phases [m] int) -> values [m] int64.
RunValueSampler = Callable[[np.random.Generator, np.ndarray], np.ndarray]


def _draw_runs(rng: np.random.Generator, last_phase: int, mean_run: tuple[float, float],
               sample_values: RunValueSampler) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    phases = ((last_phase + 1 + np.arange(RUN_BATCH)) % 2).astype(np.int8)
    lengths = rng.geometric(1.0 / np.asarray(mean_run, dtype=np.float64)[phases]).astype(np.int64)
    return phases, sample_values(rng, phases).astype(np.int64), lengths


def alternating_runs(rng: np.random.Generator, n: int, state: RunState,
                     mean_run: tuple[float, float], sample_values: RunValueSampler
                     ) -> tuple[np.ndarray, np.ndarray, RunState]:
    """n rows of a two-phase sequence whose runs alternate 0, 1, 0, ... .

    Run lengths of phase p are geometric with mean ``mean_run[p]`` (>= 1 row), i.e. a
    two-state Markov chain leaving phase p with probability 1 / mean_run[p] per row. ``rng``
    must serve this sequence only: then the rows do not depend on the chunk sizes.

    Returns:
        (phase [n] int8, value [n] int64, state for the next chunk)
    """
    phase = np.empty(n, np.int8)
    value = np.empty(n, np.int64)
    head = min(state.left, n)
    phase[:head] = state.phase
    value[:head] = state.value
    pos = head
    current = (state.phase, state.value, state.left - head)
    queue = (state.queue_phase, state.queue_value, state.queue_length)
    while pos < n:
        if queue[0].shape[0] == 0:
            queue = _draw_runs(rng, current[0], mean_run, sample_values)
        phases, values, lengths = queue
        ends = np.cumsum(lengths)
        used = min(int(np.searchsorted(ends, n - pos, side="left")) + 1, lengths.shape[0])
        fill = min(int(ends[used - 1]), n - pos)
        phase[pos:pos + fill] = np.repeat(phases[:used], lengths[:used])[:fill]
        value[pos:pos + fill] = np.repeat(values[:used], lengths[:used])[:fill]
        pos += fill
        # The last run used may continue into the next chunk: carry its remaining rows.
        current = (int(phases[used - 1]), int(values[used - 1]), int(ends[used - 1]) - fill)
        queue = (phases[used:], values[used:], lengths[used:])
    return phase, value, RunState(*current, *queue)


def refresh_source(refresh: np.ndarray) -> np.ndarray:
    """Per column, the row of the latest refresh at or before each row.

    Args:
        refresh: [n, C] bool, where a new value arrives.
    Returns:
        [n, C] int64: r + 1 for row r, 0 where no refresh happened yet in the chunk (the
        row index into ``concatenate([initial[None], fresh])``).
    """
    rows = np.arange(1, refresh.shape[0] + 1, dtype=np.int64)[:, None]
    return np.maximum.accumulate(np.where(refresh, rows, 0), axis=0)


def forward_fill(initial: np.ndarray, fresh: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Per column, the latest fresh value at or before each row (``initial`` before any).

    Args:
        initial: [C] values before the first row.
        fresh: [n, C] new values (read only where refreshed).
        source: [n, C] from ``refresh_source`` (shared by several filled arrays).
    Returns:
        [n, C] filled values.
    """
    columns = fresh.shape[1]
    stacked = np.concatenate([initial[None, :], fresh], axis=0).reshape(-1)
    # A flat gather: much faster than take_along_axis, which builds an index per axis.
    return stacked[source * columns + np.arange(columns)]


def forward_fill_reference(initial: np.ndarray, refresh: np.ndarray, fresh: np.ndarray) -> np.ndarray:
    out = np.empty_like(fresh)
    current = initial.copy()
    for t in range(refresh.shape[0]):
        current = np.where(refresh[t], fresh[t], current)
        out[t] = current
    return out
