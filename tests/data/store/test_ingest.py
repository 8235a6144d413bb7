"""Ingest end to end through the real CLI: real samples, summaries, errors, chunking."""

from __future__ import annotations

import json

import numpy as np

from lobsurf.cli import main
from lobsurf.data.store.ingest import IngestConfig, ingest
from lobsurf.data.store import Store

INFO_KEYS = {"snapshots", "segments", "instruments", "start", "end", "tick_size", "price_min",
             "price_max", "skipped"}


def run_json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_real_mbp10_samples_ingest_with_counted_skips(shared_data, tmp_path, capsys):
    files = sorted(str(p) for p in shared_data.rglob("*.mbp-10.*"))
    out = run_json(capsys, ["ingest", *files, "--out", str(tmp_path / "s"), "--json", "--no-progress"])
    info = run_json(capsys, ["info", str(tmp_path / "s"), "--json"])
    assert out == info and INFO_KEYS <= set(info)
    # 8 files: 4 ES copies of 2, ES 4, Brent 4 (trades: the first ends its packet, an empty
    # book; three inside packets, no book state), TTF 4 (partial book), NVDA 4.
    assert info["skipped"] == {"empty_book": 1, "one_sided_book": 2}
    assert info["snapshots"] == 2 * 4 + 4 + 4 + 2
    # Brent's 4 trades (1 + 2 + 4 + 3 lots) have no valid book record after them in their file.
    assert info["trades"]["source_records"] == 4 and info["trades"]["volume"] == 0
    assert info["trades"]["left_out"] == {"after_last_row": 10}
    assert {i["symbol"]: i["tick_size"] for i in info["instruments"]} == {
        "ESH1": 0.25, "NVDA": 0.01, "TFM FMH0024!": 0.005}
    assert info["price_max"] == 3720.5


def test_es_sample_values_in_currency(shared_data, tmp_path, capsys):
    path = shared_data / "databento-dbn" / "test_data.mbp-10.dbn"
    info = run_json(capsys, ["ingest", str(path), "--out", str(tmp_path / "s"), "--json",
                             "--multiplier", "50"])
    assert info["snapshots"] == 2 and info["segments"] == 1
    assert info["price_min"] == 3720.25 and info["price_max"] == 3720.5
    assert info["instruments"][0]["multiplier"] == 50
    assert info["start"].startswith("2020-12-28T13:00:00")
    store = Store.open(tmp_path / "s")
    assert store.columns["bid_px"][0, 0] == 3_720_250_000_000  # exact fixed point


def test_chunk_size_does_not_change_the_store(shared_data, tmp_path):
    files = sorted(shared_data.rglob("*.mbp-10.*"))
    ingest(files, tmp_path / "a", IngestConfig(chunk_records=1))
    ingest(files, tmp_path / "b", IngestConfig(chunk_records=1000))
    a, b = Store.open(tmp_path / "a"), Store.open(tmp_path / "b")
    assert a.manifest == b.manifest
    for name in a.columns:
        np.testing.assert_array_equal(a.columns[name], b.columns[name])


