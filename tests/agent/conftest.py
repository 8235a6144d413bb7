"""A tiny training setup (small encoder, small replay) on the shared tiny store."""

from __future__ import annotations

from pathlib import Path

import pytest

from lobsurf.train.config import run_config_from_dict
from lobsurf.train.data import load_training_data
from lobsurf.train.loop import build_state, step_config

TINY = {
    "sim": {"window": 8, "max_episode_steps": 50},
    "labels": {"horizons_snapshots": [2, 4, 8]},
    "encoder": {"d_model": 16, "n_layers": 1, "d_state": 8, "headdim": 8, "chunk_size": 8},
    "network": {"q_hidden": 16},
    "replay": {"capacity": 512},
    "learner": {"learning_starts": 4},
    "train": {"envs": 8, "steps": 20, "log_every": 5, "checkpoint_every": 10},
    "data": {"normalizer_rows": 500},
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
