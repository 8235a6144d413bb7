"""How often the model-choice rule calls noise an edge over many validations, and how large
an edge it needs to find one (docs/training.md, "Validation and model choice").

Simulated runs of 20 validations each (tests/training/null_runs.py: heavy-tailed, skewed
per-trade PnL, checkpoints of one run alike) go through three rules:

* ``per-look``: the earlier rule, every validation judged by its own interval: a candidate
  has >= 30 trades and the lower end of its 95 % percentile-bootstrap interval of PnL per
  trade above 0 (``lobsurf.backtest.metrics.bootstrap_mean_ci``, 1,000 resamples);
* ``bonferroni``: every validation by its own one-sided t test at 2.5 % / 20;
* ``confirm``: the rule of ``lobsurf.training.selection.choice`` (choose on one half, confirm the one
  chosen once on the other: a one-sided t test at 2.5 %), through ``ModelChoice`` itself.

Prints the share of runs with no edge that choose a checkpoint (with its Monte-Carlo
standard error); the smallest edge (mean PnL per trade in units of its sd) that each rule
finds in at least 80 % of runs, by trades per validation, with the edge on every
validation and on 3 of the 20 only (a learner that peaks, then decays); and the one-sided
size at 2.5 % of four tests of a mean (why the confirmation is a t test).

    python benchmarks/choice_false_positives.py [--runs 2000] [--power-runs 200]
        [--size-samples 2000] [--parts fwer,power,size]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.stats import t as student_t

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lobsurf.backtest.metrics import MetricsConfig, bootstrap_mean_ci  # noqa: E402
from lobsurf.training.selection.choice import ModelChoice  # noqa: E402
from tests.training.null_runs import (  # noqa: E402
    Market,
    look_metrics,
    simulate_runs,
    standard_trades,
)

MIN_TRADES = 30
RATE = 0.025
#: a look whose t statistic is below this cannot have a bootstrap interval above 0: it is
#: not bootstrapped (saves the time of ~85 % of the looks, changes no verdict)
T_SCREEN = 1.0
#: power target
POWER = 0.8


def _t(pnl: np.ndarray) -> float:
    sd = pnl.std(ddof=1)
    return pnl.mean() / (sd / math.sqrt(len(pnl))) if sd > 0 else math.inf


def per_look(looks: list[np.ndarray]) -> bool:
    cfg = MetricsConfig()
    for pnl in looks:
        if len(pnl) >= MIN_TRADES and _t(pnl) > T_SCREEN and bootstrap_mean_ci(pnl, cfg)[0] > 0:
            return True
    return False


def bonferroni(looks: list[np.ndarray]) -> bool:
    crit = student_t.ppf(1 - RATE / len(looks), np.array([len(p) - 1 for p in looks]))
    return any(len(p) >= MIN_TRADES and _t(p) > c for p, c in zip(looks, crit))


def confirm(looks: list[np.ndarray], pieces: int) -> bool:
    choice = ModelChoice(MIN_TRADES, 0, RATE)
    for step, pnl in enumerate(looks):
        choice.update(step, look_metrics(pnl, pieces), lambda: ({}, {}))
    return choice.chosen


RULES = {"per-look": lambda looks, m: per_look(looks),
         "bonferroni": lambda looks, m: bonferroni(looks),
         "confirm": lambda looks, m: confirm(looks, m.pieces)}


def chosen_share(rule: str, market: Market, runs: int, seed: int) -> float:
    hits = sum(RULES[rule](looks, market) for looks in simulate_runs(market, runs, seed))
    return hits / runs


#: the largest edge tried, sd per trade
MAX_EDGE = 2.0


def smallest_edge(rule: str, market: Market, runs: int) -> float | None:
    """Bisection on the edge for POWER (power grows with the edge), to 0.01 sd; None where
    even MAX_EDGE is not found often enough."""
    lo, hi = 0.0, MAX_EDGE
    if chosen_share(rule, replace(market, edge=hi), runs, seed=1) < POWER:
        return None
    while hi - lo > 0.01:
        mid = (lo + hi) / 2
        if chosen_share(rule, replace(market, edge=mid), runs, seed=1) >= POWER:
            hi = mid
        else:
            lo = mid
    return hi


def false_edges(runs: int) -> None:
    """The share of runs with no edge that choose a checkpoint, by rule and law."""
    laws = {"left tail (skew -2.3)": Market(),
            "left tail, looks independent": Market(keep=0.0),
            "right tail (skew +2.3)": Market(sign=1),
            "normal": Market(sigma=0.0)}
    print(f"runs with no edge that choose a checkpoint, over 20 validations of 60-300 trades "
          f"({runs} runs each; +- one Monte-Carlo standard error)")
    print(f"{'trades':32}" + "".join(f"{r:>18}" for r in RULES))
    for name, market in laws.items():
        cells = []
        for rule in RULES:
            p = chosen_share(rule, market, runs, seed=0)
            cells.append(f"{p * 100:6.2f} +- {math.sqrt(p * (1 - p) / runs) * 100:4.2f} %")
        print(f"{name:32}" + "".join(f"{c:>18}" for c in cells), flush=True)


def power(runs: int) -> None:
    """The smallest edge each rule finds in POWER of runs, by law and trades per look."""
    print(f"\nsmallest edge (mean PnL per trade / its sd) found in >= {POWER:.0%} of runs "
          f"({runs} runs per try)")
    print(f"{'trades per validation':32}" + "".join(f"{r:>18}" for r in RULES))
    for law, base in (("left tail", Market()), ("normal", Market(sigma=0.0)),
                      ("left, 3 looks", Market(edge_looks=3))):
        for n in (30, 60, 100, 300):
            market = replace(base, trades=(n, n))
            edges = [smallest_edge(rule, market, runs) for rule in RULES]
            cells = ["never" if e is None else f"{e:.2f}" for e in edges]
            print(f"{f'{n} ({law})':32}" + "".join(f"{c:>18}" for c in cells), flush=True)


def one_sided_lower_bounds(x: np.ndarray, rng: np.random.Generator, resamples: int
                           ) -> dict[str, np.ndarray]:
    """[S, n] samples -> each test's lower bound of the mean at one-sided RATE: Student t,
    percentile bootstrap, bootstrap-t, and Johnson's skew-corrected t (1978; as +-1: a pass
    or not)."""
    s, n = x.shape
    mean, sd = x.mean(1), x.std(1, ddof=1)
    se = sd / math.sqrt(n)
    crit = student_t.ppf(1 - RATE, n - 1)
    m3 = ((x - mean[:, None]) ** 3).mean(1)
    johnson = (mean + m3 / (6 * sd ** 2 * n) + m3 * mean ** 2 / (3 * sd ** 4)) / se
    percentile, boot_t = np.empty(s), np.empty(s)
    for i in range(s):
        draws = x[i][rng.integers(0, n, (resamples, n))]
        means, ses = draws.mean(1), draws.std(1, ddof=1) / math.sqrt(n)
        percentile[i] = np.quantile(means, RATE)
        t_star = (means - mean[i]) / np.where(ses > 0, ses, np.inf)
        boot_t[i] = mean[i] - np.quantile(t_star, 1 - RATE) * se[i]
    return {"t": mean - crit * se, "percentile": percentile, "bootstrap-t": boot_t,
            "johnson t": np.where(johnson > crit, 1.0, -1.0)}


#: the synthetic store of the observed trades: tradeable-null, 2 days of 40,000 snapshots
SYNTH_ARGS = ("--preset", "tradeable-null", "--snapshots", "40000", "--days", "2")
INGEST_ARGS = ("--multiplier", "50", "--currency", "USD", "--fee-per-lot", "1")


def observed_trades() -> dict[str, np.ndarray]:
    """Per-trade net PnL of baseline:random and baseline:momentum swept over every row of a
    tradeable-null store (stride 10, window 32, fee 1 per lot), each centred to mean 0."""
    import tempfile

    import torch

    from lobsurf.baselines.policies import BaselineConfig, make_baseline
    from lobsurf.cli import main as cli
    from lobsurf.data.dataset import load_book_tensors
    from lobsurf.data.store import Store
    from lobsurf.backtest.sweep import SweepConfig, sweep
    from lobsurf.sim.config import SimConfig
    from lobsurf.sim.env import BatchedLobEnv

    with tempfile.TemporaryDirectory() as tmp:
        dbn, store = Path(tmp) / "dbn", Path(tmp) / "store"
        assert cli(["synth", "--out", str(dbn), "--no-progress", *SYNTH_ARGS]) == 0
        assert cli(["ingest", *map(str, sorted(dbn.glob("*.dbn.zst"))), "--out", str(store),
                    "--no-progress", *INGEST_ARGS]) == 0
        book = load_book_tensors(Store.open(store), "cpu")
    sim = SimConfig(window=32, stride=10, fee_per_lot=1.0)
    t = torch.arange(len(book))
    rows = t[t - sim.window >= book.segment_start[book.segment_of_row]]
    env = BatchedLobEnv(book, 1, sim)
    policies = {n: make_baseline(n, env, BaselineConfig()) for n in ("random", "momentum")}
    records, _ = sweep(book, rows, policies, sim, SweepConfig())
    return {n: r.trade_pnl - r.trade_pnl.mean() for n, r in records.items()}


def sizes(samples: int, resamples: int) -> None:
    """The one-sided size at RATE of each test of a zero mean, by law and trades: the
    simulated runs' laws and the observed trades of two baselines (resampled)."""
    rng = np.random.default_rng(2)
    observed = observed_trades()
    laws = {"left tail": lambda k: standard_trades(rng, k, Market()),
            "right tail": lambda k: standard_trades(rng, k, Market(sign=1)),
            "random's trades": lambda k: rng.choice(observed["random"], k),
            "momentum's trades": lambda k: rng.choice(observed["momentum"], k),
            "momentum's, negated": lambda k: -rng.choice(observed["momentum"], k)}
    for name in ("random", "momentum"):
        x = observed[name]
        skew = float(((x - x.mean()) ** 3).mean() / x.std() ** 3)
        print(f"baseline:{name}: {len(x)} trades, skew {skew:+.1f}")
    error = math.sqrt(RATE * (1 - RATE) / samples)
    print(f"\none-sided size at {RATE:.1%} of tests of a zero mean ({samples} samples, "
          f"{resamples} resamples; +- {error:.2%} Monte-Carlo standard error at the level)")
    methods = ("t", "percentile", "bootstrap-t", "johnson t")
    print(f"{'law, trades':32}" + "".join(f"{m:>14}" for m in methods))
    for law, draw in laws.items():
        for n in (30, 100, 300):
            x = draw(samples * n).reshape(samples, n)
            bounds = one_sided_lower_bounds(x, rng, resamples)
            print(f"{f'{law}, {n}':32}" + "".join(f"{np.mean(bounds[m] > 0):14.2%}"
                                                  for m in methods), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--power-runs", type=int, default=200)
    parser.add_argument("--size-samples", type=int, default=2000)
    parser.add_argument("--parts", default="fwer,power,size")
    args = parser.parse_args()
    parts = args.parts.split(",")
    t0 = time.time()
    if "fwer" in parts:
        false_edges(args.runs)
    if "power" in parts:
        power(args.power_runs)
    if "size" in parts:
        sizes(args.size_samples, 1000)
    print(f"\n{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
