"""Snapshot features on hand-made books with hand-computed values, OFI against a loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lobsurf.data.dataset import Window, gather_window, load_book_tensors
from lobsurf.models.features import (
    FeatureConfig,
    FeatureNormalizer,
    feature_names,
    order_flow_imbalance,
    snapshot_features,
)

LV = 10


def _window(bid_px, ask_px, bid_sz, ask_sz, ts) -> Window:
    # Each argument: K rows of the first levels; deeper levels continue one tick apart, size 0.
    def side(px, step):
        out = np.zeros((len(px), LV), np.int32)
        for k, row in enumerate(px):
            out[k, :len(row)] = row
            for lv in range(len(row), LV):
                out[k, lv] = out[k, lv - 1] + step
        return torch.from_numpy(out)[None]

    def size(sz):
        out = np.zeros((len(sz), LV), np.int32)
        for k, row in enumerate(sz):
            out[k, :len(row)] = row
        return torch.from_numpy(out)[None]

    return Window(ts_ns=torch.tensor([ts], dtype=torch.int64),
                  bid_px_ticks=side(bid_px, -1), ask_px_ticks=side(ask_px, +1),
                  bid_sz=size(bid_sz), ask_sz=size(ask_sz),
                  bid_ct=size(bid_sz), ask_ct=size(ask_sz))


def _hand_window() -> Window:
    return _window(
        bid_px=[[100, 99], [100, 99], [101, 100]],
        ask_px=[[101, 102], [101, 102], [102, 103]],
        bid_sz=[[10, 20], [15, 20], [7, 15]],
        ask_sz=[[30, 10], [25, 10], [40, 0]],
        ts=[0, 1_000, 1_001_000],
    )


def test_hand_made_book_full_vector() -> None:
    cfg = FeatureConfig(book_levels=2, ofi_levels=1)
    out = snapshot_features(_hand_window(), cfg)
    names = feature_names(cfg)
    assert out.x.shape == (1, 3, len(names)) == (1, 3, 16)
    got = {n: out.x[0, :, i].tolist() for i, n in enumerate(names)}
    l1p = math.log1p
    # Time: gaps 1 us, 1 us (first repeats the second), 1 ms; floor 1 us.
    log_dt = [math.log(2e-6), math.log(2e-6), math.log(1e-3 + 1e-6)]
    # OFI level 0. Step 1: prices equal → e_b = 15 - 10, e_a = 25 - 30, OFI = 10.
    # Step 2: bid up → e_b = +7; ask up → e_a = -25 (the old ask queue left), OFI = 32.
    expected = {
        "bid_rel_ticks_0": [0.5, 0.5, 0.5], "bid_rel_ticks_1": [1.5, 1.5, 1.5],
        "ask_rel_ticks_0": [0.5, 0.5, 0.5], "ask_rel_ticks_1": [1.5, 1.5, 1.5],
        "log_bid_size_0": [l1p(10), l1p(15), l1p(7)], "log_bid_size_1": [l1p(20), l1p(20), l1p(15)],
        "log_ask_size_0": [l1p(30), l1p(25), l1p(40)], "log_ask_size_1": [l1p(10), l1p(10), 0.0],
        "spread_ticks": [1.0, 1.0, 1.0],
        "level_imbalance_0": [-0.5, -10 / 40, -33 / 47],
        "level_imbalance_1": [10 / 30, 10 / 30, 1.0],
        "depth_imbalance_0": [-0.5, -10 / 40, -33 / 47],
        "depth_imbalance_1": [-10 / 70, 0.0, -18 / 62],
        "log_dt": log_dt,
        "mid_change_ticks": [0.0, 0.0, 1.0],
        "ofi_0": [0.0, l1p(10), l1p(32)],
    }
    assert set(expected) == set(names)
    for name, values in expected.items():
        np.testing.assert_allclose(got[name], values, rtol=1e-6, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(out.log_dt[0].tolist(), log_dt, rtol=1e-6)


def test_empty_levels_and_wide_spread() -> None:
    # Spread of 3 ticks (mid on a half tick); level 1 empty on both sides.
    w = _window(bid_px=[[50, 49]], ask_px=[[53, 54]], bid_sz=[[4, 0]], ask_sz=[[1, 0]], ts=[5])
    cfg = FeatureConfig(book_levels=2, ofi_levels=2)
    out = snapshot_features(w, cfg)
    got = dict(zip(feature_names(cfg), out.x[0, 0].tolist()))
    assert got["spread_ticks"] == 3.0
    assert got["bid_rel_ticks_0"] == 1.5 and got["ask_rel_ticks_1"] == 2.5
    assert got["level_imbalance_1"] == 0.0  # both empty: defined as 0, not NaN
    assert got["depth_imbalance_1"] == pytest.approx(3 / 5)
    assert got["ofi_0"] == 0.0 and got["ofi_1"] == 0.0  # no predecessor
    assert got["log_dt"] == pytest.approx(math.log(1e-6))  # K = 1: no gap known
    assert torch.isfinite(out.x).all()


def _ofi_reference(bp, bs, ap, as_) -> np.ndarray:
    # Cont, Kukanov & Stoikov (2014) eq. 2, one element at a time.
    b, k, m = bp.shape
    out = np.zeros((b, k, m))
    for i in range(b):
        for t in range(1, k):
            for lv in range(m):
                e = 0.0
                if bp[i, t, lv] >= bp[i, t - 1, lv]:
                    e += bs[i, t, lv]
                if bp[i, t, lv] <= bp[i, t - 1, lv]:
                    e -= bs[i, t - 1, lv]
                if ap[i, t, lv] <= ap[i, t - 1, lv]:
                    e -= as_[i, t, lv]
                if ap[i, t, lv] >= ap[i, t - 1, lv]:
                    e += as_[i, t - 1, lv]
                out[i, t, lv] = e
    return out


def test_ofi_matches_reference() -> None:
    g = torch.Generator().manual_seed(0)
    shape = (5, 12, 3)
    bp = torch.randint(98, 101, shape, generator=g)
    ap = bp + torch.randint(1, 3, shape, generator=g)
    bs = torch.randint(0, 60, shape, generator=g).float()
    as_ = torch.randint(0, 60, shape, generator=g).float()
    got = order_flow_imbalance(bp, bs, ap, as_)
    ref = _ofi_reference(bp.numpy(), bs.numpy(), ap.numpy(), as_.numpy())
    np.testing.assert_array_equal(got.numpy(), ref)


def test_features_depend_on_the_window_only(tiny_store) -> None:
    # Two windows ending at the same rows, K = 8 and K = 4: their shared snapshots (all but
    # the shorter window's first) have identical features.
    book = load_book_tensors(tiny_store)
    end = torch.tensor([20, 700, 2500])
    cfg = FeatureConfig()
    long = snapshot_features(gather_window(book, end, 8), cfg)
    short = snapshot_features(gather_window(book, end, 4), cfg)
    assert torch.equal(long.x[:, -3:], short.x[:, -3:])
    assert torch.equal(long.log_dt[:, -3:], short.log_dt[:, -3:])
    assert torch.isfinite(long.x).all()


def test_normalizer_fits_training_rows_and_round_trips() -> None:
    cfg = FeatureConfig(normalized_clip=8.0)
    g = torch.Generator().manual_seed(1)
    train = torch.randn(5000, 4, generator=g) * torch.tensor([1.0, 10.0, 0.1, 0.0]) + 7.0
    norm = FeatureNormalizer(4, cfg).fit_(train)
    z = norm(train)
    np.testing.assert_allclose(z[:, :3].mean(0).numpy(), 0.0, atol=1e-5)
    np.testing.assert_allclose(z[:, :3].std(0, unbiased=False).numpy(), 1.0, atol=0.05)
    # A constant feature is centred, and its scale floored rather than 0.
    assert norm.scale[3] == pytest.approx(cfg.min_scale) and torch.all(z[:, 3] == 0)
    assert norm(torch.full((1, 4), 1e6)).max() == 8.0  # clipped
    other = FeatureNormalizer(4, cfg)
    other.load_state_dict(norm.state_dict())
    assert torch.equal(other(train), z)


def test_cumsum_levels_is_the_cumulative_size_over_levels() -> None:
    from lobsurf.models.features import cumsum_levels

    g = torch.Generator().manual_seed(0)
    sizes = torch.randint(0, 5000, (3, 7, 10), generator=g).to(torch.float32)
    expected = np.cumsum(sizes.numpy().astype(np.float64), axis=-1)
    got = cumsum_levels(sizes)
    assert got.shape == sizes.shape
    np.testing.assert_array_equal(got.numpy(), expected)  # integer sizes: exact
    strided = sizes.transpose(0, 1)  # a non-contiguous input
    np.testing.assert_array_equal(cumsum_levels(strided).numpy(), expected.transpose(1, 0, 2))
