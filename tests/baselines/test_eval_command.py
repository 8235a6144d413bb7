"""The real CLI: ``lobsurf eval baseline:NAME ... --store STORE --json`` on a tiny store."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys

import pytest

from lobsurf.cli import main
from lobsurf.data.store import Instrument, Store, StoreWriter
from tests.conftest import TICK_FIXED, random_walk_books, write_store

ARGS = ["--envs", "8", "--window", "16", "--fee-per-lot", "0.5", "--json"]


def lobsurf_eval(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lobsurf.cli", "eval", *args],
                          capture_output=True, text=True, timeout=120)


def run_main(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["eval", *args])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def store_path(tiny_store: Store) -> str:
    return str(tiny_store.path)


def test_eval_json_heldout_sweep(store_path: str) -> None:
    proc = lobsurf_eval("baseline:hold", "baseline:oracle", "baseline:imbalance",
                        "--store", store_path, *ARGS)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    hold, oracle = out["policies"]["hold"], out["policies"]["oracle"]
    assert hold["net_pnl"] == 0.0 and hold["trades"] == 0
    assert oracle["net_pnl"] > 0 and oracle["trades"] > 0
    # the held-out side of the tiny store: its second segment minus the window's rows
    assert out["split"]["mode"] == "heldout" and out["split"]["cut_row"] == 2000
    assert out["split"]["rows"] == hold["steps"] == out["settings"]["steps"]
    assert out["settings"]["store"] == store_path and out["settings"]["num_envs"] == 8
    assert out["settings"]["sim"]["fee_per_lot"] == 0.5
    assert "imbalance_threshold" in out["settings"]["baselines"]
    again = json.loads(lobsurf_eval("baseline:hold", "baseline:oracle", "baseline:imbalance",
                                    "--store", store_path, *ARGS).stdout)
    assert again == out  # deterministic


def test_eval_text_and_json_agree_on_steps(store_path: str) -> None:
    code, out, _ = run_main("baseline:hold", "--store", store_path, "--split", "random",
                            "--envs", "2", "--steps", "5", "--window", "8")
    assert code == 0 and "2 envs x 5 steps = 10 steps" in out
    code, out, _ = run_main("baseline:hold", "--store", store_path, "--split", "random",
                            "--envs", "2", "--steps", "5", "--window", "8", "--json")
    result = json.loads(out)
    assert result["policies"]["hold"]["steps"] == result["settings"]["steps"] == 10
    code, out, _ = run_main("baseline:hold", "--store", store_path, "--split", "all",
                            "--envs", "3", "--window", "8")
    # every row but the first 7 of each segment; the last of each cannot fill (latency 1)
    assert code == 0 and f"{3500 - 2 * 7 - 2:,} steps (one per row)" in out
    code, out, _ = run_main("baseline:hold", "--store", store_path, "--split", "all",
                            "--envs", "3", "--window", "8", "--stride", "5", "--json")
    result = json.loads(out)
    rows = 3500 - 2 * 7 - 2
    assert result["split"]["rows"] == rows and result["settings"]["sim"]["stride"] == 5
    # two runs (one per segment), each decided every 5th row from its first
    assert result["split"]["decision_rows"] == result["settings"]["steps"] < rows / 4


def test_eval_rejects_unknown_policy(store_path: str) -> None:
    proc = lobsurf_eval("baseline:nope", "--store", store_path)
    assert proc.returncode == 2 and "unknown policy" in proc.stderr


def test_eval_warns_on_reused_rows_and_absurd_fees(tmp_path) -> None:
    small = write_store(tmp_path / "small", [random_walk_books(100, seed=1)])
    code, _, err = run_main("baseline:hold", "--store", str(small.path), "--split", "random",
                            "--window", "8")
    assert code == 0 and "64 envs x 2000 steps over 92 tradeable rows" in err
    code, _, err = run_main("baseline:hold", "--store", str(small.path), "--split", "random",
                            "--window", "8", "--steps", "2", "--envs", "2", "--fee-bps", "500")
    assert code == 0 and "5% of notional" in err and "tradeable rows" not in err
    code, _, err = run_main("baseline:hold", "--store", str(small.path), "--fee-bps", "100000")
    assert code == 2 and "at most 10000" in err
    code, _, err = run_main("baseline:hold", "--store", str(small.path), "--split", "all",
                            "--window", "8")
    assert code == 0 and "only 92 rows to sweep (all)" in err
    code, _, err = run_main("baseline:hold", "--store", str(small.path))
    assert code == 2 and "store too small to split" in err


def test_eval_user_errors_are_one_line_and_name_flags(store_path: str, tmp_path) -> None:
    with StoreWriter(tmp_path / "two", gap_threshold_ns=10**12) as writer:
        for inst in (1, 7):
            writer.add_instrument(Instrument(inst, f"I{inst}", TICK_FIXED))
            writer.begin_source(f"file{inst}")
            writer.append(random_walk_books(300, inst, instrument_id=inst))
        writer.close()
    two = Store.open(tmp_path / "two")
    cases = {
        ("--device", "no-such-device"): "device 'no-such-device' is not usable",
        ("--order-sizes", "1,x"): "--order-sizes must be comma-separated whole lots",
        ("--order-sizes", "0"): "--order-sizes must be positive lots",
        ("--horizons", "10,abc"): "--horizons must be comma-separated whole numbers",
        ("--envs", "0"): "--envs must be >= 1",
        ("--latency-rows", "-1"): "--latency-rows must be >= 0",
        ("--lookback", "0"): "--lookback must be >= 1",
        ("--threshold", "-1"): "--threshold must be >= 0",
        ("--threshold", "nan"): "--threshold must be >= 0",
        ("--imbalance-threshold", "2"): "--imbalance-threshold must be in [0, 1]",
        ("--fee-per-lot", "nan"): "--fee-per-lot and --fee-bps must be finite and >= 0",
        ("--fee-bps", "-1"): "--fee-per-lot and --fee-bps must be finite and >= 0",
        ("--horizon", "0"): "--horizon must be >= 1",
        ("--size-index", "9"): "--size-index 9 outside the 5 order sizes",
        ("--stride", "0"): "stride must be >= 1",
        ("--store", str(two.path)): "choose one with instrument_id (--instrument-id)",
        ("--store", str(two.path), "--instrument-id", "9"): "instrument 9 not in store",
    }
    for extra, says in cases.items():
        code, _, err = run_main("baseline:momentum", "--store", store_path, "--window", "17", *extra)
        assert code == 2, extra
        # the line naming the fee (stated once the store is read) may come first
        lines = [line for line in err.strip().splitlines() if not line.startswith("eval: fee ")]
        assert says in err and len(lines) == 1, (extra, err)
    code, out, _ = run_main("baseline:hold", "--store", str(two.path), "--instrument-id", "7",
                            "--envs", "2", "--window", "8", "--train-fraction", "0.5",
                            "--split", "random", "--steps", "5", "--json")
    assert code == 0 and json.loads(out)["policies"]["hold"]["steps"] == 10
