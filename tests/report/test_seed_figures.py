"""The pieces of a seed group's report that need no training: the capture ceilings from a
hand-made ``lobsurf eval --json`` result (with and without ``baseline:bayes``), the
learning figure drawn from hand-made validation records, the tables' capture of bayes, the
PnL unit of a store and the axes that name it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lobsurf.backtest.metrics import BacktestRecord
from lobsurf.data.store import Instrument, StoreWriter
from lobsurf.eval.seed_verdict import verdict
from lobsurf.report import figures
from lobsurf.report.figures import SeedCurves, learning_figure
from lobsurf.report.seeds import _captures, _per_seed, _verdict, ceilings
from lobsurf.report.units import PRICE_UNITS, pnl_unit
from tests.conftest import TICK_FIXED, random_walk_books


def eval_json(tmp_path: Path, bayes: float | None) -> dict:
    """A group evaluation's JSON as ``lobsurf eval RUN --json`` writes it, by hand."""
    policies = {"hold": {"net_pnl": 0.0, "capture": 0.0},
                "optimal": {"net_pnl": 5000.0, "capture": 1.0},
                "seed_0": {"net_pnl": 2000.0, "capture": 0.4},
                "seed_1": {"net_pnl": 0.0, "capture": 0.0}}
    if bayes is not None:
        policies["bayes"] = {"net_pnl": 5000.0 * bayes, "capture": bayes}
    path = tmp_path / "eval.json"
    path.write_text(json.dumps({"policies": policies}))
    return json.loads(path.read_text())


def validations(captures: list[float], wins: list[float], train_wins: list[float]) -> list:
    return [{"event": "validation", "step": 500 * (i + 1), "val_capture": c, "val_win_rate": w,
             "train_sweep_win_rate": t} for i, (c, w, t) in enumerate(zip(captures, wins,
                                                                          train_wins))]


SEEDS = [SeedCurves(0, validations([0.2, 0.49, 0.4, 0.3], [0.5, 0.56, 0.55, 0.5],
                                   [0.52, 0.6, 0.7, 0.9]),
                    {"policy": "checkpoint", "step": 1000}),
         SeedCurves(1, validations([-0.1, 0.0, -0.2, -0.3], [0.4, 0.45, 0.4, 0.4],
                                   [0.4, 0.5, 0.6, 0.8]),
                    {"policy": "hold", "reason": "not confirmed"})]


@pytest.fixture
def drawn(monkeypatch):
    """The figures drawn (each figure's lines), instead of written."""
    out = []

    def keep(fig, path):
        out.append([line for ax in fig.axes for line in ax.get_lines()])
        figures.plt.close(fig)
        return path

    monkeypatch.setattr(figures, "_save", keep)
    return out


def test_the_exact_optimum_is_always_a_ceiling_and_bayes_where_the_eval_has_it(tmp_path):
    assert ceilings(eval_json(tmp_path, None)) == {"exact optimum (reads the future)": 1.0}
    got = ceilings(eval_json(tmp_path, 0.62))
    assert got == {"exact optimum (reads the future)": 1.0,
                   "baseline:bayes, held out (causal ceiling)": 0.62}


@pytest.mark.parametrize("bayes", [None, 0.62])
def test_the_learning_figure_draws_the_ceilings_and_the_chosen_step(tmp_path, drawn, bayes):
    learning_figure(SEEDS, ceilings(eval_json(tmp_path, bayes)), tmp_path / "l.png")
    every = drawn[0]
    lines = {line.get_label(): line for line in every if not line.get_label().startswith("_")}
    optimum = lines["exact optimum (reads the future): 1.00"]
    assert list(optimum.get_ydata()) == [1.0, 1.0]
    bayes_lines = [k for k in lines if k.startswith("baseline:bayes")]
    if bayes is None:
        assert bayes_lines == []
    else:
        assert bayes_lines == ["baseline:bayes, held out (causal ceiling): 0.62"]
        assert list(lines[bayes_lines[0]].get_ydata()) == [bayes, bayes]
    # each seed's capture over steps; the chosen one starred at its step, hold's not
    curve = lines["seed 0: step 1,000 chosen"]
    assert list(curve.get_xdata()) == [500, 1000, 1500, 2000]
    assert list(curve.get_ydata()) == [0.2, 0.49, 0.4, 0.3]
    assert "seed 1: hold chosen" in lines
    stars = [line for line in every if line.get_marker() == "*"]
    assert len(stars) == 1 and list(stars[0].get_xdata()) == [1000]
    assert list(stars[0].get_ydata()) == [0.49]
    # the win rates: validation solid, training-slice sweep dashed, per seed
    dashed = [line for line in every if line.get_linestyle() == "--"
              and list(line.get_xdata()) == [500, 1000, 1500, 2000]]
    assert [list(d.get_ydata()) for d in dashed] == [[0.52, 0.6, 0.7, 0.9],
                                                      [0.4, 0.5, 0.6, 0.8]]


