"""Money facts (multiplier, currency) and the one-line errors of a bad store path.

DBN files carry no multiplier and no currency: without ``--multiplier``/``--currency`` or a
definitions file the store says "not given"/"unknown" instead of claiming 1 and USD.
"""

from __future__ import annotations

import json

import databento_dbn as dbn

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
