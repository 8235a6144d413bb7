"""The fee a run pays, end to end: resolved at ``lobsurf train`` (given > recorded in the
store > default bps), stated on stderr with its source, kept in the run's config.toml and
run_start record, and used again by ``lobsurf eval RUN``; old run folders keep theirs."""

from __future__ import annotations

import numpy as np
import pytest

from lobsurf.cli import main
from lobsurf.data.schema import LEVELS, SnapshotChunk
from lobsurf.data.store import Instrument, Store, StoreWriter
from lobsurf.sim.fees import DEFAULT_FEE_BPS, resolve_fees
from lobsurf.training.config import RunConfig, load_toml, resolve_run_config, run_config_to_toml
from lobsurf.training.recovery.run_folder import read_metrics
from tests.training.test_train_command import train

CENT_FIXED = 10_000_000  # a tick of 0.01 in fixed point (1e-9 units)
#: the tiny config, shorter: every check here is about fees, not learning
SHORT = ["--steps", "6", "--set", "train.checkpoint_every=6"]


def share_books(n: int, seed: int, start_ns: int) -> SnapshotChunk:
    """n books of a $300 share: tick 0.01, best bid walks +-1 cent, spread 1-2 cents."""
    rng = np.random.default_rng(seed)
    best_bid = 30_000 + np.cumsum(rng.integers(-1, 2, n))
    spread = rng.choice([1, 1, 2], n)
    lv = np.arange(LEVELS)
    sizes = lambda: rng.integers(100, 900, (n, LEVELS))
    ts = start_ns + np.cumsum(rng.integers(1_000, 5_000_000, n))
    return SnapshotChunk(
        ts_event_ns=ts - 100, ts_recv_ns=ts, instrument_id=np.full(n, 1),
        bid_px=(best_bid[:, None] - lv) * CENT_FIXED,
        ask_px=(best_bid[:, None] + spread[:, None] + lv) * CENT_FIXED,
        bid_sz=sizes(), ask_sz=sizes(), bid_ct=np.ones((n, LEVELS)), ask_ct=np.ones((n, LEVELS)))


@pytest.fixture
def share_store(tmp_path) -> Store:
    """A stock's store (multiplier 1, price ~300) laid out as the tiny store, no fee recorded."""
    with StoreWriter(tmp_path / "shares", gap_threshold_ns=60 * 10**9) as writer:
        writer.add_instrument(Instrument(1, "SHR", CENT_FIXED, multiplier=1.0, currency="USD"))
        for i, (n, start) in enumerate(((2000, 1_700_000_000), (1500, 1_700_100_000))):
            writer.begin_source(f"day{i}")
            writer.append(share_books(n, i, start * 10**9))
        writer.close()
    return Store.open(tmp_path / "shares")


def fees_of(run) -> tuple[dict, dict]:
    """(config.toml's sim fees, the run_start record's fees)."""
    sim = load_toml(str(run / "config.toml"))["sim"]
    return ({"per_lot": sim["fee_per_lot"], "bps": sim["fee_bps"]},
            read_metrics(run / "metrics.jsonl")[0]["fees"])


def test_a_run_pays_the_fee_that_fits_its_store_and_keeps_it(
        tiny_store, share_store, tiny_toml, tmp_path, capsys):
    # the tiny ES-like store recorded 1.0 per lot at ingest: the run pays it
    run = tmp_path / "es"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run, *SHORT) == 0
    err = capsys.readouterr().err
    assert "train: fee 1.00 per lot + 0 bps (recorded in the store at ingest)" in err
    assert "warning: the round-trip fee" not in err
    assert fees_of(run) == ({"per_lot": 1.0, "bps": 0.0},
                            {"per_lot": 1.0, "bps": 0.0, "source": "store"})
    # a share with no fee recorded pays the default bps: $0.003 a share, not 1.0 per lot
    run = tmp_path / "share-run"
    assert train("--store", share_store.path, "--config", tiny_toml, "--out", run, *SHORT) == 0
    err = capsys.readouterr().err
    assert (f"train: fee 0.00 per lot + {DEFAULT_FEE_BPS:g} bps of notional (= 0.003 per lot "
            "at price 300.") in err and "(the default" in err
    assert "warning: the round-trip fee" not in err
    assert fees_of(run) == ({"per_lot": 0.0, "bps": DEFAULT_FEE_BPS},
                            {"per_lot": 0.0, "bps": DEFAULT_FEE_BPS, "source": "default"})
    # the saved fee is the run's: eval and resume use it whatever the store says
    assert resolve_run_config(None, [], base=load_toml(str(run / "config.toml"))).sim.fee_bps \
        == DEFAULT_FEE_BPS
    assert main(["eval", str(run), "--json", "--no-progress", "--envs", "16"]) == 0
    err = capsys.readouterr().err
    assert "eval: fee 0.00 per lot + 0.1 bps" in err and "(the run's config, as it trained)" in err
    # an ES-sized fee given for a share: said, and warned about
    run = tmp_path / "given"
    assert train("--store", share_store.path, "--config", tiny_toml, "--out", run, *SHORT,
                 "--set", "sim.fee_per_lot=1.0") == 0
    err = capsys.readouterr().err
    assert "train: fee 1.00 per lot + 0 bps (given: sim.fee_per_lot / sim.fee_bps)" in err
    assert "train: warning: the round-trip fee 2.00 is above the typical move 0.0" in err
    assert "no policy may be able to win" in err
    assert fees_of(run)[1] == {"per_lot": 1.0, "bps": 0.0, "source": "config"}


def test_given_fees_beat_the_stores_and_old_runs_keep_theirs(tiny_store, tmp_path):
    """--set / a config file give the fee over the store's; a run folder saved before fees
    were resolved (config.toml with 1.0 per lot, 0 bps) reads back with exactly that fee."""
    from lobsurf.data.dataset import load_book_tensors

    book = load_book_tensors(tiny_store)  # recorded: 1.0 per lot
    given = resolve_run_config(None, ["sim.fee_bps=0.2"]).sim
    assert resolve_fees(given, book).record() == {"per_lot": 0.0, "bps": 0.2, "source": "config"}
    assert resolve_fees(RunConfig().sim, book).record() == {
        "per_lot": 1.0, "bps": 0.0, "source": "store"}
    old = tmp_path / "config.toml"
    old.write_text(run_config_to_toml(RunConfig()).replace(
        "[sim]\n", "[sim]\nfee_per_lot = 1.0\nfee_bps = 0.0\n"))
    cfg = resolve_run_config(None, [], base=load_toml(str(old)))
    assert (cfg.sim.fee_per_lot, cfg.sim.fee_bps) == (1.0, 0.0)
    equity = load_book_tensors(tiny_store)
    equity.fee_per_lot, equity.fee_bps = 0.01, 0.3  # another store's fee does not apply
    assert resolve_fees(cfg.sim, equity).record() == {
        "per_lot": 1.0, "bps": 0.0, "source": "config"}
