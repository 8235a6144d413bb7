"""Chunked SSD scan of Mamba2 in plain PyTorch (Dao & Gu 2024, arXiv 2405.21060, Listing 1).

The selective state space recurrence per head h, with state S_t in R^{P x N}:

    S_t = exp(dt_t * A_h) * S_{t-1} + (dt_t * x_t) B_t^T        (x_t in R^P, B_t in R^N)
    y_t = S_t C_t                                               (C_t in R^N)

is computed in chunks of Q steps. Inside a chunk it is the masked "attention" form
y = (L o C B^T) (dt * x) with L[i, j] = exp(sum_{k=j+1..i} dt_k A) for j <= i; across chunks
a short recurrence carries the states. Choices that matter for speed (PERFORMANCE.md 3.6):

- one B/C group (ngroups = 1): C B^T is computed once per chunk and broadcast over heads;
- a window with L <= chunk_size is a single chunk of length L, and the inter-chunk pass is
  skipped unless an initial state is given or the final state is asked for;
- only batched 2-operand matmuls (no 4-5 operand einsums), so every contraction is one GEMM;
- chunk states and their outputs are [N, Q] @ [Q, H*P] GEMMs on the token-major layout
  (B and C shared by the heads), and states pass between chunks by an element-wise
  recurrence, one step per chunk (the (nc+1)^2 decay-matrix form ran as slow tiny-K GEMMs);
- the log-decay, its cumsum and the exp are in fp32 (float64 stays float64), also under
  bf16 autocast.

L[i, j] is formed as exp(cum_i - cum_j) (the paper's Listing 1 form). Its absolute error in
the exponent is about eps * |cum|; with the default init (|dt A| <= 1.6 per step) that is
below 1e-5 relative in fp32 at Q = 64. Lengths that are not a multiple of the chunk are
padded at the end with dt = 0 and x = 0, which leaves the state untouched.

The step-by-step reference is ``ssd_reference.ssd_recurrent``; tests compare the two.
Public state layout (as in mamba_ssm): [B, H, P, N].
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _scan_dtype(dtype: torch.dtype) -> torch.dtype:
    # Decay math in at least fp32: bf16/fp16 -> fp32, fp32 -> fp32, fp64 -> fp64.
    return torch.promote_types(dtype, torch.float32)


def _chunked_inputs(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                    C: torch.Tensor, chunk_size: int):
    """Pad to whole chunks and lay out per chunk. Returns (xdt, cum, Bc, Cc, Q, nc).

    xdt stays token-major, [B, nc, Q, H, P] (a view of the padded input, no permute copy):
    the state matmuls want it that way; the intra-chunk matmul takes a permuted view.
    """
    batch, length, heads, headdim = x.shape
    Q = min(chunk_size, length)  # a short window is one chunk of its own length
    nc = math.ceil(length / Q)
    pad = nc * Q - length
    a = dt.to(_scan_dtype(dt.dtype)) * A.to(_scan_dtype(A.dtype))  # [B, L, H] log decay/step
    xdt = x * dt.unsqueeze(-1).to(x.dtype)  # [B, L, H, P]  (dt * x), the input of the scan
    if pad:
        # Padding with a = 0 (decay 1) and xdt = 0 leaves the state unchanged.
        xdt = F.pad(xdt, (0, 0, 0, 0, 0, pad))
        a = F.pad(a, (0, 0, 0, pad))
        B = F.pad(B, (0, 0, 0, pad))
        C = F.pad(C, (0, 0, 0, pad))
    xdt = xdt.reshape(batch, nc, Q, heads, headdim)  # [B, nc, Q, H, P]
    # Scan along Q where it is not the innermost axis (CUDA's outer-axis scan, coalesced over
    # heads, no transposed copy), then view as [B, nc, H, Q].
    cum = a.reshape(batch, nc, Q, heads).cumsum(2).permute(0, 1, 3, 2)  # [B, nc, H, Q]
    Bc = B.reshape(batch, nc, Q, -1)  # [B, nc, Q, N]
    Cc = C.reshape(batch, nc, Q, -1)  # [B, nc, Q, N]
    return xdt, cum, Bc, Cc, Q, nc


def _chunk_states(xdt: torch.Tensor, cum: torch.Tensor, Bc: torch.Tensor) -> torch.Tensor:
    # State each chunk would end in if it started from zero, as [B, nc, N, H, P]:
    # S_c = sum_j B_j (exp(cum_last - cum_j) (dt x)_j)^T. B is shared by the heads, so this
    # is one [N, Q] @ [Q, H*P] GEMM per chunk (no broadcast over heads, no tiny-K GEMMs).
    batch, nc, Q, heads, headdim = xdt.shape
    to_end = torch.exp(cum[..., -1:] - cum).transpose(-1, -2)  # [B, nc, Q, H]
    weighted = (xdt * to_end.unsqueeze(-1).to(xdt.dtype)).reshape(batch, nc, Q, -1)
    states = Bc.transpose(-1, -2).to(weighted.dtype) @ weighted  # [B, nc, N, H*P]
    return states.view(batch, nc, -1, heads, headdim)


def _pass_states(states: torch.Tensor, cum: torch.Tensor, initial: torch.Tensor | None):
    # Recurrence over chunks h_c = exp(decay_{c-1}) h_{c-1} + S_{c-1}, element-wise on
    # [B, N, H, P] states, one step per chunk (windows here have a few chunks; the matmul
    # form with an (nc+1)^2 decay matrix became slow tiny-K GEMMs on the GPU).
    nc = states.shape[1]
    chunk_decay = torch.exp(cum[..., -1]).to(states.dtype)[:, :, None, :, None]  # [B,nc,1,H,1]
    entering = []
    h = initial
    for c in range(nc):
        entering.append(torch.zeros_like(states[:, 0]) if h is None else h)
        h = states[:, c] if h is None else chunk_decay[:, c] * h + states[:, c]
    return torch.stack(entering, dim=1), h  # [B, nc, N, H, P]; final [B, N, H, P]


def _to_public(state: torch.Tensor) -> torch.Tensor:
    return state.permute(0, 2, 3, 1)  # [B, N, H, P] -> public [B, H, P, N]


def _from_public(state: torch.Tensor | None) -> torch.Tensor | None:
    return None if state is None else state.permute(0, 3, 1, 2)  # [B, H, P, N] -> [B, N, H, P]


def ssd_chunked(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                C: torch.Tensor, chunk_size: int, initial_state: torch.Tensor | None = None,
                return_final_state: bool = False):
    """Chunked SSD scan (no D skip; the block adds it).

    Args:
        x: [B, L, H, P] inputs per head.
        dt: [B, L, H] positive step sizes (after softplus).
        A: [H] negative decay rates.
        B: [B, L, N] input projections of the state (shared by all heads).
        C: [B, L, N] output projections of the state (shared by all heads).
        chunk_size: chunk length Q; L need not be a multiple of it.
        initial_state: optional [B, H, P, N] state before the first step.
        return_final_state: also return the [B, H, P, N] state after the last step.

    Returns:
        y [B, L, H, P], or (y, final_state) when ``return_final_state``.
    """
    batch, length, heads, headdim = x.shape
    xdt, cum, Bc, Cc, Q, nc = _chunked_inputs(x, dt, A, B, C, chunk_size)
    # Intra-chunk (diagonal blocks): y_i = sum_{j<=i} (C_i . B_j) exp(cum_i - cum_j) xdt_j.
    scores = Cc @ Bc.transpose(-1, -2)  # [B, nc, Q, Q], shared by all heads
    causal = torch.ones(Q, Q, dtype=torch.bool, device=x.device).tril()
    seg = cum.unsqueeze(-1) - cum.unsqueeze(-2)  # [B, nc, H, Q, Q]
    decay = torch.exp(torch.where(causal, seg, float("-inf")))  # masked before exp: no inf
    y = (scores.unsqueeze(2) * decay).to(xdt.dtype) @ xdt.transpose(2, 3)  # [B, nc, H, Q, P]
    y = y.transpose(2, 3)  # [B, nc, Q, H, P]
    final = None
    if nc > 1 or initial_state is not None or return_final_state:
        states = _chunk_states(xdt, cum, Bc)  # [B, nc, N, H, P]
        if nc == 1 and initial_state is None:
            final = states[:, 0]
        else:
            entering, final = _pass_states(states, cum, _from_public(initial_state))
            # Contribution of the state entering each chunk: exp(cum_i) C_i^T h_in, again one
            # [Q, N] @ [N, H*P] GEMM per chunk.
            y_off = Cc.to(entering.dtype) @ entering.reshape(batch, nc, -1, heads * headdim)
            y_off = y_off.view(batch, nc, Q, heads, headdim)
            y = y + y_off * torch.exp(cum).transpose(-1, -2).unsqueeze(-1).to(y_off.dtype)
    y = y.reshape(batch, nc * Q, heads, headdim)[:, :length]
    if return_final_state:
        return y, _to_public(final)
    return y


def ssd_final_state(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                    chunk_size: int, initial_state: torch.Tensor | None = None) -> torch.Tensor:
    """State after the last step only, without the intra-chunk outputs.

    Cheaper than ``ssd_chunked`` when only the last output is needed (y_L = S_L C_L):
    no Q x Q score matrices. Shapes as in ``ssd_chunked``; returns [B, H, P, N].
    """
    # C is not needed for the state; pass B in its place so the padding/layout is shared.
    xdt, cum, Bc, _, _, nc = _chunked_inputs(x, dt, A, B, B, chunk_size)
    states = _chunk_states(xdt, cum, Bc)
    if nc == 1 and initial_state is None:
        return _to_public(states[:, 0])
    _, final = _pass_states(states, cum, _from_public(initial_state))
    return _to_public(final)


def ssd_step(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
             C: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """One recurrent step, updating ``state`` in place (graph-capturable acting path).

    Args:
        x: [B, H, P]; dt: [B, H] (after softplus); A: [H]; B, C: [B, N].
        state: [B, H, P, N], overwritten with the new state.

    Returns:
        y: [B, H, P] (no D skip).
    """
    decay = torch.exp(dt.to(_scan_dtype(dt.dtype)) * A).to(state.dtype)  # [B, H]
    xdt = (x * dt.unsqueeze(-1)).to(state.dtype)  # [B, H, P]
    new = decay[..., None, None] * state + xdt.unsqueeze(-1) * B[:, None, None, :].to(state.dtype)
    state.copy_(new)
    return (new @ C[:, None, :, None].to(state.dtype)).squeeze(-1)  # [B, H, P]
