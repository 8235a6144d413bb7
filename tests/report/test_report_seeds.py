"""``lobsurf report`` of validated runs: the validation panel of one seed's page, and the
page of a seed group (``lobsurf train --seeds 2``): the verdict, each seed's learning over
training, the held-out equity; rendered in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from lobsurf.cli import main
from lobsurf.report.build import REPORT_DIR
from tests.report.chromium import images_loaded, loaded_dom, screenshot
from tests.report.conftest import train_tiny

#: the figures of a seed group's page, in page order
GROUP_FIGURES = ("learning.png", "equity.png", "seeds.png")
#: where the group page's screenshot goes when this names a file
SCREENSHOT_ENV = "LOBSURF_GROUP_REPORT_SCREENSHOT"


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
    files = re.findall(r'<img src="data:image/png;base64,[^"]+" alt="[^"]*" data-file="([^"]+)"',
                       html)
    assert tuple(files) == GROUP_FIGURES
    assert all((out / f).stat().st_size > 10_000 for f in GROUP_FIGURES)
    for title in ("Verdict over seeds", "Learning over training", "Held-out equity",
                  "Per seed"):
        assert f"<h2>{title}</h2>" in html, title
    # the tiny store was ingested with a multiplier but no currency
    assert "Cumulative net PnL (currency, unknown)" in html
    verdict = json.loads((out / "verdict.json").read_text())
    assert [s["seed"] for s in verdict["seeds"]["per_seed"]] == [0, 1]
    assert "index.html" in capsys.readouterr().out


@pytest.mark.slow  # headless Chromium starts, loads and screenshots the page
def test_the_group_page_renders_in_chromium(group, chromium, tmp_path):
    assert report(group) == 0
    copied = shutil.copytree(group / REPORT_DIR, tmp_path / "elsewhere")
    dom = loaded_dom(chromium, copied / "index.html")
    loaded, total = images_loaded(dom)
    assert total == len(GROUP_FIGURES) and loaded == total, dom[:500]
    assert 'id="verdict"' in dom and 'id="per-seed"' in dom
    shot = screenshot(chromium, copied / "index.html", tmp_path / "shot.png", 1280, 3200)
    assert shot.stat().st_size > 50_000
    if os.environ.get(SCREENSHOT_ENV):
        shutil.copy(shot, os.environ[SCREENSHOT_ENV])
