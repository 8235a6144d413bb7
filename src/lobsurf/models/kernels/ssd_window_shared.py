"""What the one-chunk SSD scan's kernels (``ssd_window_triton``) and its last-row form
(``ssd_last_row_triton``) share: the tile's launch flags and the backward's buffers."""

from __future__ import annotations

import torch

# MIN_TILE: windows shorter than the smallest tile side tl.dot takes are padded to it
from lobsurf.models.kernels.triton_support import MIN_TILE, product_flags

try:
    import triton
except ImportError:  # CPU-only installs: the PyTorch scan is used instead
    triton = None


def _tile_rows(length: int) -> int:
    # rows of a program's tiles: the window padded to a power of two >= MIN_TILE
    return max(MIN_TILE, triton.next_power_of_2(length))


def tile_flags(xbc: torch.Tensor) -> dict:
    """The kernels' tile rows Q and the products' BF16 and PREC flags
    (triton_support.product_flags) for the windows of ``xbc``."""
    return dict(Q=_tile_rows(xbc.shape[1]), **product_flags(xbc, "ssd_window"))


def grad_buffers(dy: torch.Tensor, xbc: torch.Tensor, dt: torch.Tensor, heads: int):
    """The backward kernels' dy (xbc's dtype, last axis contiguous) and outputs: d xbc like
    xbc, d dt [B, L, H] fp32, and per-window partial sums of d A and d D [B, H] fp32."""
    dy = dy.to(xbc.dtype)
    if dy.stride(-1) != 1:
        dy = dy.contiguous()
    batch = xbc.shape[0]
    partial = dict(device=dt.device, dtype=torch.float32)
    return (dy, torch.empty(xbc.shape, device=xbc.device, dtype=xbc.dtype),
            torch.empty(dt.shape, **partial), torch.empty(batch, heads, **partial),
            torch.empty(batch, heads, **partial))


def partial_grads_like(xbc: torch.Tensor, dt: torch.Tensor, A: torch.Tensor):
    """Empty (d dt, d xbc, d A partials, d D partials) as the backward ops return them."""
    partial = dict(device=dt.device, dtype=torch.float32)
    return (torch.empty(dt.shape, **partial), torch.empty_like(xbc),
            torch.empty(xbc.shape[0], A.shape[0], **partial),
            torch.empty(xbc.shape[0], A.shape[0], **partial))
