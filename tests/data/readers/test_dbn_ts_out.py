"""DBN files with the ``ts_out`` trailer (live data: each record 8 bytes longer).

The files are re-encoded by the official ``databento_dbn`` encoder with ``ts_out`` set in the
metadata and on every record; the reader must give the same records plus the send times,
and a header that disagrees with the records is a one-line error naming the record.
"""

from __future__ import annotations

import databento_dbn as dbn
import numpy as np
import pytest

from lobsurf.data.readers.dbn_read import DbnReader
from lobsurf.data.store import Store
from lobsurf.data.store.ingest import IngestConfig, ingest
from lobsurf.errors import UserError
from tests.data.dbn_files import timed, write_dbn

ES_MBP10 = "databento-dbn/test_data.mbp-10.dbn"
CFG = IngestConfig(multiplier=50.0)


def official_records(path) -> tuple[dbn.Metadata, list]:
    decoder = dbn.DBNDecoder()
    decoder.write(path.read_bytes())
    meta, *records = decoder.decode()
    return meta, records


def reencode(path, out, records, ts_out: bool, header_ts_out: bool):
    meta, _ = official_records(path)
    header = dbn.Metadata(dataset=meta.dataset, start=meta.start, stype_in=meta.stype_in,
                          stype_out=meta.stype_out, schema=meta.schema, symbols=meta.symbols,
                          ts_out=header_ts_out)
    body = bytearray(bytes(header))
    for k, record in enumerate(records):
        if ts_out:
            record.ts_out = 1_609_160_400_001_000_000 + k
        body += bytes(record)
    out.write_bytes(bytes(body))
    return out


def read_all(path) -> np.ndarray:
    with DbnReader(path) as reader:
        return np.concatenate(list(reader.chunks(3)))


def test_mbp10_with_ts_out_reads_the_same_records_and_the_send_times(shared_data, tmp_path):
    plain = shared_data / ES_MBP10
    _, records = official_records(plain)
    live = reencode(plain, tmp_path / "live.mbp-10.dbn", records, ts_out=True, header_ts_out=True)
    with DbnReader(live) as reader:
        assert reader.header.ts_out and reader.header.record_dtype.itemsize == 368 + 8
    got, want = read_all(live), read_all(plain)
    for name in want.dtype.names:
        if name != "length":  # the record length counts the trailer: 94 words, not 92
            assert np.array_equal(got[name], want[name]), name
    assert set(got["length"].tolist()) == {(368 + 8) // 4}
    assert got["ts_out"].tolist() == [1_609_160_400_001_000_000 + k for k in range(len(want))]
    a, b = (ingest([p], tmp_path / p.stem, CFG) for p in (live, plain))
    stores = Store.open(tmp_path / live.stem), Store.open(tmp_path / plain.stem)
    assert a.snapshots == b.snapshots == 2
    for name, column in stores[0].columns.items():
        assert np.array_equal(column, stores[1].columns[name]), name


def test_mbo_with_ts_out_ingests_like_without(tmp_path):
    rows = [("A", "B", 1, 100.0, 5, 0), ("A", "A", 2, 100.5, 5), ("C", "B", 1, 100.0, 2)]
    paths = [write_dbn(tmp_path / f"{k}.mbo.dbn", dbn.Schema.MBO, timed(rows), ts_out=k == "live")
             for k in ("live", "plain")]
    for p in paths:
        ingest([p], tmp_path / f"s-{p.stem}", CFG)
    live, plain = (Store.open(tmp_path / f"s-{p.stem}") for p in paths)
    assert len(live) == len(plain) == 2
    for name, column in live.columns.items():
        assert np.array_equal(column, plain.columns[name]), name


@pytest.mark.parametrize("records_ts_out, header_ts_out", [(True, False), (False, True)])
def test_header_and_records_disagreeing_on_ts_out_is_an_error(shared_data, tmp_path,
                                                              records_ts_out, header_ts_out):
    plain = shared_data / ES_MBP10
    _, records = official_records(plain)
    bad = reencode(plain, tmp_path / "bad.mbp-10.dbn", records, records_ts_out, header_ts_out)
    with pytest.raises(UserError, match=r"bad.mbp-10.dbn: .*record 0"):
        read_all(bad)
