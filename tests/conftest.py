"""Shared fixtures: seeded generators and tiny stores built in temporary folders."""

from __future__ import annotations

import os
from pathlib import Path

import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Side by side workers (pytest -n): one thread each, so two workers share two cores
    # instead of four threads spinning on them; the subprocesses a test starts inherit it.
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

if not torch.cuda.is_available():
    # Without CUDA, Triton kernels run in Triton's CPU interpreter (the fused kernels' tests);
    # it is chosen when a kernel is defined, so it must be set before lobsurf imports Triton.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import pytest

from lobsurf.data.schema import FIXED_PRICE_SCALE, LEVELS, SnapshotChunk
from lobsurf.data.store import Instrument, Store, StoreWriter

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "dbn"


def pytest_collection_modifyitems(config, items):
    """Without CUDA, tests marked ``gpu`` are deselected whatever ``-m`` asks (the default
    ``-m 'not gpu'`` of pyproject.toml is replaced by a user's ``-m "not slow"``); on a GPU
    machine ``-m gpu`` selects them."""
    if torch.cuda.is_available():
        return
    kept = [item for item in items if item.get_closest_marker("gpu") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept
TICK_FIXED = FIXED_PRICE_SCALE // 4  # 0.25, like ES


def random_walk_books(n: int, seed: int, start_ns: int = 1_700_000_000 * 10**9,
                      instrument_id: int = 1) -> SnapshotChunk:
    """n two-sided 10-level books whose mid walks on a 0.25 grid; spread 1-3 ticks."""
    rng = np.random.default_rng(seed)
    best_bid = 4000 * 4 + np.cumsum(rng.integers(-1, 2, n))  # in ticks
    spread = rng.choice([1, 1, 1, 2, 3], n)
    lv = np.arange(LEVELS)
    bid = (best_bid[:, None] - lv) * TICK_FIXED
    ask = (best_bid[:, None] + spread[:, None] + lv) * TICK_FIXED
    sizes = lambda: rng.integers(1, 50, (n, LEVELS))  # noqa: E731
    ts = start_ns + np.cumsum(rng.integers(1_000, 5_000_000, n))
    return SnapshotChunk(
        ts_event_ns=ts - 100, ts_recv_ns=ts, instrument_id=np.full(n, instrument_id),
        bid_px=bid, ask_px=ask, bid_sz=sizes(), ask_sz=sizes(),
        bid_ct=rng.integers(1, 9, (n, LEVELS)), ask_ct=rng.integers(1, 9, (n, LEVELS)),
    )


def write_store(path: Path, chunks: list[SnapshotChunk], gap_ns: int = 60 * 10**9) -> Store:
    with StoreWriter(path, gap_threshold_ns=gap_ns) as writer:
        writer.add_instrument(Instrument(1, "TEST", TICK_FIXED, multiplier=50.0,
                                         fee_per_lot=1.0, fee_bps=0.0))
        for i, chunk in enumerate(chunks):
            writer.begin_source(f"chunk{i}")
            writer.append(chunk)
        writer.close()
    return Store.open(path)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture
def tiny_store(tmp_path: Path) -> Store:
    """Two segments (2,000 and 1,500 snapshots) of one instrument, tick 0.25, multiplier 50,
    fee 1.0 per lot recorded (the fee training used before stores recorded one)."""
    return write_store(tmp_path / "store", [random_walk_books(2000, 1),
                                            random_walk_books(1500, 2, start_ns=1_700_100_000 * 10**9)])


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"../shared/data/dbn not found at {SHARED_DATA} (CI always has it)")
    return SHARED_DATA
