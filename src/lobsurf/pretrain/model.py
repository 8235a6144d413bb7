"""The pretrained network: feature normaliser, encoder, direction and FRD heads.

``PretrainModel`` is what ``lobsurf pretrain`` trains and checkpoints, and what the RL
trainer loads to start from (``model.normalizer``, ``model.encoder``, ``model.direction``,
``model.frd``). Its forward takes a gathered ``Window`` and does the whole perception
path: features → normalisation (training-split statistics) → encoder → heads.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from lobsurf.data.dataset import Window
from lobsurf.models.encoder import Encoder
from lobsurf.models.features import FeatureNormalizer, snapshot_features
from lobsurf.models.heads import DirectionHead, FRDHead
from lobsurf.pretrain.config import PretrainConfig


class PretrainOutput(NamedTuple):
    """direction_logits [B, H] or [B, K, H]; frd_logits [B, H, C] or [B, K, H, C];
    embedding [B, D] (the last position's)."""

    direction_logits: torch.Tensor
    frd_logits: torch.Tensor
    embedding: torch.Tensor


class PretrainModel(nn.Module):
    """Features, normaliser, encoder and auxiliary heads of one pretraining run."""

    def __init__(self, cfg: PretrainConfig):
        super().__init__()
        self.feature_cfg = cfg.features
        num_features = cfg.features.num_features
        d = cfg.encoder.d_model
        self.normalizer = FeatureNormalizer(num_features, cfg.features)
        self.encoder = Encoder(cfg.encoder, in_features=num_features)
        self.direction = DirectionHead(d, cfg.labels.num_horizons, cfg.heads)
        self.frd = FRDHead(d, cfg.labels.num_horizons, cfg.labels.num_buckets, cfg.heads)

    def forward(self, window: Window, all_positions: bool = False) -> PretrainOutput:
        """Run the perception path on B windows of K snapshots.

        Args:
            window: [B, K, 10] book fields, oldest first.
            all_positions: heads on every position ([B, K, ...] logits) instead of the last.

        Returns:
            PretrainOutput.
        """
        feats = snapshot_features(window, self.feature_cfg)
        out = self.encoder(self.normalizer(feats.x), feats.log_dt, return_sequence=all_positions)
        h = out.sequence if all_positions else out.last
        return PretrainOutput(direction_logits=self.direction(h), frd_logits=self.frd(h),
                              embedding=out.last)
