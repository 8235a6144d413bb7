"""``lobsurf bench`` runs on CPU (eager only) at a tiny shape and writes every figure."""

from __future__ import annotations

import json

import pytest

from lobsurf.cli import main

ROW_KEYS = {"batch", "layers", "precision", "kernels", "learner_batch", "replay_capacity",
            "eager", "graphed", "graph_nodes", "graph_kernel_nodes", "peak_gib", "phase_ms",
            "device_ops_per_step", "device_busy_ms_per_step", "top_ops", "gflop_per_step",
            "achieved_tflops", "graph_phase_ms", "compiled", "gb_per_step",
            "gb_read_per_step", "gb_written_per_step", "traffic_top_ops", "peaks",
            "achieved_tb_s", "tensor_core_fraction", "hbm_fraction"}
RATE_KEYS = {"ms_per_step", "ms_min", "ms_max", "steps_per_s", "transitions_learned_per_s",
             "env_steps_per_s"}


@pytest.fixture
def small_bench(monkeypatch):
    """The bench's real measurement of a tiny network (d_model 16, K 8) with one warm-up and
    one profiled step: what these tests check (every figure written, the flags honoured)
    does not depend on the network's size, and the training default's costs about fifteen
    seconds a row on a 2-core CPU."""
    from dataclasses import replace

    from lobsurf.bench import measure

    real_config, real_bench = measure.run_config, measure.BenchConfig

    def small_config(*args, **kwargs):
        cfg = real_config(*args, **kwargs)
        return replace(cfg, sim=replace(cfg.sim, window=8), encoder=replace(
            cfg.encoder, d_model=16, d_state=8, headdim=8, chunk_size=8),
            network=replace(cfg.network, q_hidden=16))

    monkeypatch.setattr(measure, "run_config", small_config)
    monkeypatch.setattr(measure, "BenchConfig", lambda **kw: real_bench(
        **{"warmup_steps": 1, "profile_steps": 1, **kw}))


def test_bench_runs_on_cpu_and_writes_every_key(small_bench, tmp_path, capsys) -> None:
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
        assert r["kernels"] == "auto"  # the default (PyTorch on CPU)
        assert set(r["eager"]) == RATE_KEYS
        assert r["graphed"] is None and r["graph_phase_ms"] is None  # CPU: eager only
        assert r["compiled"] is None  # compiled only on CUDA unless --compile
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
        assert abs(r["gb_per_step"] - r["gb_read_per_step"] - r["gb_written_per_step"]) < 1e-12
        assert r["gb_written_per_step"] > 0
        assert r["traffic_top_ops"][0]["gb_per_step"] <= r["gb_per_step"]
        # no peaks for a CPU: the fractions stay empty rather than invented
        assert r["peaks"] is None and r["hbm_fraction"] is None
        assert abs(r["achieved_tb_s"] / (r["gb_per_step"] / e["ms_per_step"]) - 1) < 1e-9
    printed = capsys.readouterr().out
    assert "eager/s" in printed and "phases of one eager step" in printed
    assert "roofline:" in printed and "peak unknown" in printed


def test_bench_takes_peaks_for_an_unlisted_device(small_bench, tmp_path, capsys) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "--device", "cpu", "--batch", "2", "--layers", "1", "--steps", "1",
                 "--repeats", "1", "--snapshots", "3000", "--peak-tflops", "2",
                 "--peak-tbs", "0.1", "--json", str(out)]) == 0
    r = json.loads(out.read_text())["rows"][0]
    assert r["peaks"]["hbm_tb_s"] == 0.1 and r["peaks"]["tf32_tflops"] == 2
    assert abs(r["hbm_fraction"] - r["achieved_tb_s"] / 0.1) < 1e-12
    assert abs(r["tensor_core_fraction"] - r["achieved_tflops"] / 2) < 1e-12
    assert "% of peak" in capsys.readouterr().out
    assert main(["bench", "--device", "cpu", "--peak-tflops", "2"]) == 2
    assert "go together" in capsys.readouterr().err


def test_bench_runs_each_precision(small_bench, tmp_path, capsys) -> None:
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


