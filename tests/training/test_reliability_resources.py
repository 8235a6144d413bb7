"""The memory ceiling: sizes measured from the run's real tensors, stated at start, and a
config that cannot fit refused up front with the numbers."""

from __future__ import annotations

from dataclasses import fields

import pytest

from lobsurf.errors import UserError
from lobsurf.training.faults.resources import (GIB, USABLE_FRACTION, check_fits, memory_estimate,
                                     store_rows)
from tests.agent.conftest import tiny_setup  # noqa: F401 (fixture)
from tests.training.test_train_command import train

HUGE_CAPACITY = 10**11  # ~8 TiB of replay: no machine here has it


def test_estimate_matches_the_tensors_of_a_real_run(tiny_setup, tiny_store):
    cfg, data, state, _ = tiny_setup
    n = len(data.book)
    est = memory_estimate(cfg, store_rows(tiny_store.path, 0))
    assert est.rows == n
    per_row = [t for t in (getattr(data.book, f.name) for f in fields(data.book))
               if hasattr(t, "shape") and t.shape[:1] == (n,)]
    assert est.book_bytes_per_row == sum(t.numel() * t.element_size() for t in per_row
                                         if t is not data.book.features) // n
    table = data.train_book.features  # the training book's, computed on the device
    assert est.feature_bytes_per_row == table.numel() * table.element_size() // table.shape[0]
    labels = [getattr(state.labels, f.name) for f in fields(state.labels)]
    rows = len(data.train_book)
    assert est.label_bytes_per_row == sum(t.numel() * t.element_size() for t in labels) // rows
    r = state.replay
    storage = [getattr(r.storage, f.name) for f in fields(r.storage)] + [r.weight]
    assert est.replay_bytes == sum(t.numel() * t.element_size() for t in storage)
    params = list(state.online.parameters())
    assert est.parameter_bytes == sum(p.numel() * p.element_size() for p in params)


def test_check_fits_refuses_beyond_the_usable_share(tiny_setup):
    cfg = tiny_setup[0]
    est = memory_estimate(cfg, 3500)
    check_fits(est, "cpu", host_free=int(est.host_bytes / USABLE_FRACTION) + 1)
    with pytest.raises(UserError, match="GiB of host memory"):
        check_fits(est, "cpu", host_free=est.host_bytes)
    cuda = memory_estimate(cfg, 3500, "cuda")
    with pytest.raises(UserError, match="GiB of device memory"):
        check_fits(cuda, "cuda", host_free=10 * GIB, device_free=cuda.device_bytes)


def test_a_replay_that_cannot_fit_is_refused_before_anything_loads(tiny_store, tiny_toml,
                                                                   tmp_path, capsys):
    run = tmp_path / "run"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run,
                 "--set", f"replay.capacity={HUGE_CAPACITY}") == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "GiB of host memory" in err and f"replay {HUGE_CAPACITY:,} x" in err
    assert not run.exists()


def test_the_ceiling_is_printed_at_start(tiny_store, tiny_toml, tmp_path, capsys):
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", tmp_path / "r") == 0
    assert "train: memory ceiling: device" in capsys.readouterr().err
