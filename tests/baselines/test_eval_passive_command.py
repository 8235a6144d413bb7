"""``lobsurf eval ... --passive-orders`` end to end on a tiny synthetic store (the
``tradeable`` preset, partial trades and all): baseline:all gains the passive baselines and
loses bayes, the market-order baselines' rows do not change, the queue model and maker fee
flags reach the simulator, and the output names what the ceiling does not cover."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace

import pytest

from lobsurf.cli import main
from lobsurf.data.synth import write_synth_store
from lobsurf.presets import PRESETS

ARGS = ["--envs", "8", "--window", "32", "--stride", "10", "--no-progress", "--device", "cpu"]
PASSIVE = ("market_maker", "passive_imbalance")
PASSIVE_METRICS = ("maker_lots", "maker_share", "maker_fees", "posted_lots", "fill_rate",
                   "rejected_posts")


def run_main(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["eval", *args])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("passive") / "store"
    write_synth_store(path, replace(PRESETS["tradeable"], snapshots_per_day=2_500, days=3))
    return str(path)


@pytest.mark.slow
def test_baseline_all_with_passive_orders(store: str) -> None:
    # the passive ceiling exists under risk_averse (the default queue model leaves it out)
    code, out, err = run_main("baseline:all", "--store", store, "--passive-orders", "--json",
                              "--queue-model", "risk_averse", *ARGS)
    assert code == 0, err
    passive = json.loads(out)
    json.dumps(passive, allow_nan=False)  # strict JSON: no stop is null, not Infinity
    pol = passive["policies"]
    assert list(pol) == ["hold", "random", "momentum", "imbalance", "oracle", "optimal", *PASSIVE,
                         "optimal_passive"]
    assert "baseline bayes left out" in err and "maker fee = the taker fee" in err
    assert "optimal_passive that of market orders and one-lot resting orders" in passive[
        "settings"]["ceiling_note"]
    for name in pol:  # the passive optimum is at least every policy of the sweep
        assert pol["optimal_passive"]["net_pnl"] >= pol[name]["net_pnl"] - 1e-9, name
    assert passive["settings"]["sim"]["passive_orders"] is True
    fitted = passive["settings"]["baselines"]
    assert {"inventory_limit", "pull_threshold", "stop_ticks", "best_training_net_pnl",
            "fit_rows"} <= set(fitted["market_maker_fitted"])
    assert "passive_imbalance_threshold" in fitted
    for name in pol:
        assert all(key in pol[name] for key in PASSIVE_METRICS), name
    code, out, err = run_main("baseline:all", "--store", store, "--json", *ARGS)
    assert code == 0, err
    market = json.loads(out)["policies"]
    assert list(market) == ["hold", "random", "momentum", "imbalance", "oracle", "bayes",
                            "optimal"]
    for name in ("hold", "random", "momentum", "imbalance", "oracle", "optimal"):
        same = {k: v for k, v in pol[name].items()
                if k not in (*PASSIVE_METRICS, "capture_passive")}
        assert same == {k: v for k, v in market[name].items() if k != "capture_bayes"}, name
        assert "maker_lots" not in market[name]


def test_flags_reach_the_simulator_and_the_table_says_what_the_ceiling_covers(store) -> None:
    code, out, err = run_main("baseline:hold", "baseline:optimal", "--store", store,
                              "--passive-orders", "--queue-model", "probabilistic",
                              "--queue-power", "2", "--maker-fee-per-lot", "-0.5", *ARGS)
    assert code == 0, err
    assert "maker fee -0.50 per lot + 0 bps, a rebate" in err
    assert "passive orders on" in out.splitlines()[0]
    rows = {line.split()[0] for line in out.splitlines()[1:] if line.strip()}
    assert set(PASSIVE_METRICS) <= rows
    assert "note: optimal is the exact optimum of market orders" in out
    code, out, _ = run_main("baseline:hold", "--store", store, "--passive-orders", "--queue-model",
                            "probabilistic", "--queue-power", "2", "--maker-fee-bps", "-0.1",
                            "--json", *ARGS)
    sim = json.loads(out)["settings"]["sim"]
    assert (sim["queue_model"], sim["queue_power"]) == ("probabilistic", 2)
    assert (sim["maker_fee_per_lot"], sim["maker_fee_bps"]) == (0.0, -0.1)
    assert "ceiling_note" not in json.loads(out)["settings"]  # no optimal swept


def test_passive_baselines_need_passive_orders_and_errors_are_one_line(store) -> None:
    code, _, err = run_main("baseline:market_maker", "--store", store, *ARGS)
    assert code != 0 and "posts resting orders: add --passive-orders" in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = run_main("baseline:hold", "--store", store, "--passive-orders",
                            "--queue-power", "0", *ARGS)
    assert code != 0 and "--queue-power must be an integer >= 1" in err
    code, _, err = run_main("baseline:hold", "--store", store, "--passive-orders",
                            "--latency-rows", "12", *ARGS)
    assert code != 0 and "--latency-rows" in err and "--stride" in err


def test_the_random_split_reports_the_resting_orders(store) -> None:
    code, out, err = run_main("baseline:hold", "baseline:random", "--store", store,
                              "--passive-orders", "--split", "random", "--steps", "50",
                              "--json", *ARGS)
    assert code == 0, err
    pol = json.loads(out)["policies"]
    assert all(key in pol["random"] for key in PASSIVE_METRICS)
    assert pol["random"]["maker_lots"] == 0 and pol["random"]["maker_share"] == 0.0
    assert pol["hold"]["posted_lots"] == 0 and pol["hold"]["fill_rate"] is None


def test_the_passive_optimum_where_it_cannot_plan(store) -> None:
    """Named under the probabilistic queue it is refused in one line; in baseline:all it is
    left out with one line saying why."""
    from lobsurf.baselines.policies import baseline_names, without_unplannable
    from lobsurf.sim import SimConfig
    from tests.sim.passive_books import queue_market

    code, _, err = run_main("baseline:optimal_passive", "--store", store, "--passive-orders",
                            "--queue-model", "probabilistic", *ARGS)
    assert code != 0 and "needs the risk_averse queue model" in err
    assert len(err.strip().splitlines()) == 1
    sim = SimConfig(passive_orders=True, queue_model="probabilistic")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        kept = without_unplannable(list(baseline_names(sim)), queue_market(100, 1), sim)
    assert "optimal_passive" not in kept and {"market_maker", "passive_imbalance"} <= set(kept)
    assert "baseline optimal_passive left out: it needs the risk_averse" in err.getvalue()
