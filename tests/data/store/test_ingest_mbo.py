"""DBN books through ingest (MBO files written by the official encoder): issue 11's rules.

Modify to size 0, the F_MAYBE_BAD_BOOK flag (MBO and MBP-10), two publishers of one
instrument, a file of only the initial replay, and segment breaks that survive skipped rows.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import databento_dbn as dbn
import numpy as np
import pytest
import zstandard

from lobsurf.data.readers.dbn_read import DbnReader
from lobsurf.data.readers.mbo_book import F_MAYBE_BAD_BOOK, MboBookBuilder
from lobsurf.data.schema import F_LAST, F_SNAPSHOT, MBP10_DTYPE, UNDEF_PRICE
from lobsurf.data.store import Store
from lobsurf.data.store.ingest import IngestConfig, carry_breaks, ingest
from lobsurf.errors import UserError
from tests.data.dbn_files import PX, timed, write_dbn

CFG = IngestConfig(multiplier=50.0, currency="USD")
BAD = F_LAST | F_MAYBE_BAD_BOOK
#: a two-sided book: bid 100.00 x5, ask 100.50 x5 (one snapshot, at the second record)
BASE = [("A", "B", 1, 100.0, 5, 0), ("A", "A", 2, 100.5, 5)]


def ingest_rows(tmp_path, rows, cfg=CFG, name="t.mbo.dbn"):
    path = write_dbn(tmp_path / name, dbn.Schema.MBO, timed(rows))
    manifest = ingest([path], tmp_path / "store", cfg)
    return Store.open(tmp_path / "store"), manifest


def bids(store: Store, row: int) -> list[tuple[float, int, int]]:
    px, sz, ct = (store.columns[f"bid_{f}"][row] for f in ("px", "sz", "ct"))
    return [(int(p) / PX, int(s), int(c)) for p, s, c in zip(px, sz, ct) if p != UNDEF_PRICE]


def test_modify_to_size_zero_removes_the_order(tmp_path):
    store, manifest = ingest_rows(tmp_path, BASE + [
        ("A", "B", 3, 99.75, 2),
        ("M", "B", 1, 100.0, 0),  # order 1 to size 0: it leaves, level 100.00 with it
    ])
    assert len(store) == 3
    assert bids(store, 1) == [(100.0, 5, 1), (99.75, 2, 1)]
    assert bids(store, 2) == [(99.75, 2, 1)]  # not (100.0, 0, 1)
    assert manifest.skipped == {"mbo_modify_to_zero": 1}


def test_zero_size_level_never_passes_validation(tmp_path):
    # An add of size 0 is skipped by the builder; the validator is the second line for any
    # source whose book shows a defined level with size 0.
    store, manifest = ingest_rows(tmp_path, BASE + [("A", "B", 3, 99.75, 0)])
    assert len(store) == 2 and bids(store, 1) == [(100.0, 5, 1)]
    assert manifest.skipped == {"mbo_add_zero_size": 1}


def test_maybe_bad_book_is_counted_and_starts_a_segment_even_on_a_skipped_row(tmp_path):
    store, manifest = ingest_rows(tmp_path, BASE + [
        ("A", "B", 3, 99.75, 2),
        ("A", "B", 4, 101.0, 1, BAD),  # after the gap; this book is crossed: skipped
        ("C", "B", 4, 101.0, 1),  # first kept row after the gap: the new segment starts here
        ("A", "B", 5, 99.5, 1),
    ])
    assert len(store) == 4
    assert [(s.start, s.stop) for s in manifest.segments] == [(0, 2), (2, 4)]
    assert manifest.skipped == {"crossed_book": 1, "maybe_bad_book": 1}


def test_builder_marks_the_snapshot_after_the_flag_of_that_book_only():
    recs = np.concatenate([_records(timed(BASE)), _records(timed([
        ("A", "B", 3, 99.0, 1, F_MAYBE_BAD_BOOK),  # flag, no F_LAST: no snapshot yet
        ("A", "B", 4, 98.0, 1),  # the snapshot after the flag
        ("A", "B", 5, 97.0, 1),
    ]))])
    fed = MboBookBuilder().feed_detailed(recs)
    assert fed.breaks.tolist() == [False, True, False]
    assert fed.source.tolist() == [1, 3, 4]


def test_two_publishers_of_one_instrument_build_separate_books_and_ingest_keeps_one(tmp_path):
    rows = [
        ("A", "B", 1, 100.0, 5, 0, 1), ("A", "A", 2, 100.5, 5, F_LAST, 1),
        ("A", "B", 1, 99.0, 7, 0, 2), ("A", "A", 2, 101.0, 7, F_LAST, 2),  # same ids, venue 2
        ("C", "B", 1, 99.0, 7, F_LAST, 2),  # cancels venue 2's order 1, not venue 1's
        ("A", "B", 3, 99.75, 1, F_LAST, 1),
    ]
    fed = MboBookBuilder().feed_detailed(_records(timed(rows)))
    assert fed.publisher.tolist() == [1, 2, 2, 1]
    def book(k: int) -> list[tuple[float, int]]:
        px, sz = fed.chunk.bid_px[k], fed.chunk.bid_sz[k]
        return [(int(p) / PX, int(s)) for p, s in zip(px, sz) if p != UNDEF_PRICE]

    assert book(1) == [(99.0, 7)]  # venue 2's book holds only venue 2's orders
    assert book(2) == []  # its order 1 left; venue 1's order 1 did not
    assert book(3) == [(100.0, 5), (99.75, 1)]
    store, manifest = ingest_rows(tmp_path, rows)
    assert len(store) == 2 and bids(store, 1) == [(100.0, 5, 1), (99.75, 1, 1)]
    assert manifest.skipped == {"other_publisher": 2}  # venue 2's snapshots, not interleaved


def test_file_of_only_the_initial_replay_names_file_and_reason(tmp_path):
    snap = F_SNAPSHOT
    path = write_dbn(tmp_path / "replay.mbo.dbn", dbn.Schema.MBO, timed([
        ("R", "N", 0, 0.0, 0, snap), ("A", "B", 1, 100.0, 5, snap),
        ("A", "A", 2, 100.5, 5, snap | F_LAST)]))
    with pytest.raises(UserError) as err:
        ingest([path], tmp_path / "s", CFG)
    message = str(err.value)
    assert str(path) in message and "initial book replay (F_SNAPSHOT)" in message
    assert "all 3 records" in message and "\n" not in message


def test_carry_breaks_moves_a_break_off_skipped_rows_and_across_chunks():
    breaks = np.array([False, True, False, False, True])
    starts, pending = carry_breaks(breaks, np.array([0, 2, 3]), pending=False)
    assert starts.tolist() == [False, True, False] and pending  # row 4 skipped: carried
    starts, pending = carry_breaks(np.zeros(2, bool), np.array([1]), pending=True)
    assert starts.tolist() == [True] and not pending
    starts, pending = carry_breaks(np.array([True]), np.zeros(0, np.int64), pending=False)
    assert starts.tolist() == [] and pending


def _records(msgs) -> np.ndarray:
    # The records the reader sees: encoded by databento_dbn, read back by DbnReader.
    with tempfile.TemporaryDirectory() as folder:
        path = write_dbn(Path(folder) / "x.mbo.dbn", dbn.Schema.MBO, msgs)
        with DbnReader(path) as reader:
            return np.concatenate(list(reader.chunks(1_000)))


def test_mbp10_record_flagged_maybe_bad_book_starts_a_segment(shared_data, tmp_path):
    # The real 4-record GLBX sample, record 2 flagged: MBP-10 snapshots carry their own
    # book, so the flagged one is the first of the new series.
    raw = bytearray(zstandard.ZstdDecompressor().stream_reader(
        (shared_data / "databento-python" / "GLBX.MDP3" / "test_data.mbp-10.dbn.zst").read_bytes()
    ).read())
    records = np.frombuffer(raw, MBP10_DTYPE, offset=len(raw) - 4 * MBP10_DTYPE.itemsize)
    records["flags"][2] |= F_MAYBE_BAD_BOOK
    path = tmp_path / "flagged.mbp-10.dbn"
    path.write_bytes(bytes(raw))
    manifest = ingest([path], tmp_path / "s", CFG)
    assert [(s.start, s.stop) for s in manifest.segments] == [(0, 2), (2, 4)]
    assert manifest.skipped["maybe_bad_book"] == 1
