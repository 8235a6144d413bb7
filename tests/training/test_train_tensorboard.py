"""``lobsurf train --tensorboard``: RUN/tb holds the same scalar stream as metrics.jsonl."""

from __future__ import annotations

import pytest

from lobsurf.telemetry.tensorboard import TB_DIR, scalars
from lobsurf.training.recovery.run_folder import read_metrics
from tests.telemetry.test_tensorboard import read_scalars
from tests.training.test_train_command import train


def test_train_writes_the_metrics_to_tensorboard(tiny_store, tiny_toml, tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run,
                 "--tensorboard") == 0
    got = read_scalars(run / TB_DIR)
    records = [r for r in read_metrics(run / "metrics.jsonl") if r["event"] == "metrics"]
    want: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        for tag, value in scalars(r).items():
            if value == value:  # NaN (null in JSON) is left out of TensorBoard
                want.setdefault(tag, []).append((r["step"], value))
    assert set(want) <= set(got) and len(want) > 10
    for tag, points in want.items():
        assert [s for s, _ in got[tag]] == [s for s, _ in points], tag
        assert [v for _, v in got[tag]] == pytest.approx([v for _, v in points], rel=1e-6), tag
