"""``lobsurf eval RUN --walk-forward K``: folds train on segments 0..k-1 and trade segment k;
finished folds are skipped, a trained fold without a result is only evaluated; the summary
has the spread over folds; the report shows them."""

from __future__ import annotations

import json

import pytest
import torch

from lobsurf.cli import main
from lobsurf.data.dataset import load_book_tensors
from lobsurf.eval.walk_forward import fold_data, spread
from lobsurf.report.build import build_report
from lobsurf.training.config import run_config_to_toml
from lobsurf.training.recovery.run_folder import CONFIG_NAME, prepare_run_folder
from tests.agent.conftest import tiny_config
from tests.conftest import random_walk_books, write_store

SEGMENT_ROWS = 700
DAY_NS = 86_400 * 10**9


@pytest.fixture
def three_segments(tmp_path):
    chunks = [random_walk_books(SEGMENT_ROWS, seed, start_ns=1_700_000_000 * 10**9 + seed * DAY_NS)
              for seed in range(3)]
    return write_store(tmp_path / "store3", chunks)


@pytest.fixture
def recipe_run(three_segments, tmp_path):
    """A run folder holding only the recipe (config.toml): walk-forward needs no checkpoint."""
    run = tmp_path / "run"
    prepare_run_folder(run, overwrite=False)
    (run / CONFIG_NAME).write_text(run_config_to_toml(tiny_config(three_segments.path)))
    return run


def walk(capsys, run, *extra) -> tuple[dict, str]:
    assert main(["eval", str(run), "--walk-forward", "2", "--fold-steps", "10", "--json",
                 "--no-progress", "--envs", "8", *extra]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def test_fold_data_trains_before_segment_k_and_tests_inside_it(three_segments):
    cfg = tiny_config(three_segments.path)
    book = load_book_tensors(three_segments, "cpu")
    data = fold_data(cfg, book, three_segments.path, 2)
    start, stop = int(book.segment_start[2]), int(book.segment_stop[2])
    max_h = cfg.labels.max_horizon
    assert data.train_stop == start - max_h and len(data.train_book) == start - max_h
    assert int(data.split.train_rows.max()) + max_h < start
    test = data.split.test_rows
    assert int(test.min()) == start + cfg.sim.window - 1 and int(test.max()) < stop
    # the training book never reaches the test segment, and spans both earlier segments
    assert data.train_book.num_segments == 2


def test_walk_forward_folds_summary_and_resume(recipe_run, capsys):
    summary, err = walk(capsys, recipe_run)
    assert [f["fold"] for f in summary["folds"]] == [1, 2] and summary["fold_steps"] == 10
    assert "fold 1/2: trained" in err and "fold 2/2: trained" in err
    for fold in summary["folds"]:
        assert fold["split"]["test_segment"] == fold["fold"]
        assert fold["settings"]["trained_steps"] == 10
        assert set(fold["policies"]) >= {"agent", "hold", "oracle", "optimal"}
    net = summary["spread"]["agent"]["net_pnl"]
    values = [f["policies"]["agent"]["net_pnl"] for f in summary["folds"]]
    assert net["min"] == min(values) and net["max"] == max(values)
    assert net["mean"] == pytest.approx(sum(values) / 2)
    assert net["sd"] == pytest.approx(float(torch.tensor(values).std()))
    assert summary["spread"]["optimal"]["capture"]["mean"] == 1.0
    # finished folds are skipped: nothing retrains, the summary is the same
    again, err = walk(capsys, recipe_run)
    assert "fold 1/2: skipped" in err and "fold 2/2: skipped" in err and again == summary
    # a fold trained but not evaluated (interrupted) is evaluated from its checkpoint
    (recipe_run / "walk_forward" / "fold_2" / "result.json").unlink()
    third, err = walk(capsys, recipe_run)
    assert "fold 2/2: trained" in err and third == summary
    # the text table: one row per policy, the spread of net PnL and the mean capture
    assert main(["eval", str(recipe_run), "--walk-forward", "2", "--fold-steps", "10",
                 "--no-progress", "--envs", "8"]) == 0
    text = capsys.readouterr().out
    assert "walk-forward over 2 fold(s)" in text and "capture mean" in text
    assert all(f"\n{name} " in text for name in ("agent", "hold", "optimal"))
    # the report shows the folds (a recipe-only run has no checkpoint of its own)
    report = build_report(recipe_run)
    html = report.path.read_text()
    assert "Walk-forward" in html and 'id="walk-forward-spread"' in html
    assert any(p.name == "walk_forward.png" for p in report.figures)


def test_walk_forward_with_too_many_folds(recipe_run, capsys):
    assert main(["eval", str(recipe_run), "--walk-forward", "3", "--no-progress"]) == 2
    assert "at most 2 fold(s)" in capsys.readouterr().err


def test_spread_of_one_value_and_of_none():
    assert spread([2.0]) == {"mean": 2.0, "sd": None, "min": 2.0, "max": 2.0, "folds": 1}
    assert spread([None, None])["mean"] is None
