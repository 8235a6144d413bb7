"""Configuration of the sequence encoders (Mamba2 and CfC), one frozen dataclass.

Kept apart from ``encoder.py`` so that the blocks (``mamba2.py``, ``cfc.py``) can take the
same config object without a circular import; ``lobsurf.models.encoder`` re-exports it.
Every field is a shape or an initialisation a researcher may change; which kernels compute
the block is not configuration (``Encoder.use_kernels_``), and kernel tuning constants
live beside their kernels (``lobsurf.models.kernels``). Symbols used in shape comments
across ``models/``:

    B batch (windows), L or K sequence length (snapshots), D d_model,
    E d_inner = expand * D, H heads = E / headdim, P headdim, N d_state, W d_conv.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: where the figures behind a removed kernel choice or switch are
_MEASURED = "benchmarks/RESULTS.md, Defaults decided by measurement"
#: why the kernel choices and switches below went (one reason for all of them)
_KERNEL_CHOICE = f"a kernel choice: the default path always runs ({_MEASURED})"
_REMOVED_KERNEL = f"an experimental Triton kernel, removed: slower than the default path ({_MEASURED})"
_TUNING = "a kernel tuning constant, now beside its kernel in lobsurf.models.kernels"

RETIRED_FIELDS: dict[str, str] = {
    **{name: _REMOVED_KERNEL for name in (
        "fused_inference", "fused_training", "fused_core_programs", "fused_core_no_grad",
        "fused_warps", "fused_head_warps", "fused_in_proj", "scan_conv", "scan_conv_programs",
        "scan_conv_warps", "scan_scores_in_head", "gated_out")},
    "weight_grads_beside": "the projections' weight gradients on a second CUDA stream, "
    f"removed: slower where timed, and racy where a parameter's gradients are summed inside "
    f"the backward ({_MEASURED})",
    **{name: _KERNEL_CHOICE for name in (
        "ssd_backend", "conv_backend", "scan_gate", "scan_last_row", "scan_z_proj",
        "fold_norm_weights", "one_in_projection")},
    **{name: _TUNING for name in (
        "ssd_window_warps_fwd", "ssd_window_warps_bwd", "ssd_window_warps_fwd_last",
        "ssd_window_warps_bwd_last")},
    **{name: f"the warps of the multi-chunk Triton scan, removed with it: slower than the "
       f"default path ({_MEASURED})" for name in ("ssd_triton_warps_fwd", "ssd_triton_warps_bwd")},
    "cuda_gemm_align_bytes": "a tuning constant, now lobsurf.models.align.GEMM_ALIGN_BYTES",
    "in_proj_pad_multiple": "the in-projection padded with unused weight rows, removed: the "
    "products are padded at use instead (lobsurf.models.align)",
    "append_log_dt": "log dt appended to the features, off by default and removed: the "
    "features already hold the log time since the previous snapshot",
    "dt_init_floor": "an initialisation detail, now lobsurf.models.mamba2.DT_INIT_FLOOR",
    "cfc_time_scale": "the CfC gap scale's starting value: training and pretraining fit it "
    "from the data (Encoder.fit_time_scale_) and checkpoints carry it"}
"""Fields older configs may hold that no longer exist, and why each went. Each chose how
the same values were computed (which kernels, which stream, tuning), or an initialisation
the checkpoint carries, so a saved config is read without them (``without_retired``)."""


def without_retired(values: dict) -> dict:
    """A saved encoder config's fields (plain values) less ``RETIRED_FIELDS``."""
    return {k: v for k, v in values.items() if k not in RETIRED_FIELDS}


@dataclass(frozen=True)
class EncoderConfig:
    """Encoder shape and initialisation; every field is a plain number or choice."""

    kind: Literal["mamba2", "cfc"] = "mamba2"
    """Sequence model: Mamba2 blocks (chunked SSD scan) or CfC cells (sequential over K)."""
    d_model: int = 128
    """Width D of the residual stream and of the output embedding."""
    n_layers: int = 2
    """Number of stacked blocks."""
    norm_eps: float = 1e-5
    """Epsilon of every RMSNorm (pre-norms, gated norm, final norm), dimensionless."""

    # ---- Mamba2 (arXiv 2405.21060) ----
    d_state: int = 64
    """SSM state size N per head (one B/C group shared by all heads)."""
    headdim: int = 64
    """Channels P per SSM head; heads H = expand * d_model / headdim."""
    expand: int = 2
    """Inner width factor: E = expand * d_model."""
    d_conv: int = 4
    """Width W (in snapshots) of the causal depthwise convolution."""
    chunk_size: int = 64
    """SSD chunk length Q in snapshots; a window with K <= Q is one chunk (no inter-chunk pass,
    and on CUDA the one-chunk Triton scan)."""
    dt_min: float = 0.001
    """Lower end of the log-uniform initial step size dt (after softplus), in scan steps."""
    dt_max: float = 0.1
    """Upper end of the log-uniform initial step size dt, in scan steps."""
    a_init_min: float = 1.0
    """Lower end of the uniform init of -A (decay rate per unit dt), per head."""
    a_init_max: float = 16.0
    """Upper end of the uniform init of -A."""

    # ---- CfC (Hasani et al. 2022, Nature Machine Intelligence) ----
    cfc_backbone_units: int = 128
    """Width of the CfC backbone MLP that reads [input, hidden]."""
    cfc_backbone_layers: int = 1
    """Number of Linear + LeCun-tanh layers in the CfC backbone."""
    cfc_max_time: float = 100.0
    """Clamp of the scaled elapsed time t fed to the CfC gate (t = exp(log_dt) times the
    encoder's fitted gap scale, so a typical gap is 1), so that one long gap (a session
    break) cannot saturate the gate."""

    def __post_init__(self) -> None:
        if self.kind not in ("mamba2", "cfc"):
            raise ValueError(f"kind must be 'mamba2' or 'cfc', got {self.kind!r}")
        positive = ("d_model", "n_layers", "d_state", "headdim", "expand", "d_conv",
                    "chunk_size", "cfc_backbone_units", "cfc_backbone_layers")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.kind == "mamba2" and (self.expand * self.d_model) % self.headdim:
            raise ValueError(f"expand*d_model={self.expand * self.d_model} is not a multiple of "
                             f"headdim={self.headdim}")
        if not 0 < self.dt_min <= self.dt_max:
            raise ValueError("need 0 < dt_min <= dt_max")
        if not 0 < self.a_init_min <= self.a_init_max:
            raise ValueError("need 0 < a_init_min <= a_init_max")
        if not self.cfc_max_time > 0:
            raise ValueError(f"cfc_max_time must be > 0, got {self.cfc_max_time}")

    @property
    def d_inner(self) -> int:
        """E = expand * d_model."""
        return self.expand * self.d_model

    @property
    def n_heads(self) -> int:
        """H = E / headdim."""
        return self.d_inner // self.headdim
