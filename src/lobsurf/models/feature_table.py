"""Per-snapshot features computed once per book, gathered by row: the training step's inputs.

``snapshot_features`` (features.py) computes a window's features from its book fields, and
each snapshot's depend on that snapshot and its predecessor only. So a window's features
are rows of one table ``T`` [N, F] (snapshot r with its predecessor r - 1), except where
a window position has no predecessor inside the window: position 0, and a position whose
row repeats the one before it (``gather_window`` clamps rows into the book). There the
window sees the snapshot as its own predecessor: no mid change, no order flow, a zero time
step (position 0 repeats position 1's time step instead). ``table_features`` applies
exactly that, so it returns what ``snapshot_features(gather_window(...))`` returns.

Why: computed per window, the features were the step's costliest element-wise work (a
[rows, F] layout written one column group at a time, a level cumsum, per forward: acting on
B windows, the online net on B and the target net on 2B). Gathered, they are one read of
contiguous rows, fused by torch.compile with the normaliser and the first projection's
input cast. The table costs ``4 F`` bytes per snapshot (264 B at the default F = 66).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

import torch

from lobsurf.data.dataset import BookTensors, Window, clamped_window_rows, gather_window
from lobsurf.models.features import (FeatureConfig, FeatureOutput, feature_names,
                                     snapshot_features)

#: rows of the table computed per pass (bounds the temporaries of snapshot_features)
TABLE_CHUNK_ROWS = 1 << 20


class FeatureRows(NamedTuple):
    """A batch of K-windows given by their rows in a feature table.

    ``table`` [N, F] float32 (``feature_table``); ``rows`` [B, K] int64 book rows, oldest
    first, clamped into [0, N) as ``gather_window`` clamps them; ``cfg`` the features the
    table holds."""

    table: torch.Tensor
    rows: torch.Tensor
    cfg: FeatureConfig


def log_dt_column(cfg: FeatureConfig) -> int:
    """The column of log_dt: the features that read the predecessor snapshot are log_dt and
    every column after it (the mid change, then the OFI levels)."""
    names = feature_names(cfg)
    dt_col = names.index("log_dt")
    if names[dt_col + 1:dt_col + 2] != ["mid_change_ticks"] or any(
            not n.startswith("ofi_") for n in names[dt_col + 2:]):
        raise AssertionError(f"feature layout changed: {names[dt_col:]}")
    return dt_col


@torch.no_grad()
def feature_table(book: BookTensors, cfg: FeatureConfig, chunk_rows: int = TABLE_CHUNK_ROWS
                  ) -> torch.Tensor:
    """[N, F] float32 raw features of every snapshot of ``book`` with its predecessor (row 0
    with itself), on the book's device. Each pass is ``snapshot_features`` over one window
    of ``chunk_rows`` + 1 rows: the rows and the one before the first."""
    n = len(book)
    out = torch.empty(n, cfg.num_features, dtype=torch.float32, device=book.device)
    for lo in range(0, n, chunk_rows):
        hi = min(n, lo + chunk_rows)
        # window ending at hi - 1 starting one row before lo (clamped: row 0 repeats)
        end = torch.tensor([hi - 1], device=book.device)
        feats = snapshot_features(gather_window(book, end, hi - lo + 1), cfg)
        out[lo:hi] = feats.x[0, 1:]
    return out


def with_feature_table(book: BookTensors, cfg: FeatureConfig) -> BookTensors:
    """``book`` carrying its feature table for ``cfg`` (``BookTensors.features``)."""
    return replace(book, features=feature_table(book, cfg), feature_config=cfg)


def book_window(book: BookTensors, end_row: torch.Tensor, window: int
                ) -> Window | FeatureRows:
    """The K-windows ending at ``end_row`` [B]: their rows in the book's feature table when
    it has one, else the gathered book fields (``gather_window``)."""
    if book.features is None:
        return gather_window(book, end_row, window)
    return FeatureRows(book.features, clamped_window_rows(book, end_row, window),
                       book.feature_config)


def table_features(window: FeatureRows, cfg: FeatureConfig) -> FeatureOutput:
    """The windows' features as ``snapshot_features`` computes them, from the table (see the
    module docstring). Raises ValueError when the table holds other features than ``cfg``."""
    if window.cfg != cfg:
        raise ValueError(f"the book's feature table was computed for {window.cfg}, the network "
                         f"reads {cfg}")
    # Index and select only, no concatenation: torch.compile fuses all of it into the
    # normaliser's kernel (one read of the table's rows, one write of the encoder's input).
    table, rows = window.table, window.rows
    k = rows.shape[1]
    pos = torch.arange(k, device=rows.device)
    # positions that see no predecessor inside the window: 0, and a repeated row
    own = (pos == 0) | (rows[:, (pos - 1).clamp(min=0)] != rows - 1)
    dt_col = log_dt_column(cfg)
    # position 0 repeats position 1's time step
    dt_pos = pos.clamp(min=1 if k > 1 else 0)
    log_dt = torch.where(own[:, dt_pos], math.log(cfg.dt_floor_s), table[rows[:, dt_pos], dt_col])
    col = torch.arange(cfg.num_features, device=rows.device)
    # without a predecessor: no mid change and no order flow (the columns after log_dt)
    x = torch.where(col == dt_col, log_dt[..., None],
                    torch.where((col > dt_col) & own[..., None], 0.0, table[rows]))
    return FeatureOutput(x=x, log_dt=log_dt)


def window_features(window: Window | FeatureRows, cfg: FeatureConfig) -> FeatureOutput:
    """Raw features of a batch of windows, given by book fields or by feature-table rows."""
    if isinstance(window, FeatureRows):
        return table_features(window, cfg)
    return snapshot_features(window, cfg)
