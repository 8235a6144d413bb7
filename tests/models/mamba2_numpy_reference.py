"""Independent reference of one whole Mamba2 block, in numpy float64 (tests only).

Written from the Mamba2 paper (Dao & Gu 2024, "Transformers are SSMs", arXiv 2405.21060,
Section 7.1 and Figure 6, the "Mamba-2 block"), one time step at a time, sharing no code
with ``lobsurf.models.mamba2``: no torch, no chunking, its own softplus, SiLU and RMSNorm.
The fast block's parameters are read by name from its ``state_dict``; only the layout of
the fused input projection ([z, x, B, C, dt], the Mamba "Order:") and of the conv weight
([W, C], tap k reads the input W-1-k steps back) are conventions shared with it.

Per token u_t in R^D of a sequence (pre-norm residual block):

    v_t            = RMSNorm(u_t) * g                           g = norm.weight
    z, xBC, dt_raw = W_in v_t                                   fused projection
    xBC_t          = SiLU(conv_bias + sum_k conv_w[k] * xBC_{t-(W-1)+k})   causal, zero-padded
    x, B, C        = xBC_t                                      x: H heads of P channels
    dt_h           = softplus(dt_raw_h + dt_bias_h)
    a_h            = exp(dt_h * A_h),  A_h = -exp(A_log_h)       decay, in (0, 1)
    S_h            = a_h S_h + dt_h x_h B^T                     state [P, N], Eq. (SSM recurrence)
    y_h            = S_h C + D_h x_h
    out_t          = u_t + W_out (RMSNorm(y * SiLU(z)) * norm_weight)   gate before the norm
"""

from __future__ import annotations

import numpy as np


def softplus(x: np.ndarray) -> np.ndarray:
    # log(1 + e^x), stable for large |x|.
    return np.logaddexp(0.0, x)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _params(state_dict: dict) -> dict[str, np.ndarray]:
    # Tensors (any dtype/device) -> float64 numpy arrays, by name.
    return {k: v.detach().cpu().double().numpy() for k, v in state_dict.items()}


def mamba2_block_reference(state_dict: dict, h: np.ndarray, d_state: int, headdim: int,
                           eps: float) -> np.ndarray:
    """Output of one Mamba2 block over whole sequences, step by step.

    Args:
        state_dict: the block's ``state_dict()`` (names ``norm.weight``, ``mixer.in_proj.weight``,
            ``mixer.conv_weight``, ``mixer.conv_bias``, ``mixer.dt_bias``, ``mixer.A_log``,
            ``mixer.D``, ``mixer.norm_weight``, ``mixer.out_proj.weight``).
        h: [B, L, D] block inputs.
        d_state: N. headdim: P. eps: epsilon of both RMSNorms.

    Returns:
        [B, L, D] float64 block outputs.
    """
    p = _params(state_dict)
    u_all = np.asarray(h, dtype=np.float64)
    batch, length, _ = u_all.shape
    w_in, w_out = p["mixer.in_proj.weight"], p["mixer.out_proj.weight"]
    conv_w, conv_b = p["mixer.conv_weight"], p["mixer.conv_bias"]  # [W, C], [C]
    heads = p["mixer.A_log"].shape[0]
    inner = heads * headdim  # E
    width = conv_w.shape[0]  # W
    a_cont = -np.exp(p["mixer.A_log"])  # [H], negative
    out = np.zeros_like(u_all)
    for b in range(batch):
        state = np.zeros((heads, headdim, d_state))  # S_h for every head
        history = []  # pre-convolution xBC of every earlier step of this sequence
        for t in range(length):
            u = u_all[b, t]
            v = rmsnorm(u, p["norm.weight"], eps)
            proj = w_in @ v
            z = proj[:inner]
            xbc_raw = proj[inner:2 * inner + 2 * d_state]
            dt_raw = proj[2 * inner + 2 * d_state:2 * inner + 2 * d_state + heads]
            history.append(xbc_raw)
            conv = conv_b.copy()
            for k in range(width):
                back = width - 1 - k  # tap k reads the input `back` steps ago
                if t - back >= 0:
                    conv = conv + conv_w[k] * history[t - back]
            xbc = silu(conv)
            x = xbc[:inner].reshape(heads, headdim)
            b_in = xbc[inner:inner + d_state]
            c_out = xbc[inner + d_state:inner + 2 * d_state]
            dt = softplus(dt_raw + p["mixer.dt_bias"])  # [H]
            y = np.zeros((heads, headdim))
            for hd in range(heads):
                decay = np.exp(dt[hd] * a_cont[hd])
                state[hd] = decay * state[hd] + dt[hd] * np.outer(x[hd], b_in)
                y[hd] = state[hd] @ c_out + p["mixer.D"][hd] * x[hd]
            gated = y.reshape(inner) * silu(z)
            out[b, t] = u + w_out @ rmsnorm(gated, p["mixer.norm_weight"], eps)
    return out
