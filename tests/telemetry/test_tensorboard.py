"""TensorBoard mirror: tags (train/, control/, time/, eval/), values and steps read back from
the event files; mirroring a metrics.jsonl (twice: replaced, not doubled); a clear error
without the tensorboard package."""

from __future__ import annotations

import sys

import pytest

from lobsurf.errors import UserError
from lobsurf.telemetry.tensorboard import TB_DIR, TensorBoardLog, mirror_metrics_file, scalars, tag_for
from lobsurf.training.recovery.run_folder import METRICS_NAME, MetricsLog, prepare_run_folder

RECORDS = [
    {"event": "run_start", "config": {"train": {"steps": 10}}, "device": "cpu",
     "versions": {"torch": "x"}, "data": {"rows": 5}},
    {"event": "metrics", "step": 5, "wall_s": 1.5, "steps_per_s": 3.0, "l_q": 2.0,
     "win_rate": None, "alpha": 0.01, "controllers": {"sac_alpha": 0.01}, "trades_closed": 4},
    {"event": "metrics", "step": 10, "wall_s": 3.0, "steps_per_s": 4.0, "l_q": 1.5,
     "win_rate": 0.5, "alpha": 0.02, "controllers": {"sac_alpha": 0.02}, "trades_closed": 6},
    {"event": "eval", "step": 10, "net_pnl": 12.5},
    {"event": "run_end", "step": 10, "wall_s": 3.1},
]


def read_scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tags_follow_the_namespaces():
    assert tag_for("l_q") == "train/l_q" and tag_for("steps_per_s") == "time/steps_per_s"
    assert tag_for("alpha") == "control/alpha" and tag_for("net_pnl", "eval") == "eval/net_pnl"
    assert tag_for("sim/steps_per_s") == "sim/steps_per_s"
    tags = scalars(RECORDS[1])
    assert set(tags) == {"time/wall_s", "time/steps_per_s", "train/l_q", "control/alpha",
                         "train/trades_closed"}  # null, nested dicts and the step left out


def test_written_records_read_back(tmp_path):
    pytest.importorskip("tensorboard")
    log = TensorBoardLog(tmp_path / "tb")
    for record in RECORDS:
        log.write(record)
    log.close()
    got = read_scalars(tmp_path / "tb")
    assert got["train/l_q"] == [(5, 2.0), (10, 1.5)]
    assert got["train/win_rate"] == [(10, 0.5)]  # the null of step 5 is not a point
    assert got["control/alpha"] == [(5, pytest.approx(0.01)), (10, pytest.approx(0.02))]
    assert got["time/steps_per_s"] == [(5, 3.0), (10, 4.0)]
    assert got["eval/net_pnl"] == [(10, 12.5)]


def test_mirror_a_metrics_file_twice(tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    prepare_run_folder(run, overwrite=False)
    log = MetricsLog(run / METRICS_NAME)
    for record in RECORDS:
        log.write(record)
    log.close()
    with open(run / METRICS_NAME, "a") as fh:
        fh.write('{"event": "metr')  # a line a training run is still writing
    for _ in range(2):
        out = mirror_metrics_file(run)
    assert out == run / TB_DIR and len(list(out.iterdir())) == 1  # replaced, not added to
    assert read_scalars(out)["train/l_q"] == [(5, 2.0), (10, 1.5)]


def test_without_tensorboard_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    with pytest.raises(UserError, match="pip install"):
        TensorBoardLog(tmp_path / "tb")
