"""The DBN MBP-10 writer: files read back by the official decoder field for field."""

from __future__ import annotations

from pathlib import Path

import databento_dbn as dbn
import numpy as np
import pytest

from lobsurf.data.readers.dbn_encode import write_mbp10_dbn
from lobsurf.data.schema import F_LAST, LEVELS, SnapshotChunk
from tests.conftest import random_walk_books


def decode_file(path: Path) -> tuple[dbn.Metadata, list]:
    """All records of a DBN file through databento_dbn.DBNDecoder (metadata first)."""
    compression = dbn.Compression.ZSTD if path.name.endswith(".zst") else dbn.Compression.NONE
    decoder = dbn.DBNDecoder(compression=compression)
    decoder.write(path.read_bytes())
    records = decoder.decode()
    return records[0], records[1:]


def assert_records_equal_books(records: list, chunk: SnapshotChunk, timestamps: bool = True) -> None:
    """Every decoded record equals the snapshot of the same row: all 10 levels (and, with
    ``timestamps``, its times and instrument)."""
    assert len(records) == len(chunk)
    got = {name: np.array([[getattr(r, f"{name}_{lv:02d}") for lv in range(LEVELS)] for r in records])
           for name in ("bid_px", "ask_px", "bid_sz", "ask_sz", "bid_ct", "ask_ct")}
    for name, values in got.items():
        np.testing.assert_array_equal(values.reshape(-1, LEVELS), getattr(chunk, name), err_msg=name)
    if not timestamps:
        return
    np.testing.assert_array_equal([r.ts_event for r in records], chunk.ts_event_ns)
    np.testing.assert_array_equal([r.ts_recv for r in records], chunk.ts_recv_ns)
    np.testing.assert_array_equal([r.instrument_id for r in records], chunk.instrument_id)


@pytest.mark.parametrize("name", ["books.mbp-10.dbn", "books.mbp-10.dbn.zst"])
def test_round_trip_through_official_decoder(tmp_path: Path, name: str) -> None:
    chunks = [random_walk_books(700, seed=1, instrument_id=42),
              random_walk_books(300, seed=2, start_ns=1_700_000_100 * 10**9, instrument_id=42)]
    path = tmp_path / name
    start, end = int(chunks[0].ts_recv_ns[0]), int(chunks[1].ts_recv_ns[-1]) + 1
    written = write_mbp10_dbn(path, iter(chunks), dataset="TEST.DATA", symbol="TST",
                              instrument_id=42, start_ns=start, end_ns=end, publisher_id=7)
    assert written == 1000
    metadata, records = decode_file(path)
    assert metadata.version == 3 and str(metadata.schema) == "mbp-10"
    assert metadata.dataset == "TEST.DATA" and metadata.symbols == ["TST"]
    assert metadata.start == start and metadata.end == end
    assert_records_equal_books(records, SnapshotChunk.concat(chunks))
    assert all(isinstance(r, dbn.MBP10Msg) for r in records)
    assert [r.sequence for r in records] == list(range(1, 1001))
    assert {r.publisher_id for r in records} == {7}
    assert {int(r.flags) for r in records} == {F_LAST}
    assert [f.name for f in tmp_path.iterdir()] == [name]  # no temporary left behind


def test_bad_sizes_raise_and_leave_no_file(tmp_path: Path) -> None:
    chunk = random_walk_books(10, seed=3)
    chunk.bid_sz[4, 2] = -1  # would wrap to 4294967295 in the uint32 field
    path = tmp_path / "bad.mbp-10.dbn.zst"
    with pytest.raises(ValueError, match="bid_sz"):
        write_mbp10_dbn(path, [chunk], dataset="T", symbol="T", instrument_id=1,
                        start_ns=0, end_ns=None)
    assert list(tmp_path.iterdir()) == []


def test_open_ended_metadata(tmp_path: Path) -> None:
    chunk = random_walk_books(5, seed=4)
    path = tmp_path / "open.mbp-10.dbn"
    write_mbp10_dbn(path, [chunk], dataset="T", symbol="T", instrument_id=1,
                    start_ns=int(chunk.ts_recv_ns[0]), end_ns=None)
    metadata, records = decode_file(path)
    assert metadata.end is None
    assert_records_equal_books(records, chunk)


def test_zstd_files_carry_a_checksum_so_corruption_is_caught(tmp_path: Path) -> None:
    # Without the frame checksum, flipped bytes could decode to wrong sizes that pass
    # validation and enter the store silently.
    from lobsurf.data.store.ingest import ingest
    from lobsurf.errors import UserError

    path = tmp_path / "books.mbp-10.dbn.zst"
    book = random_walk_books(2000, seed=3)
    write_mbp10_dbn(path, iter([book]), dataset="TEST.DATA", symbol="TST", instrument_id=1,
                    start_ns=int(book.ts_recv_ns[0]), end_ns=int(book.ts_recv_ns[-1]) + 1)
    data = bytearray(path.read_bytes())
    assert data[:4] == b"\x28\xb5\x2f\xfd" and data[4] & 0x04  # frame header: checksum flag
    data[-2] ^= 0xFF  # the checksum no longer matches the (intact) content
    path.write_bytes(bytes(data))
    with pytest.raises(UserError, match="corrupt zstd stream"):
        ingest([path], tmp_path / "s")
    assert not (tmp_path / "s").exists()
