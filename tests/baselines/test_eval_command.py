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
