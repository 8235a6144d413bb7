"""Pretraining leakage rules (docs/pretrain.md, "Data and split"):

* everything fitted before evaluation (the feature normaliser, the weights, the class
  prior) is a function of the training side of the cut only: rewriting every held-out
  row leaves it bit for bit unchanged;
* the training loss supervises each window position with *that* position's labels,
  checked against labels recomputed here from the mid path with plain loops (an
  off-by-one shift of labels against windows still learns on persistent synthetic
  signals, so the learning tests cannot see it).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from lobsurf.data.dataset import BookTensors, gather_window, load_book_tensors
from lobsurf.data.labels import LabelConfig, compute_labels
from lobsurf.data.split import time_split
from lobsurf.models.config import EncoderConfig
from lobsurf.pretrain.checkpoint import load_checkpoint
from lobsurf.pretrain.config import PretrainConfig
from lobsurf.pretrain.loop import build_optimizer, pretrain, train_step
from lobsurf.pretrain.model import PretrainModel

K, HORIZONS = 8, (5, 20)
#: Held-out sizes are multiplied by this (on top of mirroring the book), so any statistic
#: that reads a held-out row moves.
SIZE_FACTOR = 3


def _config(**over) -> PretrainConfig:
    base = dict(window=K, batch_size=16, steps=3, lr_warmup_steps=1, train_fraction=0.8,
                labels=LabelConfig(horizons_snapshots=HORIZONS),
                encoder=EncoderConfig(d_model=16, n_layers=1, headdim=16, d_state=8),
                eval_max_windows=300, logistic_max_rows=500, seed=0)
    base.update(over)
    return PretrainConfig(**base)


def _rewrite_held_out(book: BookTensors, cut: int) -> BookTensors:
    # Rows >= cut: the book mirrored around a price (bid <-> ask, every move reversed, so
    # up labels become down labels) and the sizes scaled; rows < cut untouched.
    late = torch.arange(len(book)) >= cut
    top = int(book.ask_px_ticks.max() + book.bid_px_ticks.max())
    new = {}
    for side, other in (("bid", "ask"), ("ask", "bid")):
        mirrored = top - getattr(book, f"{other}_px_ticks")
        new[f"{side}_px_ticks"] = torch.where(late[:, None], mirrored,
                                              getattr(book, f"{side}_px_ticks"))
        sizes = getattr(book, f"{other}_sz") * SIZE_FACTOR
        new[f"{side}_sz"] = torch.where(late[:, None], sizes, getattr(book, f"{side}_sz"))
    return dataclasses.replace(book, **new)


def test_nothing_fitted_reads_a_held_out_row(tiny_store, tmp_path) -> None:
    cfg = _config()
    book = load_book_tensors(tiny_store)
    cut = time_split(book, K, min(HORIZONS), max(HORIZONS), cfg.train_fraction).cut_row
    other = _rewrite_held_out(book, cut)
    a = pretrain(cfg, book, out_dir=tmp_path / "a", progress=False)
    b = pretrain(cfg, other, out_dir=tmp_path / "b", progress=False)
    assert a["cut_row"] == b["cut_row"] == cut
    # The normaliser statistics and every trained weight are identical.
    sa, sb = (load_checkpoint(tmp_path / r).model.state_dict() for r in ("a", "b"))
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name
    assert a["final_train_loss"] == b["final_train_loss"]
    for h in map(str, HORIZONS):
        # The class prior comes from training labels only...
        assert a["horizons"][h]["prior"]["p_up"] == b["horizons"][h]["prior"]["p_up"]
        # ...while the rewrite did reach the held-out scores (the test is not vacuous).
        assert a["horizons"][h]["prior"]["accuracy"] != b["horizons"][h]["prior"]["accuracy"]
        assert a["horizons"][h]["model"]["log_loss"] != b["horizons"][h]["model"]["log_loss"]


def _reference_labels(book: BookTensors, end_row: int, horizon: int, edges: tuple[float, ...]):
    # Per window position k (row end_row - K + 1 + k), from the mid path with loops:
    # (direction, direction valid, bucket, bucket valid) lists.
    bid0 = book.bid_px_ticks[:, 0].tolist()
    ask0 = book.ask_px_ticks[:, 0].tolist()
    stops = book.segment_stop.tolist()
    starts = book.segment_start.tolist()
    stop = next(e for s, e in zip(starts, stops) if s <= end_row < e)
    out = []
    for row in range(end_row - K + 1, end_row + 1):
        inside = row + horizon < stop
        ret = ((bid0[row + horizon] + ask0[row + horizon]) - (bid0[row] + ask0[row])) / 2 \
            if inside else 0.0
        out.append((float(ret > 0), inside and ret != 0, sum(e <= ret for e in edges), inside))
    return out


def _reference_loss(model: PretrainModel, book: BookTensors, end_row: int,
                    cfg: PretrainConfig) -> float:
    # The documented loss on one window: per horizon, the mean BCE (and FRD CE) over the
    # window positions with a valid label; then the mean over horizons.
    with torch.no_grad():
        out = model(gather_window(book, torch.tensor([end_row]), K), all_positions=True)
    d_logits = out.direction_logits[0].double().numpy()  # [K, H]
    f_logits = out.frd_logits[0].double().numpy()  # [K, H, C]
    d_terms, f_terms = [], []
    for j, h in enumerate(cfg.labels.horizons_snapshots):
        bce, ce = [], []
        for k, (y, y_ok, bucket, b_ok) in enumerate(
                _reference_labels(book, end_row, h, cfg.labels.bucket_edges_ticks)):
            if y_ok:
                p = 1.0 / (1.0 + math.exp(-d_logits[k, j]))
                bce.append(-(y * math.log(p) + (1 - y) * math.log(1 - p)))
            if b_ok:
                z = f_logits[k, j]
                ce.append(float(np.log(np.exp(z - z.max()).sum()) + z.max() - z[bucket]))
        d_terms.append(np.mean(bce) if bce else 0.0)
        f_terms.append(np.mean(ce) if ce else 0.0)
    return float(np.mean(d_terms) + cfg.frd_weight * np.mean(f_terms))


def test_training_loss_uses_each_positions_own_labels(tiny_store) -> None:
    cfg = _config(batch_size=2)
    book = load_book_tensors(tiny_store)  # segments [0, 2000) and [2000, 3500)
    labels = compute_labels(book, cfg.labels)
    torch.manual_seed(0)
    model = PretrainModel(cfg)
    opt, _ = build_optimizer(model, cfg)
    gen = torch.Generator().manual_seed(0)
    # Mid-segment, and near a segment end where the long horizon leaves the segment
    # for the later positions only.
    for end_row in (700, 1985, 3000):
        expected = _reference_loss(model, book, end_row, cfg)
        # Every sampled row is end_row: the batch mean is that window's loss (taken before
        # the step updates the weights).
        got = float(train_step(model, opt, book, labels, torch.tensor([end_row]), cfg, gen))
        print(f"end row {end_row}: loss {got:.6f}, reference {expected:.6f}")
        assert got == pytest.approx(expected, rel=1e-5)
