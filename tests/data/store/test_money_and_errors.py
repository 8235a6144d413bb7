"""Money facts (multiplier, currency) and the one-line errors of a bad store path.

DBN files carry no multiplier and no currency: without ``--multiplier``/``--currency`` or a
definitions file the store says "not given"/"unknown" instead of claiming 1 and USD.
"""

from __future__ import annotations

import json

import databento_dbn as dbn
import pytest

from lobsurf.cli import main
from lobsurf.data.store import Store
from tests.data.dbn_files import definition, timed, write_dbn

BOOK = [("A", "B", 1, 100.0, 5, 0), ("A", "A", 2, 100.5, 5), ("A", "B", 3, 99.75, 2)]


def mbo_file(tmp_path):
    return write_dbn(tmp_path / "es.mbo.dbn", dbn.Schema.MBO, timed(BOOK))


def test_missing_multiplier_warns_at_ingest_and_info_says_not_given(tmp_path, capsys):
    store = tmp_path / "s"
    assert main(["ingest", str(mbo_file(tmp_path)), "--out", str(store), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "no --multiplier" in err and "multiplier 1 assumed" in err
    instrument = Store.open(store).manifest.instruments[0]
    assert (instrument.multiplier, instrument.multiplier_known, instrument.currency) == (
        1.0, False, "unknown")
    assert main(["info", str(store)]) == 0
    assert "unknown, multiplier 1 (not given)" in capsys.readouterr().out


def test_given_multiplier_and_currency_are_stored_without_warning(tmp_path, capsys):
    store = tmp_path / "s"
    assert main(["ingest", str(mbo_file(tmp_path)), "--out", str(store), "--no-progress",
                 "--multiplier", "10", "--currency", "EUR"]) == 0
    assert "warning" not in capsys.readouterr().err
    instrument = Store.open(store).manifest.instruments[0]
    assert (instrument.multiplier, instrument.multiplier_known, instrument.currency) == (
        10.0, True, "EUR")


def test_definitions_file_gives_multiplier_currency_and_tick(tmp_path, capsys):
    defs = write_dbn(tmp_path / "defs.definition.dbn", dbn.Schema.DEFINITION,
                     [definition(multiplier=50.0, currency="USD", tick=0.125)], zstd=True)
    store = tmp_path / "s"
    assert main(["ingest", str(mbo_file(tmp_path)), "--out", str(store), "--no-progress",
                 "--definitions", str(defs)]) == 0
    assert "warning" not in capsys.readouterr().err
    instrument = Store.open(store).manifest.instruments[0]
    # The venue's tick (0.125), not the coarser one the prices suggest (0.25).
    assert (instrument.multiplier, instrument.currency, instrument.tick_size) == (50.0, "USD", 0.125)
    assert instrument.multiplier_known


def test_definitions_of_the_wrong_schema_is_a_one_line_error(tmp_path, capsys):
    not_defs = mbo_file(tmp_path)
    assert main(["ingest", str(not_defs), "--out", str(tmp_path / "s"), "--no-progress",
                 "--definitions", str(not_defs)]) == 2
    err = capsys.readouterr().err
    assert str(not_defs) in err and "not 'definition'" in err and err.count("\n") == 1


def info_error(capsys, path) -> str:
    assert main(["info", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_manifest_not_json_is_one_line_naming_the_file(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "manifest.json").write_text('{"format": "lobsurf-store", ')
    err = info_error(capsys, tmp_path / "s")
    assert str(tmp_path / "s" / "manifest.json") in err and "not valid JSON" in err


def test_empty_manifest_names_the_file_and_the_missing_keys(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "manifest.json").write_text("{}")
    err = info_error(capsys, tmp_path / "s")
    assert str(tmp_path / "s" / "manifest.json") in err
    assert "no key format, version, snapshots, instruments, segments" in err


def test_manifest_with_a_bad_entry_is_one_line(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "manifest.json").write_text(json.dumps({
        "format": "lobsurf-store", "version": 1, "snapshots": 0, "segments": [],
        "instruments": [{"instrument_id": 1, "no_such_field": 2}]}))
    assert "malformed manifest entry" in info_error(capsys, tmp_path / "s")


def test_info_on_a_file_says_what_it_is(tmp_path, capsys):
    err = info_error(capsys, mbo_file(tmp_path))
    assert "is a file, not a store folder" in err and "lobsurf ingest" in err
    (tmp_path / "notes.txt").write_text("x")
    err = info_error(capsys, tmp_path / "notes.txt")
    assert "is a file, not a store folder" in err and "ingest" not in err
    renamed = tmp_path / "download.bin"  # a DBN file by its signature, whatever its name
    renamed.write_bytes(mbo_file(tmp_path).read_bytes())
    assert "lobsurf ingest" in info_error(capsys, renamed)
    err = info_error(capsys, tmp_path)  # a folder, but no store: says so
    assert "not a finished store" in err


def test_fees_given_at_ingest_are_recorded_and_shown(tmp_path, capsys):
    """--fee-per-lot / --fee-bps go into the manifest (one flag given: the other is 0) and
    lobsurf info shows them; without either nothing is recorded and info says what applies."""
    store = tmp_path / "s"
    assert main(["ingest", str(mbo_file(tmp_path)), "--out", str(store), "--no-progress",
                 "--multiplier", "50", "--fee-per-lot", "0.7"]) == 0
    capsys.readouterr()
    instrument = Store.open(store).manifest.instruments[0]
    assert (instrument.fee_per_lot, instrument.fee_bps) == (0.7, 0.0)
    assert main(["info", str(store)]) == 0
    assert "fees         0.7 per lot + 0 bps of notional (recorded at ingest)" in (
        capsys.readouterr().out)
    assert main(["info", str(store), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["instruments"][0]
    assert (shown["fee_per_lot"], shown["fee_bps"]) == (0.7, 0.0)
    bare = tmp_path / "bare"
    assert main(["ingest", str(mbo_file(tmp_path)), "--out", str(bare), "--no-progress",
                 "--multiplier", "50"]) == 0
    instrument = Store.open(bare).manifest.instruments[0]
    assert (instrument.fee_per_lot, instrument.fee_bps) == (None, None)
    capsys.readouterr()
    assert main(["info", str(bare)]) == 0
    assert "fees         none recorded (training and evaluation charge" in capsys.readouterr().out
    for flag, value in (("--fee-per-lot", "-1"), ("--fee-bps", "nan"), ("--fee-bps", "20000")):
        assert main(["ingest", str(mbo_file(tmp_path)), "--out", str(tmp_path / "x"),
                     "--no-progress", flag, value]) == 2
        err = capsys.readouterr().err
        assert flag in err and err.count("\n") == 1, err


def test_a_store_written_before_fees_were_recorded_still_loads(tiny_store):
    """Manifests without fee keys (stores ingested before they existed) open with no fee
    recorded, and a manifest with a nonsense fee is one clear error."""
    from lobsurf.data.dataset import load_book_tensors
    from lobsurf.data.store import StoreError

    path = tiny_store.path / "manifest.json"
    raw = json.loads(path.read_text())
    for instrument in raw["instruments"]:
        del instrument["fee_per_lot"], instrument["fee_bps"]
    path.write_text(json.dumps(raw))
    book = load_book_tensors(Store.open(tiny_store.path))
    assert (book.fee_per_lot, book.fee_bps) == (None, None)
    raw["instruments"][0]["fee_per_lot"] = -3
    path.write_text(json.dumps(raw))
    with pytest.raises(StoreError, match="malformed manifest entry: fee_per_lot -3"):
        Store.open(tiny_store.path)


def test_maker_fees_given_at_ingest_are_recorded_shown_and_loaded(tmp_path, capsys):
    """--maker-fee-per-lot / --maker-fee-bps (negative: a rebate) go into the manifest, lobsurf
    info shows them and the device book carries them; without them nothing is recorded."""
    from lobsurf.data.dataset import load_book_tensors

    store = tmp_path / "s"
    assert main(["ingest", str(mbo_file(tmp_path)), "--out", str(store), "--no-progress",
                 "--multiplier", "50", "--fee-per-lot", "1", "--maker-fee-per-lot", "-0.2"]) == 0
    capsys.readouterr()
    instrument = Store.open(store).manifest.instruments[0]
    assert (instrument.maker_fee_per_lot, instrument.maker_fee_bps) == (-0.2, 0.0)
    book = load_book_tensors(Store.open(store))
    assert (book.maker_fee_per_lot, book.maker_fee_bps) == (-0.2, 0.0)
    assert main(["info", str(store)]) == 0
    assert ("maker fees   -0.2 per lot + 0 bps of notional (a rebate) (recorded at ingest)"
            in capsys.readouterr().out)
    assert main(["info", str(store), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["instruments"][0]
    assert (shown["maker_fee_per_lot"], shown["maker_fee_bps"]) == (-0.2, 0.0)
    bare = tmp_path / "bare"
    assert main(["ingest", str(mbo_file(tmp_path)), "--out", str(bare), "--no-progress"]) == 0
    assert Store.open(bare).manifest.instruments[0].maker_fee_per_lot is None
    capsys.readouterr()
    assert main(["info", str(bare)]) == 0
    assert "maker fees   none recorded (resting orders pay the taker fee" in (
        capsys.readouterr().out)
    for value in ("nan", "-20000", "inf"):
        assert main(["ingest", str(mbo_file(tmp_path)), "--out", str(tmp_path / "x"),
                     "--no-progress", "--maker-fee-bps", value]) == 2
        err = capsys.readouterr().err
        assert "--maker-fee-bps" in err and err.count("\n") == 1, err


def test_a_store_written_before_maker_fees_loads_without_one(tiny_store):
    from lobsurf.data.dataset import load_book_tensors
    from lobsurf.data.store import StoreError

    path = tiny_store.path / "manifest.json"
    raw = json.loads(path.read_text())
    for instrument in raw["instruments"]:
        instrument.pop("maker_fee_per_lot", None), instrument.pop("maker_fee_bps", None)
    path.write_text(json.dumps(raw))
    book = load_book_tensors(Store.open(tiny_store.path))
    assert (book.maker_fee_per_lot, book.maker_fee_bps, book.has_trades) == (None, None, False)
    raw["instruments"][0]["maker_fee_bps"] = "cheap"
    path.write_text(json.dumps(raw))
    with pytest.raises(StoreError, match="malformed manifest entry: maker_fee_bps 'cheap'"):
        Store.open(tiny_store.path)
