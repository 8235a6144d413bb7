"""The sequence encoder: per-snapshot features of a window -> one embedding per window.

    x [B, K, F] --input_proj--> [B, K, D] --n_layers blocks--> final RMSNorm --> EncoderOutput

Blocks are Mamba2 (``mamba2.py``, chunked SSD) or CfC (``cfc.py``, closed-form
continuous-time cells that read the gap between snapshots), chosen by ``EncoderConfig.kind``.
Mamba2 treats the window as evenly spaced steps (the features hold the log time since the
previous snapshot); CfC also uses ``log_dt`` as the elapsed time of its gate.

``forward(..., return_sequence=False)`` is the cheap path when only the last embedding is
used (the RL heads): the last Mamba2 layer then computes its final state and one output row.
``use_kernels_`` chooses the Triton kernels or the PyTorch path for the whole stack.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from lobsurf.models.align import device_multiple, linear_padded_in
from lobsurf.models.cfc import CfCBlock, elapsed_time, typical_gap_scale
from lobsurf.models.config import EncoderConfig
from lobsurf.models.kernels.triton_support import use_kernels_
from lobsurf.models.mamba2 import Mamba2Block, rms_norm

__all__ = ["Encoder", "EncoderConfig", "EncoderOutput"]


class EncoderOutput(NamedTuple):
    """Encoder result.

    Attributes:
        last: [B, D] embedding of the last (most recent) snapshot of each window.
        sequence: [B, K, D] embeddings of every position (causal: position k sees only
            snapshots <= k); None when the encoder was called with return_sequence=False.
    """

    last: torch.Tensor
    sequence: torch.Tensor | None


class Encoder(nn.Module):
    """Input projection, a stack of Mamba2 or CfC blocks, and a final RMSNorm."""

    def __init__(self, cfg: EncoderConfig, in_features: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.in_features = in_features
        self.input_proj = nn.Linear(in_features, cfg.d_model)
        block = Mamba2Block if cfg.kind == "mamba2" else CfCBlock
        self.blocks = nn.ModuleList(block(cfg) for _ in range(cfg.n_layers))
        self.final_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        # CfC: gap scale, 0-d, starts at 1; fit_time_scale_ sets it from training data. A
        # buffer, so checkpoints carry it and graphs read it in place.
        self.register_buffer("time_scale", torch.tensor(1.0))

    def use_kernels_(self, mode: str) -> Encoder:
        """Every block's ``kernels`` mode (``Mamba2Mixer.kernels``): "auto" (the default)
        the Triton kernels on CUDA, "off" the PyTorch path everywhere, "on" the kernels
        wherever Triton runs (on the CPU under its interpreter). Returns self."""
        return use_kernels_(self, mode)

    @torch.no_grad()
    def fit_time_scale_(self, log_dt: torch.Tensor) -> Encoder:
        """Set the CfC gap scale so the median gap of ``log_dt`` (training rows only) is 1."""
        self.time_scale.copy_(typical_gap_scale(log_dt))
        return self

    def forward(self, x: torch.Tensor, log_dt: torch.Tensor,
                return_sequence: bool = True) -> EncoderOutput:
        """Encode B windows of K snapshots.

        Args:
            x: [B, K, F] float features, oldest snapshot first.
            log_dt: [B, K] natural log of the time since the previous snapshot (the unit is
                the feature module's; the ``time_scale`` buffer converts it for CfC).
            return_sequence: also return the [B, K, D] sequence; False lets the last Mamba2
                layer skip every output row but the last.

        Returns:
            EncoderOutput(last [B, D], sequence [B, K, D] or None).
        """
        # [B, K, D]; the feature axis padded to an aligned width on CUDA (models/align.py)
        h = linear_padded_in(x, self.input_proj.weight, self.input_proj.bias,
                             device_multiple(x))
        if self.cfg.kind == "cfc":
            t = elapsed_time(log_dt, self.cfg, self.time_scale)  # [B, K]
            for blk in self.blocks:
                h = blk(h, t)
            last_h = h[:, -1]
        else:
            n = len(self.blocks)
            for i, blk in enumerate(self.blocks):
                if not return_sequence and i == n - 1:
                    last_h = blk(h, last_only=True)  # [B, D]
                else:
                    h = blk(h)
            if return_sequence:
                last_h = h[:, -1]
        if not return_sequence:
            return EncoderOutput(last=rms_norm(self.final_norm, last_h), sequence=None)
        sequence = rms_norm(self.final_norm, h)
        return EncoderOutput(last=sequence[:, -1], sequence=sequence)
