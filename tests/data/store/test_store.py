"""Snapshot store: exact round trip, segmentation, and no half-written store after a crash."""

from __future__ import annotations

import numpy as np
import pytest

from lobsurf.data.schema import SnapshotChunk
from lobsurf.data.store import Instrument, Store, StoreError, StoreWriter
from tests.conftest import TICK_FIXED, random_walk_books, write_store


def test_round_trip_exact_in_pieces(tmp_path):
    books = random_walk_books(1000, seed=1)
    with StoreWriter(tmp_path / "s", gap_threshold_ns=10**12) as w:
        w.add_instrument(Instrument(1, "T", TICK_FIXED))
        w.begin_source("a")
        for lo in range(0, 1000, 300):  # chunks not aligned to anything
            w.append(books.take(np.arange(lo, min(lo + 300, 1000))))
        w.close()
    store = Store.open(tmp_path / "s")
    back = store.rows(0, len(store))
    for name in SnapshotChunk.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(back, name), getattr(books, name))
    assert [(s.start, s.stop) for s in store.manifest.segments] == [(0, 1000)]


def test_segments_split_at_gaps_sources_and_instruments(tmp_path):
    a = random_walk_books(100, seed=1)
    b = random_walk_books(100, seed=2, start_ns=int(a.ts_recv_ns[-1]) + 10**9)   # 1 s later
    c = random_walk_books(100, seed=3, start_ns=int(b.ts_recv_ns[-1]) + 3600 * 10**9)
    d = random_walk_books(50, seed=4, start_ns=int(c.ts_recv_ns[-1]) + 10**6, instrument_id=2)
    with StoreWriter(tmp_path / "s", gap_threshold_ns=60 * 10**9) as w:
        w.add_instrument(Instrument(1, "T", TICK_FIXED))
        w.add_instrument(Instrument(2, "U", TICK_FIXED))
        w.begin_source("one")
        w.append(a); w.append(b); w.append(SnapshotChunk.concat([c, d]))
        w.begin_source("two")
        w.append(random_walk_books(10, seed=5, start_ns=int(d.ts_recv_ns[-1]) + 1))
        m = w.close()
    assert [(s.start, s.stop, s.instrument_id) for s in m.segments] == [
        (0, 200, 1), (200, 300, 1), (300, 350, 2), (350, 360, 1)]
    assert m.segments[0].price_min_fixed == min(a.bid_px[:, 0].min(), b.bid_px[:, 0].min())


def test_interrupted_write_leaves_no_store(tmp_path):
    with pytest.raises(RuntimeError):
        with StoreWriter(tmp_path / "s", gap_threshold_ns=1) as w:
            w.begin_source("x")
            w.append(random_walk_books(10, seed=1))
            raise RuntimeError("crash mid-ingest")
    assert not (tmp_path / "s").exists()
    assert list(tmp_path.iterdir()) == []


def test_truncated_or_missing_store_refused(tmp_path):
    store = write_store(tmp_path / "s", [random_walk_books(50, seed=1)])
    with open(store.path / "bid_px.bin", "r+b") as f:
        f.truncate(100)
    with pytest.raises(StoreError, match="wrong size"):
        Store.open(store.path)
    (store.path / "manifest.json").unlink()
    with pytest.raises(StoreError, match="not a finished store"):
        Store.open(store.path)
    with pytest.raises(StoreError, match="exists"):
        StoreWriter(store.path, gap_threshold_ns=1)


def test_overwrite_replaces_only_a_store(tmp_path):
    # --overwrite deletes the old folder: it must refuse a data folder or an input file.
    write_store(tmp_path / "s", [random_walk_books(10, 1)])
    data = tmp_path / "data"
    data.mkdir()
    (data / "day1.dbn.zst").write_bytes(b"precious")
    single = tmp_path / "day2.dbn.zst"
    single.write_bytes(b"precious")
    for path in (data, single):
        with pytest.raises(StoreError, match="not a store folder|not a lobsurf store"):
            StoreWriter(path, gap_threshold_ns=1, overwrite=True)
        assert path.exists()
    assert (data / "day1.dbn.zst").read_bytes() == b"precious"
    assert not list(tmp_path.glob(".*tmp*"))
    # a store and an empty folder are replaced
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "s", tmp_path / "empty"):
        write_store_over = StoreWriter(path, gap_threshold_ns=1, overwrite=True)
        write_store_over.add_instrument(Instrument(1, "T", TICK_FIXED))
        write_store_over.begin_source("x")
        write_store_over.append(random_walk_books(5, 2))
        write_store_over.close()
        assert len(Store.open(path)) == 5


def test_background_write_error_surfaces_and_leaves_no_store(tmp_path, monkeypatch):
    import lobsurf.data.store.store as store_module

    def disk_full(columns):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_module, "_write_columns", disk_full)
    with pytest.raises(OSError, match="No space left"):
        with StoreWriter(tmp_path / "s", gap_threshold_ns=10**12) as w:
            w.add_instrument(Instrument(1, "T", TICK_FIXED))
            w.begin_source("x")
            w.append(random_walk_books(10, seed=1))
            w.append(random_walk_books(10, seed=2, start_ns=2 * 10**18))
            w.close()
    assert list(tmp_path.iterdir()) == []
