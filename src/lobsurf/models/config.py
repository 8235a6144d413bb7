"""Configuration of the sequence encoders (Mamba2 and CfC), one frozen dataclass.

Kept apart from ``encoder.py`` so that the blocks (``mamba2.py``, ``cfc.py``) can take the
same config object without a circular import; ``lobsurf.models.encoder`` re-exports it.
Symbols used in shape comments across ``models/``:

    B batch (windows), L or K sequence length (snapshots), D d_model,
    E d_inner = expand * D, H heads = E / headdim, P headdim, N d_state, W d_conv.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args


SsdBackend = Literal["torch", "triton", "triton_window", "auto"]
SSD_BACKENDS: tuple[str, ...] = get_args(SsdBackend)
"""The SSD scan implementations ``EncoderConfig.ssd_backend`` takes."""
ConvBackend = Literal["torch", "triton", "triton_dpre", "triton_fwd", "triton_dx", "auto"]
CONV_BACKENDS: tuple[str, ...] = get_args(ConvBackend)
"""The causal conv + SiLU implementations ``EncoderConfig.conv_backend`` takes."""
CONV_AUTO_ON_CUDA: ConvBackend = "triton_dx"
"""What ``conv_backend = "auto"`` runs on CUDA (benchmarks/RESULTS.md says why)."""

#: why the retired kernel-choice fields below went (one reason for all of them)
_KERNEL_CHOICE = ("an experimental Triton kernel choice, removed after the H200 measured it "
                  "slower than the default path (benchmarks/RESULTS.md, twenty-sixth session)")

RETIRED_FIELDS: dict[str, str] = {
    **{name: _KERNEL_CHOICE for name in (
        "fused_inference", "fused_training", "fused_core_programs", "fused_core_no_grad",
        "fused_warps", "fused_head_warps", "fused_in_proj", "scan_conv", "scan_conv_programs",
        "scan_conv_warps")},
    "weight_grads_beside": "the projections' weight gradients on a second CUDA stream, "
    "removed: slower where timed, and racy where a parameter's gradients are summed inside "
    "the backward (benchmarks/RESULTS.md, thirty-first session)",
    "scan_scores_in_head": "the scan backward's d B and d C formed by each window's last "
    "head program, removed: slower where timed and faulting on the GPU (benchmarks/RESULTS.md, "
    "thirty-third session)",
    "gated_out": "the output side of each Mamba2 layer under autograd (z's product, the gate, "
    "the gated norm, the out-projection) in one Triton kernel each way, removed: slower than "
    "the compiled PyTorch path where timed (benchmarks/RESULTS.md, thirty-eighth session)"}
"""Fields older configs may hold that no longer exist, and why each went. Each chose only
how the same values were computed (which kernels, which stream), so a saved config is read
without them (``without_retired``)."""


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
    append_log_dt: bool = False
    """Append log_dt to the input features before the input projection (both kinds).
    Off by default: the feature module already includes log time since the previous snapshot;
    CfC always uses the time gap in its gate regardless of this flag."""
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
    """SSD chunk length Q in snapshots; a window with K <= Q is one chunk (no inter-chunk pass)."""
    ssd_backend: SsdBackend = "auto"
    """SSD scan implementation for a window with no initial state: "torch" = the chunked
    PyTorch form (``ssd.py``, also the reference), "triton" = fused multi-chunk kernels
    (``ssd_triton.py``, CUDA only; correct but slower, see
    benchmarks/encoder_perf_notes.md), "triton_window" = the one-chunk kernels
    (``ssd_window_triton.py``: the forward's [Q, Q] tiles in registers, no head-major
    copies, the last layer's last row stored alone; windows of at most ``chunk_size``;
    insists, on CPU only under Triton's interpreter), "auto" (the default) =
    "triton_window" on CUDA where Triton and the shape allow it, else "torch". On "torch",
    the last layer's last-row-only call goes through the PyTorch final state; on "triton"
    all rows are computed and one is used."""
    conv_backend: ConvBackend = "auto"
    """Causal conv + SiLU implementation for a window with no conv context: "torch" =
    shifted multiply-adds (the reference, fused by torch.compile), "triton" = fused
    kernels (``conv_triton.py``, CUDA only; slower in the compiled step, 235 against
    255-260 steps/s at B = 1024, benchmarks/RESULTS.md), "triton_dpre" = the same PyTorch
    forward with the backward's d pre and weight sums in one kernel (``conv_silu_dpre``),
    "triton_fwd" = that backward with the forward kernel in every forward, with or without
    gradients (``conv_silu_fwd_dpre``), "triton_dx" = that forward, and under autograd
    z projected apart and one backward kernel writing the in-projection gradient of the
    conv's and dt's columns whole (``conv_dt_triton.py``; the three insist, on CPU only
    under Triton's interpreter), "auto" (the default) = ``CONV_AUTO_ON_CUDA``
    ("triton_dx") on CUDA, else "torch"."""
    scan_gate: Literal["auto", "torch", "triton"] = "auto"
    """The gated norm in forwards without autograd and state where the one-chunk scan
    kernel runs (acting on B windows, the target net on 2B): "auto" (the default) = on CUDA
    the scan kernel also applies the gate SiLU(z) and the norm weight and writes each row's
    sum of squares per head (``ssd_window_triton.ssd_window_gated``); the norm's 1 / rms, a
    per-row factor, is applied after the out-projection, so the normalised [B, L, E] tensor
    and its own pass over y and z are gone; "torch" = the scan's y, then PyTorch's gated
    norm (the reference, and the CPU path); "triton" = insist (on CPU only under Triton's
    interpreter). Forwards with autograd keep PyTorch's gated norm. On the H200 (bf16) the
    kernel with the gate took 0.069 ms at B = 1024 against 0.060 without it and 0.100 with
    Inductor's norm after it; the B = 1024 / 4-layer step 206.5 -> 211.0 steps/s side by side
    (2 layers 393.2 -> 394.8; benchmarks/RESULTS.md, nineteenth session)."""
    scan_last_row: Literal["tile", "vector"] = "vector"
    """The one-chunk scan's forward where only the last row is kept (the last layer, where
    ``ssd_backend`` runs the one-chunk kernels, with or without autograd and ``scan_gate``):
    "vector" (the default) = that row alone as vectors over the rows, one program per window
    (``ssd_last_row_triton.py``): no [Q, Q] scores, decay or products; "tile" = the [Q, Q]
    tile kernel, which computes every row and stores the last. On the H200 (bf16, compiled,
    graphed, one machine) the B = 1024 / 2-layer step 471.9 -> 490.9 steps/s, B = 256 / 4
    647.6 -> 656.7 (benchmarks/RESULTS.md, twenty-sixth session)."""
    scan_z_proj: Literal["auto", "torch", "triton"] = "auto"
    """Where ``scan_gate`` takes the gate into the scan kernel on every row (the no-grad
    forwards' layers before the last), z = u W_z^T: "auto" (the default) = on CUDA, where
    ``scan_gate`` runs and d_model is a power of two, computed inside the scan kernel from
    the block's normalised input u (``ssd_window_gated_projected``), so the in-projection
    writes only x, B, C and dt and z's [B, L, E] is neither written nor read back (768
    fewer bytes per row in bf16); "torch" = z from the in-projection (the CPU path);
    "triton" = insist (on CPU only under Triton's interpreter). On the H200 (bf16, compiled,
    graphed, one machine) the B = 1024 / 2-layer step 489.1 -> 495.7 steps/s alone, 514.2
    -> 521.5 with ``fold_norm_weights`` (benchmarks/RESULTS.md, twenty-seventh session)."""
    fold_norm_weights: bool = True
    """The Mamba2 block's two RMSNorm weights applied inside the products that follow them:
    the pre-norm's as W_in diag(w) in the in-projection, the gated norm's (where PyTorch's
    norm runs: under autograd, and on CPU) as W_out diag(w) in the out-projection. The same
    function and parameters (checkpoints unchanged); what changes is the backward: the
    weights' gradients come from the products' weight gradients (d W_eff = dy^T x, then d w
    = the sum over W's rows of d W_eff o W) instead of a sum over every token's row, which
    torch.compile computes as per-block partial sums beside the norm's backward and then
    sums in an eager kernel of its own. On the H200 (bf16, compiled, graphed, one machine)
    the B = 1024 / 2-layer step 489.1 -> 514.2 steps/s, with ``scan_z_proj`` 521.5; B = 256
    / 4 layers 655.0 -> 707.8 with both (benchmarks/RESULTS.md, twenty-seventh session).
    False applies the weights in the norms, as the paper's block writes them."""
    one_in_projection: bool = False
    """Where ``conv_backend`` runs conv_dt (forwards with autograd, on CUDA), the block's
    in-projection as one product [z | xBC | dt] in the forward and in the backward: conv_dt's
    backward kernel copies z's gradient into the z columns of the [rows, 648] gradient it
    writes for xBC and dt (``conv_dt_triton.conv_dt_z``), so each layer but the last (whose
    z is one row) takes one in-projection product fewer in the forward and one data- and one
    weight-gradient product fewer in the backward, 10 graph nodes fewer at 4 layers. Off by
    default: on an H100 (bf16, compiled, graphed, one machine) the B = 256 / 4-layer step
    666.3 -> 666.2 steps/s, B = 1024 / 2 layers 439.5 -> 438.0 (benchmarks/RESULTS.md,
    thirty-second session): the copy moves as many bytes as the products it saves, so
    the backward's layers are bound by bytes moved, not by their number of kernels.
    False: z by a product of its own."""
    ssd_triton_warps_fwd: int = 4
    """Triton warps per (window, head) program of the forward scan kernel."""
    ssd_triton_warps_bwd: int = 8
    """Triton warps per program of the backward scan kernel (more tiles live at once)."""
    ssd_window_warps_fwd: int = 4
    """Triton warps per (window, head) program of the one-chunk scan's forward
    (``ssd_backend`` "triton_window" / "auto"; 4 ran faster than 8 on the H200)."""
    ssd_window_warps_bwd: int = 4
    """Triton warps per program of the one-chunk scan's backward (4 ran faster than 8)."""
    ssd_window_warps_fwd_last: int = 2
    """Triton warps per window of the last-row forward (``scan_last_row = "vector"``)."""
    ssd_window_warps_bwd_last: int = 2
    """Triton warps per window of the scan's backward when only the last row has a gradient
    (the last layer, ``ssd_last_row_triton.py``): 2 ran 0.044 ms at B = 1024 on the H200,
    4 0.049, 8 0.068."""
    in_proj_pad_multiple: int = 1
    """Round the fused in_proj width (2E + 2N + H) up to a multiple of this with unused rows
    (e.g. 128: 644 -> 768 at D=128), in case the GEMM picks a faster kernel; 1 = no padding."""
    cuda_gemm_align_bytes: int = 16
    """On CUDA, the token-level products whose rows are not a multiple of this many bytes in
    their compute dtype (the in-projection's output, 2E + 2N + H = 644 columns, in bf16; the
    input projection's input, the feature count) are padded at use with zero weight rows or
    columns, so cuBLAS can use its aligned kernels (``models/align.py``). No parameter
    changes and CPU pads nothing; 1 = no padding."""
    dt_min: float = 0.001
    """Lower end of the log-uniform initial step size dt (after softplus), in scan steps."""
    dt_max: float = 0.1
    """Upper end of the log-uniform initial step size dt, in scan steps."""
    dt_init_floor: float = 1e-4
    """Floor applied to the sampled initial dt before inverting softplus for the bias."""
    a_init_min: float = 1.0
    """Lower end of the uniform init of -A (decay rate per unit dt), per head."""
    a_init_max: float = 16.0
    """Upper end of the uniform init of -A."""

    # ---- CfC (Hasani et al. 2022, Nature Machine Intelligence) ----
    cfc_backbone_units: int = 128
    """Width of the CfC backbone MLP that reads [input, hidden]."""
    cfc_backbone_layers: int = 1
    """Number of Linear + LeCun-tanh layers in the CfC backbone."""
    cfc_time_scale: float = 1.0
    """Elapsed time fed to the CfC gate is t = cfc_time_scale * exp(log_dt): choose it so that
    typical gaps (in the unit of log_dt) come out near 1."""
    cfc_max_time: float = 100.0
    """Clamp of the scaled elapsed time t, so one long gap (a session break) cannot saturate."""

    def __post_init__(self) -> None:
        if self.kind not in ("mamba2", "cfc"):
            raise ValueError(f"kind must be 'mamba2' or 'cfc', got {self.kind!r}")
        positive = ("d_model", "n_layers", "d_state", "headdim", "expand", "d_conv",
                    "chunk_size", "in_proj_pad_multiple", "cuda_gemm_align_bytes",
                    "ssd_triton_warps_fwd", "ssd_triton_warps_bwd", "ssd_window_warps_fwd",
                    "ssd_window_warps_bwd", "ssd_window_warps_bwd_last",
                    "ssd_window_warps_fwd_last",
                    "cfc_backbone_units", "cfc_backbone_layers")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.kind == "mamba2" and (self.expand * self.d_model) % self.headdim:
            raise ValueError(f"expand*d_model={self.expand * self.d_model} is not a multiple of "
                             f"headdim={self.headdim}")
        if self.ssd_backend not in SSD_BACKENDS:
            raise ValueError(f"ssd_backend must be one of {', '.join(SSD_BACKENDS)}, got "
                             f"{self.ssd_backend!r}")
        if self.conv_backend not in CONV_BACKENDS:
            raise ValueError(f"conv_backend must be one of {', '.join(CONV_BACKENDS)}, got "
                             f"{self.conv_backend!r}")
        if self.scan_gate not in ("auto", "torch", "triton"):
            raise ValueError(f"scan_gate must be auto, torch or triton, got {self.scan_gate!r}")
        if self.scan_z_proj not in ("auto", "torch", "triton"):
            raise ValueError(f"scan_z_proj must be auto, torch or triton, got "
                             f"{self.scan_z_proj!r}")
        if self.scan_last_row not in ("tile", "vector"):
            raise ValueError(f"scan_last_row must be tile or vector, got "
                             f"{self.scan_last_row!r}")
        if not 0 < self.dt_min <= self.dt_max:
            raise ValueError("need 0 < dt_min <= dt_max")
        if not 0 < self.a_init_min <= self.a_init_max:
            raise ValueError("need 0 < a_init_min <= a_init_max")

    @property
    def d_inner(self) -> int:
        """E = expand * d_model."""
        return self.expand * self.d_model

    @property
    def n_heads(self) -> int:
        """H = E / headdim."""
        return self.d_inner // self.headdim
