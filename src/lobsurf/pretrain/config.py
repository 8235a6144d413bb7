"""Configuration of supervised pretraining: one frozen dataclass nesting the parts' configs.

``PretrainConfig`` composes the label, feature, encoder and head configs with the training
and evaluation settings. ``config_to_dict`` / ``config_from_dict`` turn it into plain JSON
types and back, for the run folder and the checkpoint (which the RL trainer reads).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from lobsurf.data.labels import LabelConfig
from lobsurf.models.config import EncoderConfig, without_retired
from lobsurf.models.features import FeatureConfig
from lobsurf.models.heads import HeadConfig


#: Book levels (and OFI levels) of pretraining's default features: the best bid and ask.
TOP_OF_BOOK_LEVELS = 1


@dataclass(frozen=True)
class PretrainConfig:
    """Supervised pretraining of the encoder and the direction/FRD heads."""

    window: int = 64
    """K: snapshots per window (the newest is the one whose labels are predicted)."""
    batch_size: int = 256
    """Windows per optimisation step."""
    steps: int = 2000
    """Optimisation steps."""
    lr: float = 3e-4
    """Peak AdamW learning rate (losses are batch means, so it does not depend on B). 1e-3
    reached its best validation loss within 25-75 steps on the ES store and overfitted
    after; 3e-4 gets there more slowly and lands better (docs/pretrain.md, "Perception
    quality")."""
    lr_warmup_steps: int = 50
    """Steps of linear warm-up from 0 to ``lr``; then cosine decay."""
    lr_final_fraction: float = 0.1
    """The cosine decay ends at lr * this at the last step."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay."""
    grad_clip_norm: float = 1.0
    """Global gradient-norm clip (0 disables)."""
    frd_weight: float = 0.5
    """Weight of the FRD cross-entropy next to the direction BCE (weight 1)."""
    supervise_all_positions: bool = True
    """Train on the labels of every position of a window (the encoder is causal, so each
    position sees only its past): K labelled samples per window instead of one."""
    train_fraction: float = 0.8
    """Target share of the rows before the train/test cut."""
    split_at_segment: bool = True
    """Cut at the segment (session) boundary nearest the target share when there are several."""
    validation_fraction: float = 0.1
    """Latest share of the training windows held back, purged, for early stopping: the run
    keeps the weights of the best validation loss. 0 trains on every training window and
    keeps the last weights."""
    validate_every: int = 25
    """Steps between validation losses (each is one deliberate host sync)."""
    validation_max_windows: int = 2000
    """Validation windows scored (evenly spaced over the tail when there are more)."""
    normalizer_rows: int = 100_000
    """Training rows sampled (at most) to fit the feature normaliser."""
    eval_max_windows: int = 20_000
    """Held-out windows evaluated (evenly spaced over the test split when there are more)."""
    eval_batch_size: int = 1024
    """Windows per evaluation forward pass."""
    logistic_max_rows: int = 50_000
    """Training rows (at most, evenly spaced) for the logistic-regression baseline."""
    logistic_iterations: int = 100
    """L-BFGS iterations of the logistic-regression baseline."""
    logistic_l2: float = 1e-4
    """L2 penalty on the logistic-regression weights (per feature, on standardised features)."""
    log_every: int = 25
    """Steps between progress-bar loss updates (each is one deliberate host sync)."""
    seed: int = 0
    """Seeds parameter init, batch sampling and the normaliser's row sample."""
    device: str = "cpu"
    """Torch device of the data, the model and the training."""
    cuda_matmul_precision: Literal["highest", "high", "medium"] = "high"
    """``torch.set_float32_matmul_precision`` during a run on CUDA ("high" = TF32); CPU runs
    keep the caller's setting, so tests stay exact."""
    labels: LabelConfig = field(default_factory=LabelConfig)
    features: FeatureConfig = field(default_factory=lambda: FeatureConfig(
        book_levels=TOP_OF_BOOK_LEVELS, ofi_levels=TOP_OF_BOOK_LEVELS))
    """Per-snapshot features; by default those of the top of the book only. The deeper
    levels' slowly changing sizes and prices let the window model memorise the training
    session's regime (on the ES store it overfitted within 50 steps at every horizon) while
    adding little that generalises; a run can still ask for more levels."""
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    heads: HeadConfig = field(default_factory=HeadConfig)

    def __post_init__(self) -> None:
        positive = ("window", "batch_size", "steps", "normalizer_rows", "eval_max_windows",
                    "eval_batch_size", "logistic_max_rows", "logistic_iterations", "log_every",
                    "validate_every", "validation_max_windows")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must be in [0, 1): {self.validation_fraction}")
        if not 0.0 < self.train_fraction < 1.0:
            raise ValueError(f"train_fraction must be in (0, 1): {self.train_fraction}")
        if not 0 < self.lr < math.inf or self.lr_warmup_steps < 0 or not 0 <= self.lr_final_fraction <= 1:
            raise ValueError("need lr > 0, lr_warmup_steps >= 0, 0 <= lr_final_fraction <= 1")


_NESTED = {"labels": LabelConfig, "features": FeatureConfig, "encoder": EncoderConfig,
           "heads": HeadConfig}


def config_to_dict(cfg: PretrainConfig) -> dict[str, Any]:
    """Plain JSON-able dict of the config (tuples become lists)."""
    return asdict(cfg)


def _tuples(d: dict[str, Any]) -> dict[str, Any]:
    # JSON turns tuples into lists; the frozen configs hold tuples (hashable).
    return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}


def config_from_dict(d: dict[str, Any]) -> PretrainConfig:
    """Inverse of ``config_to_dict``; unknown keys raise (a checkpoint from another version),
    except the encoder's retired fields (``models.config.RETIRED_FIELDS``), dropped."""
    known = {f.name for f in fields(PretrainConfig)}
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"unknown pretrain config keys: {sorted(unknown)}")
    d = {**d, "encoder": without_retired(d["encoder"])} if "encoder" in d else d
    kwargs = {k: (_NESTED[k](**_tuples(v)) if k in _NESTED else v) for k, v in d.items()}
    return PretrainConfig(**kwargs)
