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
    fused_inference: Literal["auto", "torch", "triton"] = "torch"
    """Block forward when autograd is off (the step's acting and target forwards) over a
    window with no state: "torch" = the PyTorch block (the default and the reference: on
    the H200 the compiled PyTorch block is faster, 0.42 against 0.66 ms at B = 1024, see
    benchmarks/RESULTS.md); "auto" = the one-kernel Triton block (``mamba2_fused.py``) on
    CUDA where Triton and the shape allow it, else PyTorch; "triton" = insist on the kernel
    (an error says why it cannot run; on CPU it needs Triton's interpreter, which the
    tests use). Experimental and **off on CUDA for now** ("auto" = PyTorch there, "triton"
    an error): correct in the CPU interpreter's tests, but in its GPU test it reads outside
    its shared memory (``mamba2_fused.CUDA_DISABLED``; benchmarks/RESULTS.md)."""
    fused_training: Literal["auto", "torch", "triton"] = "torch"
    """Mixer core (conv -> SSD -> gated norm) when autograd is on (the learner's forward and
    backward) over a window with no state: "torch" = the PyTorch mixer (the default and the
    reference: as fast as the kernels on the H200, 3.69 against 3.93 ms forward + backward
    of a block at B = 1024, benchmarks/RESULTS.md); "auto" = one forward and one backward
    Triton kernel (``mamba2_fused_core.py``) between the in- and out-projection GEMMs, on
    CUDA where Triton and the shape allow it; "triton" = insist (on CPU only under Triton's
    interpreter). Experimental: its GPU tests pass on the H200 (benchmarks/RESULTS.md)."""
    fused_core_programs: Literal["window", "head"] = "window"
    """Grid of the fused core's kernels (``fused_training``): "window" = one program per
    window through every head and the gated norm (``mamba2_fused_core.py``; timed on the
    H200); "head" = one program per (window, head) for the conv, SSD and gate, with the norm
    left to PyTorch and the heads' shared d scores summed by a second small backward kernel
    (``mamba2_fused_heads.py``; ~70x fewer register spills in its backward at sm_90,
    benchmarks/kernel_resources.py, but **0.64x** the PyTorch mixer on the H200: 2,174 against
    1,392 us of kernels for a block's forward + backward at B = 1024, bf16, one program per
    SM at 255 registers; benchmarks/RESULTS.md)."""
    fused_in_proj: Literal["auto", "torch", "triton"] = "torch"
    """A block's pre-norm, in-projection, causal conv + SiLU and dt softplus in forwards
    without autograd and state (acting on B windows, the target net on 2B): "torch" (the
    default) = the PyTorch ops (the reference, and the CPU path); "auto" = one Triton kernel
    (``in_proj_conv_triton.py``: the projection never reaches memory) on CUDA where Triton
    and the shape allow it, else PyTorch; "triton" = insist (on CPU only under Triton's
    interpreter). Off by default: on the H200 the kernel is slower than the compiled
    PyTorch ops at B = 1024 (0.138 against 0.107 ms; the step 300.7 against 357.6 steps/s)
    and faster only where the step is launch-bound (B = 16: 1,969.4 against 1,866.7;
    benchmarks/RESULTS.md, sixteenth session). Forwards with autograd keep the PyTorch
    in-projection and ``conv_backend``."""
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
    scan_conv: Literal["auto", "torch", "triton"] = "torch"
    """The causal conv + SiLU and the dt softplus of the forwards where the gated scan runs
    (``scan_gate``: without autograd and state, on the block's own in-projection): "torch"
    (the default) = the conv (``conv_backend``) and PyTorch's softplus before the gated
    scan; "auto" = on CUDA inside the gated scan's kernel, which reads the in-projection's
    columns itself (``ssd_window_conv_triton.py``), so the convolved [B, L, E + 2N] tensor
    is neither written nor read back and the conv and softplus kernels are gone; "triton" =
    insist wherever the gated scan runs (on CPU only under Triton's interpreter). Off by
    default: its first version (one program per (window, head), 4 warps) took the
    B = 1024 / 2-layer step from 462.8 to 386.6 steps/s on the H200; in the bench's
    profiled pass its kernel took 0.93 ms per step, the conv and scan calls it replaces
    about 0.43 (benchmarks/RESULTS.md, twenty-fifth session)."""
    scan_conv_programs: Literal["head", "window"] = "head"
    """Grid of ``scan_conv``'s kernel: "head" = one program per (window, head), each
    convolving the window's B and C and computing their scores itself (what was measured);
    "window" = one per window, B, C and the scores once and the heads in a loop (half the
    conv's arithmetic, more registers per program; not yet measured on a GPU)."""
    scan_conv_warps: int = 4
    """Triton warps per program of ``scan_conv``'s kernel."""
    scan_last_row: Literal["tile", "vector"] = "tile"
    """The one-chunk scan's forward where only the last row is kept (the last layer, where
    ``ssd_backend`` runs the one-chunk kernels, with or without autograd and ``scan_gate``):
    "tile" (the default) = the [Q, Q] tile kernel, which computes every row and stores the
    last; "vector" = that row alone as vectors over the rows, one program per window
    (``ssd_last_row_triton.py``): no [Q, Q] scores, decay or products. Not yet measured on
    a GPU (twenty-fifth session)."""
    fused_core_no_grad: bool = False
    """Run the fused core (``fused_training``'s kernels, in the ``fused_core_programs`` grid)
    in the forwards without autograd too (acting on B windows, the target net on 2B), where
    ``fused_inference`` does not take the whole block; off = the PyTorch mixer there (faster:
    the window core there too took the B = 1024 step from 227.7 to 128.8 steps/s on the H200,
    benchmarks/RESULTS.md)."""
    fused_warps: int = 4
    """Triton warps per window of the fused kernels (4 measured faster than 8)."""
    fused_head_warps: int = 8
    """Triton warps per (window, head) program of the per-head fused core
    (``fused_core_programs = "head"``): 8 spill the fewest registers at the default shape
    (benchmarks/kernel_resources.py, sm_90) and ran fastest of 4, 8 and 16 on the H200
    (2,174 against 2,261 and 3,650 us of kernels per block forward + backward)."""
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
                    "ssd_window_warps_bwd", "ssd_window_warps_bwd_last", "fused_warps",
                    "fused_head_warps", "scan_conv_warps", "ssd_window_warps_fwd_last",
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
        for name in ("fused_inference", "fused_training", "fused_in_proj", "scan_gate",
                     "scan_conv"):
            if getattr(self, name) not in ("auto", "torch", "triton"):
                raise ValueError(f"{name} must be auto, torch or triton, got "
                                 f"{getattr(self, name)!r}")
        if self.scan_last_row not in ("tile", "vector"):
            raise ValueError(f"scan_last_row must be tile or vector, got "
                             f"{self.scan_last_row!r}")
        for name in ("fused_core_programs", "scan_conv_programs"):
            if getattr(self, name) not in ("window", "head"):
                raise ValueError(f"{name} must be window or head, got "
                                 f"{getattr(self, name)!r}")
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