def test_user_errors_are_one_line(tmp_path, capsys):
    junk = tmp_path / "x.dbn"
    junk.write_bytes(b"nope")
    assert main(["ingest", str(junk), "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"lobsurf ingest: error: {junk}: not a DBN file (no 'DBN' signature)"
    assert not (tmp_path / "s").exists()
    assert main(["info", str(tmp_path / "missing")]) == 2
    assert "no such store folder" in capsys.readouterr().err
    assert main(["ingest", str(tmp_path / "none.dbn"), "--out", str(tmp_path / "s")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_only_invalid_books_is_an_error(shared_data, tmp_path, capsys):
    # Brent's four records are trades (action T); the first ends its packet (a book state,
    # empty), the other three are trade reports inside packets.
    brent = shared_data / "databento-python" / "IFEU.IMPACT" / "test_data.mbp-10.dbn.zst"
    assert main(["ingest", str(brent), "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert f"no valid snapshots in the input: {brent}: all 1 snapshots skipped (empty_book 1)" in err
    assert not (tmp_path / "s").exists()


def test_real_cme_mbo_session_becomes_a_store(shared_data, tmp_path, capsys):
    path = shared_data / "nautilus_trader" / "esh4-glbx-mdp3-20231225.mbo.dbn.zst"
    info = run_json(capsys, ["ingest", str(path), "--out", str(tmp_path / "s"), "--json",
                             "--multiplier", "50", "--chunk-records", "20000"])
    # The pre-open hour accepts crossing orders: those books are counted and skipped.
    assert info["skipped"] == {"crossed_book": 891}
    assert info["snapshots"] == 46_131 and info["segments"] == 1
    assert info["instruments"][0]["symbol"] == "ESH4" and info["tick_size"] == 0.25
    assert 4790 < info["price_min"] < info["price_max"] < 4820
    # Trades: every one of the file's 2,973 T records (9,892 lots) is in the table; the
    # 6,371 F records (10,201 lots) are not summed: they count 309 lots twice.
    trades = info["trades"]
    assert (trades["source_records"], trades["source_volume"]) == (2_973, 9_892)
    assert trades["volume"] == 9_892 and trades["left_out"] == {}
    assert (trades["rows"], trades["entries"]) == (2_834, 2_883)
    assert (trades["buy_volume"], trades["sell_volume"], trades["unknown_volume"]) == (5_322, 4_526, 44)
    store = Store.open(tmp_path / "s")
    bid, ask = store.columns["bid_px"][:, 0], store.columns["ask_px"][:, 0]
    assert (bid < ask).all()
    assert (np.diff(store.columns["ts_recv_ns"]) >= 0).all()


def test_lobster_files_ingest_through_the_cli(tmp_path, capsys):
    from tests.data.readers.test_lobster import book_row, write_pair

    books = [book_row(5859400 + 100 * (i % 3), 5853300, 10) for i in range(7)]
    books.append(book_row(5853300, 5853300, 10))  # locked: counted and skipped
    times = [f"{34200 + i}.000000001" for i in range(8)]
    path = write_pair(tmp_path, times, books)
    info = run_json(capsys, ["ingest", str(path), "--out", str(tmp_path / "s"), "--json"])
    assert info["snapshots"] == 7 and info["skipped"] == {"locked_book": 1}
    assert info["instruments"][0]["symbol"] == "AAPL" and info["tick_size"] == 0.01
    assert info["price_min"] == 585.33 and info["price_max"] == 585.96
    assert info["start"] == "2012-06-21T13:30:00+00:00"  # 9:30 New York summer time


def test_synth_to_ingest_round_trip_is_exact(tmp_path, capsys):
    from lobsurf.data.schema import SnapshotChunk
    from lobsurf.data.synth import SynthConfig, generate_day

    cfg = SynthConfig(snapshots_per_day=30_000, days=3, seed=11, edge=0.3, chunk_rows=7_000)
    assert main(["synth", "--out", str(tmp_path / "dbn"), "--snapshots", "30000", "--days", "3",
                 "--seed", "11", "--edge", "0.3"]) == 0
    capsys.readouterr()
    files = sorted(str(p) for p in (tmp_path / "dbn").glob("*.mbp-10.dbn.zst"))
    assert len(files) == 3
    info = run_json(capsys, ["ingest", *files, "--out", str(tmp_path / "s"), "--json",
                             "--chunk-records", "10000", "--multiplier", "50"])
    assert info["snapshots"] == 90_000 and info["segments"] == 3 and info["skipped"] == {}
    assert info["tick_size"] == 0.25
    store = Store.open(tmp_path / "s")
    expected = SnapshotChunk.concat([c for day in range(3) for c in generate_day(cfg, day)])
    back = store.rows(0, len(store))
    for name in SnapshotChunk.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(back, name), getattr(expected, name), err_msg=name)


def test_folders_and_lone_message_files_are_one_line_errors(tmp_path, capsys):
    from tests.data.readers.test_lobster import book_row, write_pair

    (tmp_path / "lob").mkdir()
    book = write_pair(tmp_path / "lob", [f"{34200 + i}.5" for i in range(3)],
                      [book_row(5859400, 5853300, 10)] * 3)
    message = book.with_name(book.name.replace("_orderbook_", "_message_"))
    # `lobsurf ingest lob/*.csv` passes both files of the pair: the message file is read with it
    info = run_json(capsys, ["ingest", str(message), str(book), "--out", str(tmp_path / "s"),
                             "--json"])
    assert info["snapshots"] == 3 and info["sources"] == [book.name]
    cases = {str(message): "is a LOBSTER message file; pass its orderbook file",
             str(tmp_path / "lob"): "is a folder, not an input file",
             str(tmp_path / "s"): "is a snapshot store, not an input file"}
    for path, says in cases.items():
        assert main(["ingest", path, "--out", str(tmp_path / "t")]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "t").exists()


def test_bad_numeric_options_are_one_line_errors(tmp_path, capsys):
    # NaN used to reach int() (a traceback); a negative multiplier flipped every PnL's sign.
    junk = tmp_path / "x.dbn"
    junk.write_bytes(b"nope")
    cases = {("--gap-seconds", "nan"): "gap threshold must be",
             ("--gap-seconds", "inf"): "gap threshold must be",
             ("--tick-size", "nan"): "tick size must be finite and > 0",
             ("--multiplier", "-50"): "multiplier must be finite and > 0",
             ("--multiplier", "0"): "multiplier must be finite and > 0"}
    for extra, says in cases.items():
        assert main(["ingest", str(junk), "--out", str(tmp_path / "s"), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and len(err.splitlines()) == 1, extra
