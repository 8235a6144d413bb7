"""Pretraining: the learning test on synthetic data with an edge, its edge-free control,
checkpoint round trip, and the CLI's JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from lobsurf.cli import main
from lobsurf.data.dataset import gather_window, load_book_tensors
from lobsurf.data.labels import LabelConfig, compute_labels
from lobsurf.data.split import evenly_spaced, time_split, validation_tail
from lobsurf.data.synth import SynthConfig, write_synth_store
from lobsurf.models.config import EncoderConfig
from lobsurf.pretrain.checkpoint import load_checkpoint
from lobsurf.pretrain.config import PretrainConfig, config_from_dict, config_to_dict
from lobsurf.pretrain.loop import build_optimizer, pretrain, train_step, validation_loss
from lobsurf.pretrain.model import PretrainModel

SHORT, LONG = 10, 50


def _tiny_config(**over) -> PretrainConfig:
    # The learning test's model: d_model 32, one Mamba2 layer, K 16 (see the brief's budget).
    base = dict(
        window=16, batch_size=32, steps=200, lr=1e-3, lr_warmup_steps=20, train_fraction=0.67,
        labels=LabelConfig(horizons_snapshots=(SHORT, LONG)),
        encoder=EncoderConfig(kind="mamba2", d_model=32, n_layers=1, headdim=32, d_state=16),
        eval_max_windows=2000, logistic_max_rows=5000, seed=0,
    )
    base.update(over)
    return PretrainConfig(**base)


def _synth(path: Path, edge: float):
    # Three sessions of 6,000 snapshots: the cut falls at the start of the third.
    return write_synth_store(path, SynthConfig(snapshots_per_day=6000, days=3, seed=7, edge=edge))


@pytest.fixture(scope="module")
def edge_run(tmp_path_factory) -> tuple[dict, Path, object]:
    root = tmp_path_factory.mktemp("edge")
    store = _synth(root / "store", edge=1.0)
    result = pretrain(_tiny_config(), store, out_dir=root / "run", progress=False)
    return result, root / "run", store


def test_learning_beats_class_prior(edge_run) -> None:
    result, _, _ = edge_run
    short = result["horizons"][str(SHORT)]
    print(json.dumps(short))
    model, prior = short["model"], short["prior"]
    assert short["n_test"] >= 300
    # P(next mid move up) = 0.5 + 0.5 * I_t: a causal model reading the imbalance must win.
    assert model["accuracy"] >= prior["accuracy"] + 0.10
    assert model["log_loss"] <= prior["log_loss"] - 0.05
    assert result["cut_row"] == 12_000  # two sessions train, the third is held out
    assert math.isfinite(result["final_train_loss"])


def test_learning_with_cfc_encoder(tmp_path: Path) -> None:
    # The alternative encoder learns the same edge through the same loop.
    store = _synth(tmp_path / "store", edge=1.0)
    enc = EncoderConfig(kind="cfc", d_model=32, n_layers=1, cfc_backbone_units=32)
    result = pretrain(_tiny_config(encoder=enc), store, out_dir=None, progress=False)
    short = result["horizons"][str(SHORT)]
    print(json.dumps(short))
    assert short["model"]["accuracy"] >= short["prior"]["accuracy"] + 0.10


def test_no_skill_without_edge(tmp_path: Path) -> None:
    # The control: on edge-free data nothing is predictable, so a held-out log loss clearly
    # below ln 2 would mean a leak (split overlap, a non-causal encoder, shifted labels).
    store = _synth(tmp_path / "store", edge=0.0)
    result = pretrain(_tiny_config(), store, out_dir=None, progress=False)
    for h, r in result["horizons"].items():
        print(h, json.dumps(r))
        assert r["model"]["log_loss"] >= math.log(2) - 0.01
        assert r["logistic"]["log_loss"] >= math.log(2) - 0.01
    assert result["checkpoint"] is None


def test_checkpoint_round_trip(edge_run) -> None:
    result, run_dir, store = edge_run
    assert Path(result["checkpoint"]).is_file()
    assert json.loads((run_dir / "result.json").read_text())["horizons"] == result["horizons"]
    loaded = load_checkpoint(run_dir)
    assert loaded.config == _tiny_config()
    assert loaded.meta["result"]["cut_row"] == result["cut_row"]
    # The normaliser was fitted (not the identity) and travels with the weights.
    assert not torch.all(loaded.model.normalizer.scale == 1)
    book = load_book_tensors(store)
    window = gather_window(book, torch.tensor([100, 15_000]), 16)
    again = load_checkpoint(run_dir / "pretrain.pt")
    with torch.no_grad():
        a, b = loaded.model(window), again.model(window)
    assert torch.equal(a.direction_logits, b.direction_logits)
    assert a.frd_logits.shape == (2, 2, loaded.config.labels.num_buckets)


def test_config_dict_round_trip() -> None:
    cfg = _tiny_config(labels=LabelConfig(horizons_snapshots=(3, 7), bucket_edges_ticks=(-1.0, 1.0)))
    back = config_from_dict(json.loads(json.dumps(config_to_dict(cfg))))
    assert back == cfg
    with pytest.raises(ValueError):
        config_from_dict({**config_to_dict(cfg), "surprise": 1})
    # a checkpoint saved with a since-retired kernel choice (models.config.RETIRED_FIELDS)
    saved = config_to_dict(cfg)
    saved["encoder"] = {**saved["encoder"], "fused_training": "auto", "fused_warps": 4,
                        "weight_grads_beside": False, "scan_scores_in_head": False,
                        "gated_out": "torch"}
    assert config_from_dict(saved) == cfg
    with pytest.raises(TypeError):
        config_from_dict({**saved, "encoder": {**saved["encoder"], "surprise": 1}})


def test_cli_json(tiny_store, tmp_path: Path, capsys) -> None:
    argv = ["pretrain", "--store", str(tiny_store.path), "--steps", "4", "--batch", "8",
            "--window", "8", "--horizons", "5,20", "--d-model", "32", "--layers", "1",
            "--device", "cpu", "--out", str(tmp_path / "run"), "--json", "--no-progress"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)  # exactly one JSON object on stdout
    assert set(out["horizons"]) == {"5", "20"}
    for h in out["horizons"].values():
        for name in ("model", "prior", "logistic"):
            assert 0.0 <= h[name]["accuracy"] <= 1.0
            assert h[name]["log_loss"] > 0.0
    assert out["steps"] == 4 and Path(out["checkpoint"]).is_file()
    assert load_checkpoint(tmp_path / "run").config.encoder.d_model == 32


def test_cli_user_errors(tiny_store, tmp_path: Path, capsys) -> None:
    bad_store = ["pretrain", "--store", str(tmp_path / "nope"), "--steps", "1"]
    assert main(bad_store) == 2
    too_long = ["pretrain", "--store", str(tiny_store.path), "--steps", "1", "--window", "3000",
                "--out", str(tmp_path / "r"), "--device", "cpu"]
    assert main(too_long) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("lobsurf pretrain: error:") for line in err)


def test_cli_rejects_bad_out_and_device_before_training(tiny_store, tmp_path: Path,
                                                       capsys) -> None:
    # Checked up front: a run folder that is a file must not fail after the whole training.
    afile = tmp_path / "afile"
    afile.write_text("keep")
    base = ["pretrain", "--store", str(tiny_store.path), "--steps", "1", "--no-progress"]
    assert main([*base, "--out", str(afile), "--device", "cpu"]) == 2
    assert main([*base, "--out", str(tmp_path / "r"), "--device", "no-such-device"]) == 2
    assert main([*base, "--out", str(tmp_path / "r"), "--device", "cpu", "--lr", "nan"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err.pop().startswith("lobsurf pretrain: error: bad pretraining settings: need lr > 0")
    assert err[0] == f"lobsurf pretrain: error: --out {afile} is a file; pass a run folder"
    assert err[1].startswith("lobsurf pretrain: error: device 'no-such-device' is not usable")
    assert len(err) == 2 and afile.read_text() == "keep" and not (tmp_path / "r").exists()


@pytest.mark.gpu
def test_train_step_has_no_host_sync_on_cuda(tiny_store) -> None:
    # Sync guard (STYLE 3.6): a stray .item()/.cpu() in the step fails here instead of
    # silently slowing GPU runs. Also checks the whole loop runs on CUDA.
    cfg = _tiny_config(device="cuda", steps=3, labels=LabelConfig(horizons_snapshots=(5, 20)))
    book = load_book_tensors(tiny_store, "cuda")
    labels = compute_labels(book, cfg.labels)
    split = time_split(book, cfg.window, 5, 20, cfg.train_fraction)
    model = PretrainModel(cfg).cuda()
    opt, _ = build_optimizer(model, cfg)
    gen = torch.Generator(device="cuda").manual_seed(0)
    train_step(model, opt, book, labels, split.train_rows, cfg, gen)  # warm-up (lazy state)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(2):
            loss = train_step(model, opt, book, labels, split.train_rows, cfg, gen)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(loss).item()
    result = pretrain(cfg, tiny_store, out_dir=None, progress=False)
    assert result["device"] == "cuda" and set(result["horizons"]) == {"5", "20"}


def test_early_stopping_keeps_the_best_validation_weights(tiny_store, tmp_path: Path) -> None:
    # A random walk has nothing to learn and a high learning rate overfits it at once, so
    # the best validation loss comes before the last step: the checkpoint must hold the
    # weights of that step (their validation loss, recomputed here, is the one reported).
    cfg = _tiny_config(window=8, steps=12, lr=1e-2, lr_warmup_steps=1, validate_every=3,
                       labels=LabelConfig(horizons_snapshots=(5, 20)), train_fraction=0.8)
    result = pretrain(cfg, tiny_store, out_dir=tmp_path / "run", progress=False)
    print(result["best_step"], result["validation_loss"])
    assert result["best_step"] in (3, 6, 9) and result["validation_windows"] > 0
    book = load_book_tensors(tiny_store)
    labels = compute_labels(book, cfg.labels)
    split = time_split(book, cfg.window, 5, 20, cfg.train_fraction)
    _, tail = validation_tail(split.train_rows, cfg.validation_fraction, cfg.window, 20)
    tail = evenly_spaced(tail, cfg.validation_max_windows)
    model = load_checkpoint(tmp_path / "run").model
    again = validation_loss(model, book, labels, tail, cfg)
    assert again == pytest.approx(result["validation_loss"], rel=1e-6)
    # Without a tail there is no early stopping: the last weights are kept.
    plain = pretrain(_tiny_config(window=8, steps=3, validation_fraction=0.0,
                                  labels=LabelConfig(horizons_snapshots=(5, 20))),
                     tiny_store, out_dir=None, progress=False)
    assert plain["best_step"] == 3 and plain["validation_loss"] is None
    assert plain["validation_windows"] == 0
