"""A short CPU run on the bundled default data set: it is generated into the cache folder on
first use, and the C51 loss falls as the agent learns.

The logged l_q of a short run is not a clean learning curve: it is dominated by the
entropy of the bootstrapped targets of non-terminal steps (near-uniform early on, and
irreducible), and the atom span widens from [-1, 1] toward [-3, 1] over ~2,000 steps, so the
targets move. The test therefore scores the same replay sample and the same target network
with the trained network and with the run's initial network (same seeds), on the terminal
transitions, whose targets are the (scaled, clamped) rewards themselves.
"""

from __future__ import annotations

import pytest

import torch

from lobsurf.agent.step import losses
from lobsurf.cli import main
from lobsurf.train.checkpoint import list_checkpoints, load_payload, restore_state_
from lobsurf.train.config import resolve_run_config, load_toml
from lobsurf.train.data import DEFAULT_CACHE_NAME, load_training_data
from lobsurf.train.loop import build_state, step_config
from lobsurf.train.run_folder import read_metrics


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_default_data_and_q_loss_falls(cache_home, tmp_path):
    run = tmp_path / "run"
    small = ["encoder.d_model=32", "encoder.n_layers=1", "encoder.d_state=16",
             "encoder.headdim=16", "sim.window=16", "network.q_hidden=64",
             "replay.capacity=20000", "train.log_every=100", "learner.learning_starts=50"]
    args = ["train", "--no-progress", "--device", "cpu", "--steps", "1200", "--envs", "32",
            "--out", str(run)]
    for s in small:
        args += ["--set", s]
    assert main(args) == 0
    assert (cache_home / "lobsurf" / DEFAULT_CACHE_NAME / "store" / "manifest.json").is_file()
    records = read_metrics(run / "metrics.jsonl")
    assert records[0]["data"]["store"].startswith(str(cache_home))
    logged = [r["l_q"] for r in records if r.get("event") == "metrics" and r["l_q"] is not None]
    print("logged l_q by interval:", [round(x, 3) for x in logged])
    assert len(logged) >= 6 and all(x == x for x in logged)

    cfg = resolve_run_config(None, [], base=load_toml(str(run / "config.toml")))
    data = load_training_data(cfg, "cpu", records[0]["data"]["store"])
    trained = build_state(cfg, data, "cpu")
    restore_state_(trained, load_payload(list_checkpoints(run)[-1]))
    initial = build_state(cfg, data, "cpu")  # same seeds: the run's step-0 network
    initial.target.load_state_dict(trained.target.state_dict())
    initial.controllers.load_(trained.controllers.as_dict())
    scfg = step_config(cfg)
    with torch.no_grad():
        sample = trained.replay.sample(4096, trained.controllers.per_beta)
        done = sample.transitions.done
        after = losses(trained, data.train_book, sample, scfg).q_per_sample[done].mean()
        before = losses(initial, data.train_book, sample, scfg).q_per_sample[done].mean()
    print(f"C51 loss on {int(done.sum())} terminal transitions: initial network "
          f"{float(before):.4f}, trained {float(after):.4f}")
    assert int(done.sum()) > 100
    assert float(after) < 0.9 * float(before)
