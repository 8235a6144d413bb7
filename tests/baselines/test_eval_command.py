"""The real CLI: ``lobsurf eval baseline:NAME --store STORE --json`` on a tiny store."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lobsurf.data.store import Store

ARGS = ["--envs", "8", "--steps", "300", "--window", "16", "--fee-per-lot", "0.5", "--json"]


def lobsurf_eval(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lobsurf.cli", "eval", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def store_path(tiny_store: Store) -> str:
    return str(tiny_store.path)


def test_eval_json_hold_zero_and_oracle_positive(store_path: str) -> None:
    out = {}
    for name in ("hold", "oracle"):
        proc = lobsurf_eval(f"baseline:{name}", "--store", store_path, *ARGS)
        assert proc.returncode == 0, proc.stderr
        out[name] = json.loads(proc.stdout)
    assert out["hold"]["net_pnl"] == 0.0 and out["hold"]["trades"] == 0
    assert out["oracle"]["net_pnl"] > 0 and out["oracle"]["trades"] > 0


def test_eval_rejects_unknown_policy(store_path: str) -> None:
    proc = lobsurf_eval("baseline:nope", "--store", store_path)
    assert proc.returncode == 2 and "unknown policy" in proc.stderr


def test_eval_user_errors_are_one_line(store_path: str, tmp_path) -> None:
    # Run in-process: each case must exit 2 with one line on stderr, no traceback.
    import contextlib
    import io

    from lobsurf.cli import main
    from lobsurf.data.store import Instrument, StoreWriter
    from tests.conftest import TICK_FIXED, random_walk_books

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
        ("--lookback", "0"): "momentum lookback must be >= 1",
        ("--threshold", "-1"): "momentum threshold must be >= 0",
        ("--threshold", "nan"): "momentum threshold must be >= 0",
        ("--fee-per-lot", "nan"): "fees must be finite and >= 0",
        ("--fee-bps", "-1"): "fees must be finite and >= 0",
        ("--horizon", "0"): "oracle horizon must be >= 1",
        ("--store", str(two.path)): "choose one with instrument_id (--instrument-id)",
        ("--store", str(two.path), "--instrument-id", "9"): "instrument 9 not in store",
    }
    for extra, says in cases.items():
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["eval", "baseline:momentum", "--store", store_path, *extra])
        assert code == 2, extra
        assert says in err.getvalue() and len(err.getvalue().strip().splitlines()) == 1, extra
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["eval", "baseline:hold", "--store", str(two.path), "--instrument-id", "7",
                     "--envs", "2", "--steps", "5", "--window", "8", "--json"]) == 0
    assert json.loads(out.getvalue())["steps"] == 10
