"""Save and load a pretraining checkpoint that the RL trainer can start from.

A checkpoint is one ``torch.save`` file holding plain types only (loadable with
``weights_only=True``):

    format        "lobsurf-pretrain"
    version       1
    config        PretrainConfig as a dict (labels, features, encoder, heads nested)
    feature_names the F feature names, in input order (a guard against layout drift)
    state_dict    PretrainModel weights, including the normaliser's mean/scale buffers
    meta          free-form run facts (steps, split rows, held-out metrics)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lobsurf.models.features import feature_names
from lobsurf.pretrain.config import PretrainConfig, config_from_dict, config_to_dict
from lobsurf.pretrain.model import PretrainModel

CHECKPOINT_FORMAT = "lobsurf-pretrain"
CHECKPOINT_VERSION = 1
#: File name of the checkpoint inside a run folder.
CHECKPOINT_NAME = "pretrain.pt"


@dataclass
class LoadedPretrain:
    """A loaded checkpoint: the model (eval mode, on the requested device), its config and meta."""

    model: PretrainModel
    config: PretrainConfig
    meta: dict[str, Any]


def save_checkpoint(path: str | os.PathLike, model: PretrainModel, cfg: PretrainConfig,
                    meta: dict[str, Any]) -> Path:
    """Write the checkpoint file (to a temporary name first, then renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "config": config_to_dict(cfg),
        "feature_names": feature_names(cfg.features),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "meta": meta,
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)
    return path


def load_checkpoint(path: str | os.PathLike, device: torch.device | str = "cpu") -> LoadedPretrain:
    """Load a checkpoint written by ``save_checkpoint`` (a run folder or the file itself).

    Raises:
        ValueError: not a lobsurf pretrain checkpoint, or its feature layout differs from
            this version's.
    """
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: not a lobsurf pretrain checkpoint")
    if payload.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"{path}: checkpoint version {payload.get('version')} is not "
                         f"{CHECKPOINT_VERSION}")
    cfg = config_from_dict(payload["config"])
    if payload["feature_names"] != feature_names(cfg.features):
        raise ValueError(f"{path}: feature layout differs from this version of lobsurf")
    model = PretrainModel(cfg)
    model.load_state_dict(payload["state_dict"])
    return LoadedPretrain(model=model.to(device).eval(), config=cfg, meta=payload["meta"])
