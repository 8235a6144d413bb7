"""A tiny training setup (small encoder, small replay) on the shared tiny store."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
import torch

from lobsurf.training.config import run_config_from_dict
from lobsurf.training.data import load_training_data
from lobsurf.training.run.state import build_state, step_config

TINY = {
    "sim": {"window": 8, "max_episode_steps": 50},
    "labels": {"horizons_snapshots": [2, 4, 8]},
    "encoder": {"d_model": 16, "n_layers": 1, "d_state": 8, "headdim": 8, "chunk_size": 8},
    "network": {"q_hidden": 16},
    "replay": {"capacity": 512},
    "learner": {"learning_starts": 4},
    # 15 validation trades in each half: the tiny store's validation slice (at
    # data.validation_fraction 0.2) has 39 decision rows
    "train": {"envs": 8, "steps": 20, "log_every": 5, "checkpoint_every": 10,
              "min_validation_trades": 15},
    # validation off: the simulator trains on every row before the held-out purge (the
    # tests of validation and model choice turn it on: tests/training/test_validation.py)
    "data": {"normalizer_rows": 500, "validation_fraction": 0.0},
}


def tiny_config(store: Path, **sections):
    values = {k: dict(v) for k, v in TINY.items()}
    for section, settings in sections.items():
        values.setdefault(section, {}).update(settings)
    values["data"]["store"] = str(store)
    return run_config_from_dict(values)


@pytest.fixture
def tiny_setup(tiny_store):
    """(cfg, data, state, step config) of a fresh tiny run on CPU."""
    cfg = tiny_config(tiny_store.path)
    data = load_training_data(cfg, "cpu", tiny_store.path)
    return cfg, data, build_state(cfg, data, "cpu"), step_config(cfg)


def assert_same_learning(plain, changed, learn_steps: int) -> None:
    """Two runs' states after the same steps from one seed, one of them with a setting that
    changes how, not what, the step computes: ``learn_steps`` learning steps each, the same
    replay bit for bit, every online parameter within rounding."""
    assert float(plain.metrics.learn_steps) == float(changed.metrics.learn_steps) == learn_steps
    for f in fields(plain.replay.storage):
        assert torch.equal(getattr(plain.replay.storage, f.name),
                           getattr(changed.replay.storage, f.name)), f.name
    for (name, a), b in zip(plain.online.named_parameters(), changed.online.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7, msg=name)
