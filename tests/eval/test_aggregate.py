"""The statistics over seeds (rliable's method) against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from lobsurf.eval.aggregate import (
    FEW_SEEDS,
    AggregateConfig,
    aggregate,
    interval,
    iqm,
    probability_of_improvement,
)


def test_iqm_of_eight_known_numbers():
    # a quarter trimmed from each end: 2 of 8 each side, the mean of 3, 4, 5, 6
    assert iqm([100.0, 2, 7, 1, 5, 3, 6, 4]) == pytest.approx(4.5)
    # the outlier moves the mean, not the IQM
    assert iqm([1, 2, 3, 4, 5, 6, 7, 1e9]) == pytest.approx(4.5)
    assert np.mean([1, 2, 3, 4, 5, 6, 7, 1e9]) > 1e8


def test_iqm_of_few_runs_is_their_mean():
    # trim_mean cuts int(0.25 n) from each end: nothing for 2 or 3 runs
    assert iqm([1.0, 3.0]) == pytest.approx(2.0)
    assert iqm([1.0, 2.0, 9.0]) == pytest.approx(4.0)


def test_probability_of_improvement_of_known_lists():
    # pairs (1,2),(1,2): 0; (2,2),(2,2): 1/2 each; (3,2),(3,2): 1 -> 3 / 6
    assert probability_of_improvement([1, 2, 3], [2, 2]) == pytest.approx(0.5)
    # 3 vs (1,2,3): 1 + 1 + 1/2; 4 vs (1,2,3): 3 -> 5.5 / 6
    assert probability_of_improvement([3, 4], [1, 2, 3]) == pytest.approx(5.5 / 6)
    assert probability_of_improvement([5, 6], [1, 1]) == 1.0
    assert probability_of_improvement([0, 0], [0, 0]) == 0.5


def test_interval_contains_the_estimate_and_shrinks_with_more_seeds():
    widths = []
    for n in (4, 16, 64):
        x = np.tile([0.0, 5.0, 10.0, 20.0], n // 4)  # the same spread of scores, more seeds
        lo, hi = interval((x,), iqm)
        assert lo <= iqm(x) <= hi
        lo_m, hi_m = interval((x,), np.mean)
        assert lo_m <= x.mean() <= hi_m
        widths.append(hi - lo)
    assert widths[0] > widths[1] > widths[2]


def test_interval_is_reproducible_and_works_with_two_seeds():
    x = np.array([1.0, 3.0])
    a, b = interval((x,), np.mean), interval((x,), np.mean)
    assert a == b
    # two runs: every resample's mean is 1, 2 or 3
    assert a[0] >= 1.0 and a[1] <= 3.0 and a[0] < a[1]
    assert interval((np.array([2.0, 2.0]),), np.mean) == [2.0, 2.0]


def test_aggregate_shape_and_values():
    out = aggregate({"net_pnl": [100.0, -50.0, 300.0], "capture": [0.1, -0.05, 0.3]},
                    {"hold": 0.0, "momentum": 200.0})
    assert out["seeds"] == 3
    assert out["iqm"]["net_pnl"] == pytest.approx(350 / 3)
    assert out["mean"]["capture"] == pytest.approx(0.35 / 3)
    for key in ("iqm_ci", "mean_ci"):
        for metric in ("net_pnl", "capture"):
            lo, hi = out[key][metric]
            assert lo <= out[key.removesuffix("_ci")][metric] <= hi
    # two of three seeds beat hold; one of three beats momentum
    assert out["prob_improvement"]["hold"]["net_pnl"] == pytest.approx(2 / 3)
    assert out["prob_improvement"]["momentum"]["net_pnl"] == pytest.approx(1 / 3)
    lo, hi = out["prob_improvement"]["hold"]["net_pnl_ci"]
    assert 0 <= lo <= 2 / 3 <= hi <= 1
    assert 3 < FEW_SEEDS and "coarse" in out["note"]


def test_aggregate_with_an_undefined_capture_and_too_few_seeds():
    out = aggregate({"net_pnl": [1.0, 2.0], "capture": [None, 0.5]}, {"hold": 0.0})
    assert out["iqm"]["capture"] is None and out["iqm_ci"]["capture"] is None
    with pytest.raises(ValueError, match="at least 2 seeds"):
        aggregate({"net_pnl": [1.0], "capture": [0.1]}, {"hold": 0.0})
    with pytest.raises(ValueError):
        AggregateConfig(ci_level=1.0)


#: six seeds' scores: 6^6 = 46,656 equally likely resamples, enumerated by the reference
SIX = np.array([-40.0, 3.0, 10.0, 25.0, 60.0, 180.0])
#: how far (in probability) the 2,000-resample percentile may sit from the exact quantile
QUANTILE_SLACK = 0.03


def exact_bootstrap(x: np.ndarray, statistic) -> np.ndarray:
    """``statistic`` ([R, n] rows -> [R]) over every ordered resample of ``x`` (all n^n of
    them, each as likely as any other): the bootstrap distribution itself, no random draw."""
    n = len(x)
    index = np.stack(np.meshgrid(*[np.arange(n)] * n, indexing="ij"), -1).reshape(-1, n)
    return statistic(x[index])


def _iqm_rows(rows: np.ndarray) -> np.ndarray:
    # sorted rows of six: a quarter (int(1.5) = 1) trimmed from each end, plainly
    rows = np.sort(rows, axis=1)
    return rows[:, 1:-1].mean(axis=1)


def assert_percentile_interval(got: list[float], exact: np.ndarray, level: float) -> None:
    """``got`` lies within QUANTILE_SLACK (in probability) of the exact ends at ``level``."""
    tail = (1 - level) / 2
    for end, q in zip(got, (tail, 1 - tail)):
        lo, hi = np.quantile(exact, [max(q - QUANTILE_SLACK, 0), min(q + QUANTILE_SLACK, 1)])
        assert lo <= end <= hi, (level, q, end, lo, hi)


@pytest.mark.parametrize("level", [0.5, 0.95])
def test_the_intervals_are_at_the_configured_level(level):
    cfg = AggregateConfig(ci_level=level)
    out = aggregate({"net_pnl": list(SIX), "capture": list(SIX / 200)}, {"momentum": 20.0}, cfg)
    assert out["ci_level"] == level
    means = exact_bootstrap(SIX, lambda rows: rows.mean(axis=1))
    assert_percentile_interval(out["mean_ci"]["net_pnl"], means, level)
    assert_percentile_interval(out["mean_ci"]["capture"], means / 200, level)
    assert_percentile_interval(out["iqm_ci"]["net_pnl"], exact_bootstrap(SIX, _iqm_rows), level)
    beats = exact_bootstrap(SIX, lambda rows: (rows > 20.0).mean(axis=1))
    assert_percentile_interval(out["prob_improvement"]["momentum"]["net_pnl_ci"], beats, level)
