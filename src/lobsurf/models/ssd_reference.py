"""Step-by-step reference of the Mamba2 SSD recurrence (slow, for tests only).

Computes, one time step at a time and per head h (arXiv 2405.21060, Eq. for the selective
SSM with scalar-times-identity A):

    S_t = exp(dt_t * A_h) * S_{t-1} + (dt_t * x_t) outer B_t      S_t: [P, N]
    y_t = S_t C_t

with no chunking, no masks and no matmul reordering, so it shares no code path with
``ssd.ssd_chunked``. Run it in float64 for a tight comparison.
"""

from __future__ import annotations

import torch


def ssd_recurrent(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                  C: torch.Tensor, initial_state: torch.Tensor | None = None):
    """Sequential SSD scan.

    Args:
        x: [B, L, H, P]; dt: [B, L, H] (positive); A: [H] (negative);
        B, C: [B, L, N]; initial_state: optional [B, H, P, N].

    Returns:
        (y [B, L, H, P], final_state [B, H, P, N]), in the dtype of x.
    """
    batch, length, heads, headdim = x.shape
    n = B.shape[-1]
    if initial_state is None:
        state = x.new_zeros(batch, heads, headdim, n)
    else:
        state = initial_state.to(x.dtype).clone()
    ys = []
    for t in range(length):
        decay = torch.exp(dt[:, t] * A)  # [B, H]
        inject = (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, None, None, :]  # [B,H,P,N]
        state = decay[:, :, None, None] * state + inject
        ys.append((state * C[:, t, None, None, :]).sum(-1))  # [B, H, P]
    return torch.stack(ys, dim=1), state
