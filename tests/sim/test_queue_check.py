"""The queue check end to end: where every cancel is behind our orders the simulator's
``risk_averse`` queue is the exact one, row by row; the store rows' source records; the
table and its errors."""

from __future__ import annotations

import tempfile
from pathlib import Path

import databento_dbn as dbn
import numpy as np
import pytest

from lobsurf.data.dataset import load_book_tensors
from lobsurf.data.store import Store
from lobsurf.data.store.ingest import ingest
from lobsurf.errors import UserError
from lobsurf.sim.queue_check import (CheckSetup, book_records, check_orders, exact_traces,
                                     fill_columns, format_table, run_check, simulated_traces,
                                     store_sources)
from tests.data.dbn_files import timed, write_dbn
from tests.sim.fifo_stream import fifo_stream

SETUP = CheckSetup(horizon=20, stride=3, latency_rows=1)
PACKETS = 240
#: the rows the check posts at (arrival rows: decision rows 0, 3, 6, ... plus the latency)
POST_ROWS = set(range(SETUP.latency_rows, PACKETS, SETUP.stride))


def mbo_file(folder: Path, fresh_only: bool = True, seed: int = 3) -> Path:
    records = fifo_stream(PACKETS, seed, POST_ROWS, fresh_only=fresh_only)
    return write_dbn(folder / "fifo.mbo.dbn", dbn.Schema.MBO, timed(records))


def traces(path: Path, models: tuple[tuple[str, int], ...]):
    records = book_records(path)
    with tempfile.TemporaryDirectory() as folder:
        ingest([path], Path(folder) / "store")
        store = Store.open(Path(folder) / "store")
        book = load_book_tensors(store)
        assert len(store) == PACKETS  # one row a packet: the post rows are the ones above
        orders = check_orders(store, book, SETUP)
        exact, stats, level = exact_traces(records, store_sources(records, store), orders,
                                           SETUP)
        sims = [simulated_traces(book, orders, SETUP, m, n) for m, n in models]
        del store, book
    return exact, stats, level, sims


def test_risk_averse_is_the_exact_queue_when_every_cancel_is_behind(tmp_path):
    exact, stats, _, (risk_averse, spread) = traces(
        mbo_file(tmp_path), (("risk_averse", 3), ("probabilistic", 1)))
    filled = fill_columns(exact, 1)
    assert (filled >= 0).sum() > 40 and stats.cross_fills > 0  # queues, prints, crosses
    assert stats.out_of_order_lots == 0
    np.testing.assert_array_equal(risk_averse.refused, exact.refused)
    np.testing.assert_array_equal(fill_columns(risk_averse, 1), filled)
    np.testing.assert_array_equal(risk_averse.queue, exact.queue)
    # the cancels (all behind) move the probabilistic model's queue: the test can fail
    assert np.abs(spread.queue - exact.queue).max() > 1


def test_cancels_ahead_make_risk_averse_late(tmp_path):
    exact, _, _, (risk_averse,) = traces(mbo_file(tmp_path, fresh_only=False),
                                         (("risk_averse", 3),))
    both = (risk_averse.queue >= 0) & (exact.queue >= 0)
    assert (risk_averse.queue[both] >= exact.queue[both]).all()
    assert (risk_averse.queue[both] > exact.queue[both]).any()


def test_store_rows_map_to_their_records_past_skipped_books(tmp_path):
    rows = [("A", "B", 1, 100.0, 5, 0), ("A", "A", 2, 100.25, 5), ("A", "B", 3, 100.5, 1),
            ("C", "B", 3, 100.5, 1), ("A", "B", 4, 100.0, 1)]  # the third book is crossed
    path = write_dbn(tmp_path / "x.mbo.dbn", dbn.Schema.MBO, timed(rows))
    ingest([path], tmp_path / "store")
    store = Store.open(tmp_path / "store")
    assert store_sources(book_records(path), store).tolist() == [1, 3, 4]
    other = write_dbn(tmp_path / "y.mbo.dbn", dbn.Schema.MBO, timed(rows[:2] + rows[3:]))
    with pytest.raises(UserError, match="not a snapshot of this file"):
        store_sources(book_records(other)[:3], store)


def test_the_table_and_bad_inputs(tmp_path):
    path = mbo_file(tmp_path)
    result = run_check(path, SETUP, (("risk_averse", 3), ("probabilistic", 2)))
    exact, risk_averse, _ = result.rows
    assert (risk_averse.filled, risk_averse.vs_exact, risk_averse.mae_lots) == (
        exact.filled, 1.0, 0.0)
    assert result.refusals_differ == 0 and result.store_rows == PACKETS
    table = format_table(result)
    assert "| risk_averse |" in table and "| probabilistic n=2 |" in table
    with pytest.raises(UserError, match="no segment is longer"):
        run_check(path, CheckSetup(horizon=PACKETS), (("risk_averse", 3),))
    with pytest.raises(UserError, match="horizon"):
        CheckSetup(horizon=0)
    mbp = tmp_path / "book.mbp-10.dbn"
    write_dbn(mbp, dbn.Schema.MBP_10, [])
    with pytest.raises(UserError, match="an mbo file"):
        book_records(mbp)