def test_the_memory_plan_counts_the_real_tensors(tiny_store, tmp_path) -> None:
    """Bytes per snapshot and per transition equal what a loaded book, its labels and a
    real replay hold, and the totals are the planned sizes times them."""
    from dataclasses import fields

    import torch

    from lobsurf.agent.replay import PrioritizedReplay
    from lobsurf.bench.memory_plan import PlanConfig, memory_plan
    from lobsurf.data.dataset import load_book_tensors
    from lobsurf.data.labels import compute_labels
    from lobsurf.data.store import Store
    from lobsurf.models.feature_table import with_feature_table
    from lobsurf.training.config import RunConfig

    cfg = RunConfig()
    book = load_book_tensors(Store.open(tiny_store.path), "cpu")
    n = len(book)
    per_row = [t for t in (getattr(book, f.name) for f in fields(book))
               if isinstance(t, torch.Tensor) and t.shape[:1] == (n,)]
    labels = compute_labels(book, cfg.labels)
    per_row += [getattr(labels, f.name) for f in fields(labels)]
    # the training book's feature table
    per_row.append(with_feature_table(book, cfg.features).features)
    want_snapshot = sum(t.numel() * t.element_size() for t in per_row) // n
    cap = 16
    from dataclasses import replace
    replay = PrioritizedReplay(replace(cfg.replay, capacity=cap), "cpu", 0)
    slots = [*replay.storage.stored().values(), replay.weight]
    want_transition = sum(t.numel() * t.element_size() for t in slots) // cap

    plan = memory_plan("cpu", PlanConfig(snapshots=1000, transitions=100), cfg)
    assert plan["bytes_per_snapshot"] == want_snapshot
    assert plan["bytes_per_transition"] == want_transition
    assert plan["dataset_gib"] * (1 << 30) == 1000 * want_snapshot
    assert plan["replay_gib"] * (1 << 30) == 100 * want_transition
    assert plan["fits"] is None or plan["fits"] == (plan["state_gib"] < plan["device_total_gib"])


def test_bench_prints_the_memory_plan(small_bench, tmp_path, capsys) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "--device", "cpu", "--batch", "2", "--layers", "1", "--steps", "1",
                 "--repeats", "1", "--snapshots", "3000", "--plan-snapshots", "5000000",
                 "--plan-transitions", "400000", "--json", str(out)]) == 0
    plan = json.loads(out.read_text())["memory_plan"]
    assert (plan["snapshots"], plan["transitions"]) == (5_000_000, 400_000)
    assert "memory plan: 5,000,000 snapshots" in capsys.readouterr().out
    assert main(["bench", "--device", "cpu", "--plan-transitions", "0"]) == 2


def test_roofline_line_says_when_the_per_op_count_exceeds_hbm() -> None:
    from lobsurf.commands.bench import roofline_line

    row = {"batch": 1024, "layers": 2, "precision": "bf16", "graphed": {"x": 1},
           "gflop_per_step": 166.4, "gb_per_step": 34.0, "gb_read_per_step": 20.0,
           "gb_written_per_step": 14.0, "achieved_tflops": 8.5, "tensor_core_fraction": 0.01,
           "achieved_tb_s": 1.74, "hbm_fraction": 0.36,
           "compiled": {"roofline": {"achieved_tflops": 34.9, "tensor_core_fraction": 0.035,
                                     "achieved_tb_s": 7.13, "hbm_fraction": 1.486}}}
    line = roofline_line(row)
    assert "149 % of peak if every op's bytes went through HBM" in line
    row["compiled"]["roofline"]["hbm_fraction"] = 0.15
    assert "fused kernels move less than the per-op count" in roofline_line(row)


def test_bench_times_the_step_with_passive_orders(small_bench, tmp_path, capsys) -> None:
    """``--passive-orders``: the step with resting orders (23 actions), said in the header."""
    out = tmp_path / "bench.json"
    rc = main(["bench", "--device", "cpu", "--batch", "2", "--layers", "1", "--steps", "1",
               "--repeats", "1", "--snapshots", "3000", "--passive-orders", "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["config"]["passive_orders"] is True and "23 actions" in doc["model"]
    assert doc["rows"][0]["eager"]["steps_per_s"] > 0
    assert "passive orders" in capsys.readouterr().out


def test_bench_passes_the_passive_switch_to_the_run(tmp_path) -> None:
    from lobsurf.bench.measure import BenchConfig, run_config

    assert run_config(tmp_path, 4, 1, "cpu", BenchConfig()).sim.passive_orders is False
    cfg = run_config(tmp_path, 4, 1, "cpu", BenchConfig(passive_orders=True))
    assert cfg.sim.passive_orders is True and cfg.sim.num_actions == 23


def test_bench_passes_the_kernel_switch_to_the_run(tmp_path) -> None:
    from lobsurf.bench.measure import BenchConfig, run_config

    assert run_config(tmp_path, 4, 1, "cpu", BenchConfig()).train.kernels is True
    assert run_config(tmp_path, 4, 1, "cpu", BenchConfig(kernels="off")).train.kernels is False


def test_bench_takes_the_encoders_kernel_mode_and_says_what_runs() -> None:
    import argparse

    from lobsurf.commands.bench import _config, add_arguments, kernels_note

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert _config(parser.parse_args([])).kernels == "auto"
    assert _config(parser.parse_args(["--kernels", "off"])).kernels == "off"
    with pytest.raises(SystemExit):
        parser.parse_args(["--kernels", "triton"])
    assert kernels_note("auto", cuda=True) == "kernels auto (Triton)"
    assert kernels_note("auto", cuda=False) == "kernels auto (PyTorch)"
    assert kernels_note("off", cuda=True) == "kernels off (PyTorch)"
    assert kernels_note("on", cuda=False) == "kernels on (Triton)"
