"""DBN reader: agrees with the official decoder on every real sample; clear errors on bad files."""

from __future__ import annotations

from pathlib import Path

import databento_dbn
import numpy as np
import pytest
import zstandard

from lobsurf.data.readers.dbn_read import DbnReader
from lobsurf.data.schema import LEVELS
from lobsurf.errors import UserError

MBP10_FIELDS = ("ts_event", "ts_recv", "instrument_id", "price", "size", "flags", "sequence", "depth")


def official_records(path: Path) -> list:
    data = path.read_bytes()
    if data[:4] == b"\x28\xb5\x2f\xfd":
        data = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True).read()
    decoder = databento_dbn.DBNDecoder(upgrade_policy=databento_dbn.VersionUpgradePolicy.AS_IS)
    decoder.write(data)
    return [r for r in decoder.decode() if not isinstance(r, databento_dbn.Metadata)]


def sample_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.dbn*") if "mbp-10" in p.name)


def test_every_mbp10_sample_matches_official_decoder(shared_data):
    files = sample_files(shared_data)
    assert len(files) == 8
    for path in files:
        with DbnReader(path) as reader:
            ours = np.concatenate(list(reader.chunks(3)))  # chunk smaller than the file
        theirs = official_records(path)
        assert len(ours) == len(theirs) > 0, path
        for mine, ref in zip(ours, theirs):
            for field in MBP10_FIELDS:
                assert int(mine[field]) == int(getattr(ref, field)), (path, field)
            assert mine["action"].decode() == str(ref.action), path
            for k in range(LEVELS):
                lv = ref.levels[k]
                for field in ("bid_px", "ask_px", "bid_sz", "ask_sz", "bid_ct", "ask_ct"):
                    assert int(mine["levels"][field][k]) == int(getattr(lv, field)), (path, field, k)


def test_versions_1_2_3_plain_and_zstd_decode_to_same_records(shared_data):
    folder = shared_data / "databento-dbn"
    arrays = []
    for name in ("test_data.mbp-10.dbn", "test_data.mbp-10.v1.dbn.zst",
                 "test_data.mbp-10.v2.dbn.zst", "test_data.mbp-10.v3.dbn.zst"):
        with DbnReader(folder / name) as reader:
            arrays.append((reader.header.version, np.concatenate(list(reader.chunks(100)))))
    assert sorted(v for v, _ in arrays) == [1, 2, 2, 3]
    for _, recs in arrays[1:]:
        assert recs.tobytes() == arrays[0][1].tobytes()


def test_mbo_file_header_and_record_count(shared_data):
    path = shared_data / "nautilus_trader" / "esh4-glbx-mdp3-20231225.mbo.dbn.zst"
    with DbnReader(path) as reader:
        assert (reader.header.version, reader.header.schema) == (1, "mbo")
        assert sum(len(c) for c in reader.chunks(10_000)) == 68_792


def _plain_copy(shared_data: Path, tmp_path: Path) -> bytes:
    return (shared_data / "databento-dbn" / "test_data.mbp-10.dbn").read_bytes()


def test_truncated_file_names_record(shared_data, tmp_path):
    data = _plain_copy(shared_data, tmp_path)
    bad = tmp_path / "cut.dbn"
    bad.write_bytes(data[:-100])
    with pytest.raises(UserError, match=r"cut.dbn: truncated file: record 1 has 268 of 368 bytes"):
        with DbnReader(bad) as reader:
            list(reader.chunks(10))


def test_corrupt_zstd_is_a_clear_error(shared_data, tmp_path):
    data = (shared_data / "databento-dbn" / "test_data.mbp-10.v3.dbn.zst").read_bytes()
    bad = tmp_path / "bad.dbn.zst"
    bad.write_bytes(data[:60] + bytes(200) + data[260:])
    with pytest.raises(UserError, match="bad.dbn.zst"):
        with DbnReader(bad) as reader:
            list(reader.chunks(10))


def test_not_dbn_and_wrong_schema(tmp_path):
    junk = tmp_path / "junk.dbn"
    junk.write_bytes(b"hello world, not dbn")
    with pytest.raises(UserError, match="not a DBN file"):
        DbnReader(junk)
    meta = databento_dbn.Metadata(dataset="GLBX.MDP3", start=0, stype_in=databento_dbn.SType.RAW_SYMBOL,
                                  stype_out=databento_dbn.SType.INSTRUMENT_ID,
                                  schema=databento_dbn.Schema.TRADES, symbols=["ESH1"])
    trades = tmp_path / "trades.dbn"
    trades.write_bytes(bytes(meta.encode()))
    with pytest.raises(UserError, match="schema 'trades' is not supported"):
        DbnReader(trades)


def test_record_of_wrong_type_is_reported(shared_data, tmp_path):
    data = bytearray(_plain_copy(shared_data, tmp_path))
    first_record = len(data) - 2 * 368
    data[first_record + 368 + 1] = 0x01  # second record's rtype
    bad = tmp_path / "mixed.dbn"
    bad.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"record 1: rtype 0x01"):
        with DbnReader(bad) as reader:
            list(reader.chunks(10))
