"""The same seed and config give the same metrics, record for record, on CPU."""

from __future__ import annotations

from lobsurf.training.recovery.run_folder import read_metrics
from tests.training.test_train_command import TIMING_KEYS, train


def _records(run):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS}
            for r in read_metrics(run / "metrics.jsonl")]


def test_same_seed_same_metrics_other_seed_other_metrics(tiny_store, tiny_toml, tmp_path):
    runs = {name: tmp_path / name for name in ("a", "b", "other")}
    for name, run in runs.items():
        seed = 1 if name == "other" else 0
        assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run,
                     "--set", f"train.seed={seed}") == 0
    a, b, other = (_records(r) for r in runs.values())
    assert len(a) == 6 and a == b  # run_start, 4 metrics records, run_end
    assert [r for r in a if r["event"] == "metrics"] != \
        [r for r in other if r["event"] == "metrics"]  # the test can tell runs apart
