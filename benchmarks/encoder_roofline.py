"""Analytic FLOP and HBM-byte counts of one encoder forward+backward pass, and its roofline.

Used by ``bench_encoder.py``. Counts follow PERFORMANCE.md section 4 (per token per layer,
forward; backward = 2x forward, so a forward+backward pass is 3x):

* FLOPs: every GEMM 2*m*n*k, plus a rough count of element-wise work. The SSD counts the
  full Q x Q score and decay blocks that the chunked form actually computes (not half).
* Bytes: the "per-op-fused floor": each op reads its inputs once and writes its output once
  to HBM, activations at ``act_bytes`` (4 for fp32/TF32, 2 under bf16 autocast). Weights,
  read in forward and backward and written as gradients, are added in fp32.

The memory floor is bytes / HBM bandwidth, the compute floor FLOPs / matmul peak; the
measured time divided by the memory floor is "x floor" in the table (goal: <= 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

BACKWARD_FACTOR = 2.0  # backward costs ~2x forward (FLOPs and bytes), PERFORMANCE.md 4.2
FP32_BYTES = 4


@dataclass(frozen=True)
class Hardware:
    """Peak rates of the target GPU (H200 figures measured in PERFORMANCE.md 2.2)."""

    name: str = "H200"
    hbm_bytes_per_s: float = 4.3e12
    """HBM bandwidth, bytes/s."""
    tf32_flops: float = 433e12
    """Dense TF32 matmul peak measured at 8192^3, FLOP/s."""
    bf16_flops: float = 787e12
    """Dense bf16 matmul peak measured at 8192^3, FLOP/s."""


@dataclass(frozen=True)
class PassCost:
    """FLOPs and bytes of one forward+backward pass over B*K tokens."""

    flops: float
    bytes: float

    def floors_ms(self, hw: Hardware, bf16: bool) -> tuple[float, float]:
        """(memory floor, compute floor) in milliseconds."""
        peak = hw.bf16_flops if bf16 else hw.tf32_flops
        return 1e3 * self.bytes / hw.hbm_bytes_per_s, 1e3 * self.flops / peak


def mamba2_layer_forward(d_model: int, expand: int, headdim: int, d_state: int, d_conv: int,
                         chunk: int, window: int) -> tuple[float, float]:
    """(FLOPs, activation elements moved) per token of one Mamba2 block forward."""
    D, E, N, W = d_model, expand * d_model, d_state, d_conv
    H, P = E // headdim, headdim
    Q = min(chunk, window)  # a short window is one chunk of its own length
    n_chunks = math.ceil(window / Q)
    proj = 2 * E + 2 * N + H
    flops = 2 * D * proj + 2 * W * (E + 2 * N) + 2 * E * D  # in_proj, conv, out_proj
    flops += 2 * Q * N + 2 * H * Q * P + 3 * H * Q  # C.B^T, scores.x, segsum/exp/mask
    if n_chunks > 1:
        flops += 2 * 2 * H * P * N  # chunk states and state -> output
    flops += 10 * E + 6 * D  # dt softplus, D skip, gate, gated norm, pre-norm, residual
    elems = (2 * D  # pre-norm
             + D + proj  # in_proj
             + 2 * (E + 2 * N)  # conv + SiLU
             + (2 * E + 2 * N + H)  # SSD: x, B, C, dt in; y out
             + 3 * E  # gate * RMSNorm
             + E + D  # out_proj
             + 3 * D)  # residual
    return float(flops), float(elems)


def cfc_layer_forward(d_model: int, units: int, backbone_layers: int) -> tuple[float, float]:
    """(FLOPs, activation elements moved) per token of one CfC block forward."""
    D, U = d_model, units
    flops = 2 * D * U * 2 + 2 * U * U * (backbone_layers - 1) + 2 * U * 4 * D
    flops += 12 * D + 4 * U
    # pre-norm, input GEMM, per step: h and pre in, backbone out, heads out, new h, residual.
    elems = 2 * D + (D + U) + (D + 2 * U) * backbone_layers + (U + 4 * D) + 5 * D + 3 * D
    return float(flops), float(elems)


def encoder_pass_cost(cfg, in_features: int, batch: int, window: int, act_bytes: int,
                      n_params: int) -> PassCost:
    """Forward+backward cost of ``Encoder(cfg, in_features)`` on [batch, window] windows."""
    if cfg.kind == "mamba2":
        layer_flops, layer_elems = mamba2_layer_forward(
            cfg.d_model, cfg.expand, cfg.headdim, cfg.d_state, cfg.d_conv, cfg.chunk_size,
            window)
    else:
        layer_flops, layer_elems = cfc_layer_forward(cfg.d_model, cfg.cfc_backbone_units,
                                                     cfg.cfc_backbone_layers)
    tokens = batch * window
    fwd_flops = tokens * (cfg.n_layers * layer_flops + 2 * in_features * cfg.d_model
                          + 4 * cfg.d_model)
    fwd_elems = tokens * (cfg.n_layers * layer_elems + in_features + cfg.d_model
                          + 2 * cfg.d_model)  # input projection, final norm
    scale = 1.0 + BACKWARD_FACTOR
    weight_bytes = 3.0 * n_params * FP32_BYTES  # read fwd, read bwd, write grad
    return PassCost(flops=scale * fwd_flops, bytes=scale * fwd_elems * act_bytes + weight_bytes)
