"""Ingest end to end through the real CLI: real samples, summaries, errors, chunking."""

from __future__ import annotations

import json

import numpy as np

from lobsurf.cli import main
from lobsurf.data.ingest import IngestConfig, ingest
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
    # 8 files: 4 ES copies of 2, ES 4, Brent 4 (empty book), TTF 4 (partial book), NVDA 4.
    assert info["skipped"] == {"empty_book": 4, "one_sided_book": 2}
    assert info["snapshots"] == 2 * 4 + 4 + 4 + 2
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
    brent = shared_data / "databento-python" / "IFEU.IMPACT" / "test_data.mbp-10.dbn.zst"
    assert main(["ingest", str(brent), "--out", str(tmp_path / "s")]) == 2
    assert "no valid snapshots in the input; skipped: empty_book=4" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
