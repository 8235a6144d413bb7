"""``lobsurf bench`` runs on CPU (eager only) at a tiny shape and writes every figure."""

from __future__ import annotations

import json

from lobsurf.cli import main

ROW_KEYS = {"batch", "layers", "precision", "learner_batch", "replay_capacity", "eager", "graphed",
            "graph_nodes", "graph_kernel_nodes", "peak_gib", "phase_ms",
            "device_ops_per_step", "device_busy_ms_per_step", "top_ops", "gflop_per_step",
            "achieved_tflops", "graph_phase_ms", "compiled"}
RATE_KEYS = {"ms_per_step", "ms_min", "ms_max", "steps_per_s", "transitions_learned_per_s",
             "env_steps_per_s"}


def test_bench_runs_on_cpu_and_writes_every_key(tmp_path, capsys) -> None:
    out = tmp_path / "bench.json"
    rc = main(["bench", "--device", "cpu", "--batch", "2,4", "--layers", "1", "--steps", "2",
               "--repeats", "1", "--snapshots", "3000", "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert {"device", "versions", "date", "tf32", "model", "config", "rows"} <= set(doc)
    assert doc["device"].startswith("cpu") and doc["tf32"] is False
    assert [r["batch"] for r in doc["rows"]] == [2, 4]
    for r in doc["rows"]:
        assert set(r) == ROW_KEYS
        assert set(r["eager"]) == RATE_KEYS
        assert r["graphed"] is None and r["graph_phase_ms"] is None  # CPU: eager only
        assert r["compiled"] is None  # not asked for
        e = r["eager"]
        assert e["ms_min"] <= e["ms_per_step"] <= e["ms_max"]
        assert abs(e["steps_per_s"] * e["ms_per_step"] - 1e3) < 1e-6
        assert e["env_steps_per_s"] == e["steps_per_s"] * r["batch"]
        ph = r["phase_ms"]
        for name in ("noise", "collect", "learn", "collect/simulator step",
                     "collect/online forward", "learn/backward", "learn/adam",
                     "learn/losses/target encoder", "learn/replay sample"):
            assert ph[name] > 0, name
        # children never exceed their parent (the rest is what the named ranges leave)
        assert ph["collect/(rest)"] >= 0 and ph["learn/(rest)"] >= 0
        assert r["gflop_per_step"] > 0
    printed = capsys.readouterr().out
    assert "eager/s" in printed and "phases of one eager step" in printed


def test_bench_runs_each_precision(tmp_path, capsys) -> None:
    out = tmp_path / "bench.json"
    rc = main(["bench", "--device", "cpu", "--batch", "2", "--layers", "1", "--steps", "1",
               "--repeats", "1", "--snapshots", "3000", "--precision", "fp32,bf16",
               "--json", str(out)])
    assert rc == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["precision"] for r in rows] == ["fp32", "bf16"]
    assert " bf16 " in capsys.readouterr().out


def test_bench_rejects_a_bad_precision(capsys) -> None:
    import pytest

    with pytest.raises(SystemExit):
        main(["bench", "--precision", "fp32,fp16"])
    assert "fp32, bf16" in capsys.readouterr().err


def test_bench_rejects_a_bad_batch_list(capsys) -> None:
    import pytest

    with pytest.raises(SystemExit):
        main(["bench", "--batch", "16,x"])
    assert "comma-separated integers" in capsys.readouterr().err
