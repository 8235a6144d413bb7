"""``lobsurf report`` of validated runs: the validation panel of one seed's page, and the
verdict page of a seed group (``lobsurf train --seeds 2``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lobsurf.cli import main
from lobsurf.report.build import REPORT_DIR
from tests.report.conftest import train_tiny


@pytest.fixture(scope="module")
def group(tmp_path_factory) -> Path:
    """Two validated tiny seeds (20 steps, a validation every 5)."""
    return train_tiny(tmp_path_factory.mktemp("seeds"), "group", "--seeds", "2", "--set",
                      "data.validation_fraction=0.2", "--set", "train.validate_every=5")


def report(run: Path) -> int:
    return main(["report", str(run), "--no-progress", "--envs", "16"])


@pytest.mark.slow
def test_a_validated_run_shows_training_beside_validation(group):
    run = group / "seed_0"
    assert report(run) == 0
    html = (run / REPORT_DIR / "index.html").read_text()
    assert (run / REPORT_DIR / "validation.png").is_file()
    assert 'data-file="validation.png"' in html and "Validation and model choice" in html
    assert "4 validations" in html and "chosen policy:" in html
    heldout = json.loads((run / REPORT_DIR / "heldout.json").read_text())
    assert heldout["chosen"]["source"] == "chosen"


@pytest.mark.slow
def test_the_verdict_page_of_a_seed_group(group, capsys):
    assert report(group) == 0
    out = group / REPORT_DIR
    html = (out / "index.html").read_text()
    for table in ("verdict", "prob-improvement", "per-seed"):
        assert f'id="{table}"' in html, table
    assert "IQM" in html and "coarse" in html and "P(agent &gt; baseline)" in html
    assert len(re.findall(r'<img src="data:image/png;base64,', html)) == 1
    verdict = json.loads((out / "verdict.json").read_text())
    assert [s["seed"] for s in verdict["seeds"]["per_seed"]] == [0, 1]
    assert "index.html" in capsys.readouterr().out
