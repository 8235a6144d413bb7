"""The crypto path through the commands: ``lobsurf ingest`` of Binance recordings with a
bps fee, ``lobsurf info``, and (slow) ``lobsurf train`` -> ``lobsurf eval`` on a 24/7 store
that crosses midnight, with order sizes given in the base asset."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from lobsurf.cli import main
from tests.data.crypto_files import T0, random_recording, write_recording

FIXTURE = (Path(__file__).resolve().parent / "data" / "fixtures" / "binance"
           / "spot_btcusdt_20240808_head2000.gz")
TINY_NET = ["--set", "encoder.d_model=32", "--set", "encoder.n_layers=1", "--set",
            "sim.window=16", "--set", "network.q_hidden=32"]


def test_ingest_binance_with_bps_fee_and_info_show_unit_checks_and_fee(tmp_path, capsys):
    store = tmp_path / "s"
    assert main(["ingest", str(FIXTURE), "--out", str(store), "--format", "binance",
                 "--fee-bps", "5", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "size unit 0.00001 of the base asset (the gcd of the sizes" in err
    assert "warning" not in err  # spot: base-asset quantities, the multiplier is known
    assert main(["info", str(store)]) == 0
    info = capsys.readouterr().out
    assert "binance:BTCUSDT" in info and "multiplier 1e-05" in info
    assert "sizes in units of 0.00001 base asset" in info and "trades 24/7" in info
    assert "bookTicker 21 of 21 id-aligned messages agree" in info and "(100.00 %" in info
    assert "depth gaps   0" in info and "0 per lot + 5 bps of notional" in info
    assert main(["info", str(store), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    inst = summary["instruments"][0]
    assert (inst["size_unit"], inst["market_hours"], inst["fee_bps"]) == (0.00001, "24/7", 5.0)
    assert summary["cross_checks"]["book_ticker_agree"] == 21


def test_ingest_size_unit_flag_and_a_bad_one(tmp_path, capsys):
    store = tmp_path / "s"
    assert main(["ingest", str(FIXTURE), "--out", str(store), "--size-unit", "0.000001",
                 "--no-progress"]) == 0
    assert "size unit 0.000001 of the base asset (given)" in capsys.readouterr().err
    assert main(["ingest", str(FIXTURE), "--out", str(store), "--overwrite", "--size-unit",
                 "-1", "--no-progress"]) == 2
    assert "--size-unit -1 must be > 0" in capsys.readouterr().err


@pytest.mark.slow
def test_ingest_train_eval_end_to_end_on_a_24_7_store_across_midnight(tmp_path, capsys):
    end_to_end(tmp_path, capsys, "cpu")


@pytest.mark.gpu
def test_ingest_train_eval_end_to_end_on_the_gpu(tmp_path, capsys):
    end_to_end(tmp_path, capsys, "cuda")


def end_to_end(tmp_path: Path, capsys, device: str) -> None:
    lines = random_recording(6000, seed=11, start_ns=T0 + 300 * 10**9)  # 23:55 .. 00:05
    cut = next(i for i, (ts, _) in enumerate(lines) if ts >= T0 + 600 * 10**9)
    files = [write_recording(tmp_path / "btcusdt_20240808.gz", lines[:cut]),
             write_recording(tmp_path / "btcusdt_20240809.gz", lines[cut:])]
    store, run = tmp_path / "store", tmp_path / "run"
    assert main(["ingest", *map(str, files), "--out", str(store), "--fee-bps", "5",
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["train", "--store", str(store), "--steps", "200", "--envs", "16", *TINY_NET,
                 "--set", "sim.lot_size_base=0.001", "--device", device, "--out", str(run),
                 "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "sim.lot_size_base 0.001 = 100 size units of 1e-05" in err
    assert "5 bps of notional" in err and "recorded in the store at ingest" in err
    saved = tomllib.loads((run / "config.toml").read_text())["sim"]
    assert saved["order_sizes_lots"] == [100, 200, 300, 400, 500]
    assert saved["position_limit_lots"] == 1000 and "lot_size_base" not in saved
    assert main(["eval", str(run), "--json", "--no-progress", "--device", device]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"agent", "hold", "random", "optimal"} <= set(result["policies"])
    random_policy = result["policies"]["random"]
    assert random_policy["trades"] > 0 and random_policy["fees"] > 0
    # the fee charged is 5 bps of notional: 2 x 5e-4 x ~60,000 x 0.001 BTC per 1-lot trip
    per_lot = random_policy["fees"] / random_policy["turnover_lots"]
    assert per_lot == pytest.approx(5e-4 * 60_000 * 0.00001, rel=0.01)
