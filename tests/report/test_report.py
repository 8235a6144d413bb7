"""``lobsurf report RUN``: the page, its figures and tables, for finished and unfinished runs;
rendered in headless Chromium from a copied folder."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from lobsurf.cli import main
from lobsurf.report.build import REPORT_DIR, ReportConfig, build_report
from lobsurf.report.run_data import load_run_data
from lobsurf.training.recovery.run_folder import METRICS_NAME, prepare_run_folder
from tests.report.chromium import images_loaded, loaded_dom, screenshot

FIGURES = {"equity.png", "training.png", "actions.png", "position.png"}
#: where the screenshot goes when LOBSURF_REPORT_SCREENSHOT names a file (docs/)
SCREENSHOT_ENV = "LOBSURF_REPORT_SCREENSHOT"


def report(run: Path, *args: str) -> int:
    return main(["report", str(run), "--no-progress", "--envs", "16", *args])


def test_report_of_a_finished_run(trained_run, capsys):
    assert report(trained_run) == 0
    assert "index.html" in capsys.readouterr().out
    out = trained_run / REPORT_DIR
    assert FIGURES <= {p.name for p in out.iterdir()}
    html = (out / "index.html").read_text()
    # self-contained: every image is embedded, nothing is fetched from anywhere
    srcs = re.findall(r'<img src="([^"]+)"', html)
    assert len(srcs) == len(FIGURES) and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "http://" not in html and "https://" not in html
    assert 'id="heldout-metrics"' in html and 'id="data-summary"' in html
    for name in ("agent", "hold", "random", "momentum", "imbalance", "oracle", "optimal"):
        assert f">{name}</th>" in html, name
    assert "pnl_per_trade_ci" in html and "capture" in html and "[train]" in html
    heldout = json.loads((out / "heldout.json").read_text())
    assert heldout["policies"]["optimal"]["capture"] == 1.0
    assert "Missing" not in html  # a finished run with a checkpoint lacks nothing


@pytest.mark.slow  # headless Chromium starts, loads and screenshots the page
def test_report_renders_in_chromium_from_a_copied_folder(trained_run, chromium, tmp_path):
    assert report(trained_run) == 0
    copied = shutil.copytree(trained_run / REPORT_DIR, tmp_path / "elsewhere")
    dom = loaded_dom(chromium, copied / "index.html")
    loaded, total = images_loaded(dom)
    assert total == len(FIGURES) and loaded == total, dom[:500]
    assert 'id="heldout-metrics"' in dom and "<td>net_pnl</td>" in dom
    shot = screenshot(chromium, copied / "index.html", tmp_path / "shot.png", 1280, 2400)
    assert shot.stat().st_size > 50_000  # a rendered page, not a blank one
    if os.environ.get(SCREENSHOT_ENV):
        shutil.copy(shot, os.environ[SCREENSHOT_ENV])


def test_report_without_a_checkpoint_shows_the_training_curves(trained_run, tmp_path, capsys):
    run = tmp_path / "young"
    prepare_run_folder(run, overwrite=False)
    lines = (trained_run / METRICS_NAME).read_text().splitlines()
    # still training: no checkpoint, no run_end, and a line half written
    (run / METRICS_NAME).write_text("\n".join(lines[:3]) + '\n{"event": "metr')
    assert report(run) == 0
    err = capsys.readouterr().err
    assert "no checkpoint yet" in err and "not finished" in err
    html = (run / REPORT_DIR / "index.html").read_text()
    assert "Training curves" in html and 'id="heldout-metrics"' not in html
    assert len(load_run_data(run).metrics) == 2


def test_report_of_a_run_with_nothing_yet(tmp_path):
    run = tmp_path / "empty"
    prepare_run_folder(run, overwrite=False)
    result = build_report(run, ReportConfig())
    assert result.figures == [] and result.path.is_file()
    assert any("no metrics record yet" in n for n in result.notes)


def test_report_of_no_run(tmp_path, capsys):
    assert report(tmp_path / "nothing") == 2
    assert "no such run folder" in capsys.readouterr().err


def test_report_tensorboard_mirror(trained_run, capsys):
    import pytest

    pytest.importorskip("tensorboard")
    assert report(trained_run, "--no-eval", "--tensorboard") == 0
    assert "tensorboard --logdir" in capsys.readouterr().out
    assert any((trained_run / "tb").iterdir())