def test_the_learning_figure_is_written(tmp_path):
    path = learning_figure(SEEDS, ceilings(eval_json(tmp_path, 0.5)), tmp_path / "l.png")
    assert path.stat().st_size > 10_000


def _store(path: Path, **instrument) -> str:
    """A small store of one instrument with these settings (``Instrument``'s fields)."""
    with StoreWriter(path, gap_threshold_ns=60 * 10**9) as writer:
        writer.add_instrument(Instrument(1, "TEST", TICK_FIXED, **instrument))
        writer.begin_source("chunk0")
        writer.append(random_walk_books(200, 1))
        writer.close()
    return str(path)


def test_the_pnl_unit_is_the_store_currency(tmp_path):
    assert pnl_unit(_store(tmp_path / "usd", multiplier=50.0, currency="USD")) == "USD"
    assert pnl_unit(_store(tmp_path / "bare", multiplier=1.0, multiplier_known=False,
                           currency="USD")) == PRICE_UNITS
    assert pnl_unit(_store(tmp_path / "eur", currency="EUR"), instrument_id=1) == "EUR"
    assert pnl_unit(str(tmp_path / "nowhere")) == "currency"


def test_the_pnl_axes_name_the_unit(tmp_path, monkeypatch):
    axes = []

    def keep(fig, path):
        axes.extend(fig.axes)
        figures.plt.close(fig)
        return path

    monkeypatch.setattr(figures, "_save", keep)

    def record(pnl: list[float]) -> BacktestRecord:
        n = len(pnl)
        return BacktestRecord(trade_pnl=np.array(pnl), trade_holding_steps=np.ones(n, np.int64),
                              step_pnl=np.array(pnl), step_day=np.zeros(n, np.int64),
                              step_hold=np.zeros(n, bool), gross_pnl=0.0, fees=0.0,
                              turnover_lots=0, unfilled_lots=0)

    figures.equity_figure({"seed_0": record([1.0, -2.0]), "hold": record([0.0, 0.0])},
                          tmp_path / "e.png", "USD")
    assert [ax.get_ylabel() for ax in axes] == ["net PnL (USD)"] * 3
    result = {"policies": {"seed_0": {"net_pnl": 5.0}, "hold": {"net_pnl": 0.0}},
              "seeds": {"per_seed": [{"seed": 0, "net_pnl": 5.0}], "iqm": {"net_pnl": 5.0},
                        "iqm_ci": {"net_pnl": [5.0, 5.0]}, "ci_level": 0.95}}
    figures.seeds_figure(result, tmp_path / "s.png", PRICE_UNITS)
    assert axes[-1].get_xlabel() == f"held-out net PnL ({PRICE_UNITS})"


def test_the_tables_show_the_capture_of_bayes_where_the_eval_has_it(tmp_path):
    for bayes in (None, 0.62):
        result = eval_json(tmp_path, bayes)
        for name, m in result["policies"].items():
            m.update(trades=10, win_rate=0.5, pnl_per_trade_ci=[1.0, 2.0],
                     capture_bayes=None if bayes is None else m["capture"] / bayes)
        result["chosen"] = [{"seed": 0, "policy": "checkpoint", "step": 1000, "reason": "r"},
                            {"seed": 1, "policy": "hold", "reason": "r"}]
        result["seeds"] = verdict(result, tmp_path)
        per_seed, table = _per_seed(result), _verdict(result["seeds"], _captures(result))
        assert ("<th>capture_bayes</th>" in per_seed) == (bayes is not None)
        assert ("<td>capture_bayes</td>" in table) == (bayes is not None)
        if bayes is not None:  # seed 0: 0.4 of the optimum, 0.4 / 0.62 of the ceiling
            assert f"<td>{0.4 / 0.62:.3f}</td>" in per_seed
