"""Labels for the auxiliary heads: mid-price direction and future-return buckets.

For every row t of a ``BookTensors`` and every horizon h (in snapshots):

* ``return_ticks[t, h] = mid[t + h] - mid[t]``, the mid-price change in ticks (a multiple of
  one half tick; exact in float64).
* ``direction[t, h] = return_ticks > 0`` (1.0 = up, 0.0 = down). Valid (``direction_valid``)
  only when ``t + h`` lies inside the segment of ``t`` **and** the mid changed: a flat mid
  has no direction, and counting it as "down" would teach the head the tick-size
  prior instead of the market.
* ``bucket[t, h]``: the index of ``return_ticks`` among the sorted bucket edges (in ticks),
  i.e. the number of edges ``<= return_ticks``, in ``[0, len(edges)]``. Valid
  (``bucket_valid``) when ``t + h`` lies inside the segment (a zero return is a bucket too).

Everything is vectorised over rows (one gather per horizon), runs on the book's device,
and never crosses a segment boundary: a label whose horizon reaches into the next session
is masked out, not computed from the other session's prices.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lobsurf.data.dataset import BookTensors


@dataclass(frozen=True)
class LabelConfig:
    """Which labels to derive from the mid-price path."""

    horizons_snapshots: tuple[int, ...] = (10, 50, 200)
    """Label horizons, in snapshots ahead of the window's last snapshot (sorted, > 0)."""
    bucket_edges_ticks: tuple[float, ...] = (-4.25, -2.25, -1.25, -0.25, 0.25, 1.25, 2.25, 4.25)
    """Sorted edges of the future-return buckets, in ticks. The default edges sit between
    points of the half-tick grid, so the buckets are symmetric around zero and the middle
    bucket holds exactly the zero returns; len(edges) + 1 buckets."""

    def __post_init__(self) -> None:
        hs = self.horizons_snapshots
        if not hs or any(h <= 0 for h in hs) or list(hs) != sorted(set(hs)):
            raise ValueError(f"horizons_snapshots must be sorted, distinct and > 0: {hs}")
        edges = self.bucket_edges_ticks
        if not edges or list(edges) != sorted(set(edges)):
            raise ValueError(f"bucket_edges_ticks must be sorted and distinct: {edges}")

    @property
    def num_horizons(self) -> int:
        return len(self.horizons_snapshots)

    @property
    def num_buckets(self) -> int:
        return len(self.bucket_edges_ticks) + 1

    @property
    def max_horizon(self) -> int:
        return max(self.horizons_snapshots)


@dataclass
class Labels:
    """Labels of N rows at H horizons (all tensors on the book's device).

    Attributes:
        return_ticks: [N, H] float64 mid change in ticks (0 where the horizon leaves the segment).
        direction: [N, H] float32, 1.0 where the mid went up.
        direction_valid: [N, H] bool, horizon inside the segment and the mid changed.
        bucket: [N, H] int64 future-return bucket index in [0, num_buckets).
        bucket_valid: [N, H] bool, horizon inside the segment.
    """

    return_ticks: torch.Tensor
    direction: torch.Tensor
    direction_valid: torch.Tensor
    bucket: torch.Tensor
    bucket_valid: torch.Tensor

    def rows(self, index: torch.Tensor) -> Labels:
        """The labels of rows ``index`` ([B] int64) → every field [B, H]."""
        return Labels(
            return_ticks=self.return_ticks[index],
            direction=self.direction[index],
            direction_valid=self.direction_valid[index],
            bucket=self.bucket[index],
            bucket_valid=self.bucket_valid[index],
        )


def labels_from_mid(mid_ticks: torch.Tensor, row_stop: torch.Tensor, cfg: LabelConfig) -> Labels:
    """Labels from a mid-price path and the end of each row's segment.

    Args:
        mid_ticks: [N] float64 mid price in ticks.
        row_stop: [N] int64 exclusive end row of the segment that holds each row.
        cfg: horizons and bucket edges.

    Returns:
        Labels with [N, H] fields.
    """
    n = mid_ticks.shape[0]
    device = mid_ticks.device
    rows = torch.arange(n, device=device, dtype=torch.int64)
    horizons = torch.tensor(cfg.horizons_snapshots, device=device, dtype=torch.int64)
    future = rows[:, None] + horizons[None, :]  # [N, H]
    inside = future < row_stop[:, None]
    # Clamp so out-of-segment rows gather something harmless; the mask discards it.
    future_mid = mid_ticks[future.clamp(max=max(n - 1, 0))]
    ret = torch.where(inside, future_mid - mid_ticks[:, None], torch.zeros_like(future_mid))
    edges = torch.tensor(cfg.bucket_edges_ticks, device=device, dtype=torch.float64)
    # right=True: index i with edges[i-1] <= r < edges[i], i.e. the count of edges <= r.
    bucket = torch.bucketize(ret, edges, right=True)
    return Labels(
        return_ticks=ret,
        direction=(ret > 0).to(torch.float32),
        direction_valid=inside & (ret != 0),
        bucket=bucket,
        bucket_valid=inside,
    )


def compute_labels(book: BookTensors, cfg: LabelConfig) -> Labels:
    """Labels for every row of ``book`` (see the module docstring).

    Args:
        book: the device dataset.
        cfg: horizons and bucket edges.

    Returns:
        Labels with [N, H] fields on ``book.device``.
    """
    row_stop = book.segment_stop[book.segment_of_row]
    return labels_from_mid(book.mid_ticks(), row_stop, cfg)
