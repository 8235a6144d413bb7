"""A tiny trained run shared by the report tests (trained once per module: 2 CPU cores),
and headless Chromium for rendering the page (installed with apt-get where missing)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import tomli_w

from lobsurf.cli import main
from tests.agent.conftest import TINY
from tests.conftest import random_walk_books, write_store

#: Debian's package and the names its binary goes by
CHROMIUM_PACKAGE = "chromium"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
#: seconds allowed for installing Chromium
INSTALL_TIMEOUT_S = 900


def tiny_store_at(path: Path):
    """The shared tiny store (tests/conftest.py tiny_store), at ``path``."""
    return write_store(path, [random_walk_books(2000, 1),
                              random_walk_books(1500, 2, start_ns=1_700_100_000 * 10**9)])


def train_tiny(root: Path, name: str, *args: str) -> Path:
    """A finished tiny run (TINY, 20 steps) on the tiny store, in ``root / name``; ``args``:
    more ``lobsurf train`` arguments."""
    store = tiny_store_at(root / "store")
    config = root / "tiny.toml"
    config.write_text(tomli_w.dumps(TINY))
    run = root / name
    assert main(["train", "--no-progress", "--device", "cpu", "--store", str(store.path),
                 "--config", str(config), "--out", str(run), *args]) == 0
    return run


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A finished tiny run (20 steps) on the tiny store."""
    return train_tiny(tmp_path_factory.mktemp("report"), "run")


def _find_chromium() -> str | None:
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of a headless-capable Chromium; installs Debian's package where missing."""
    found = _find_chromium()
    if found:
        return found
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        pytest.skip("chromium is not installed and cannot be: no apt-get or not root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run(["apt-get", "update"], check=True, capture_output=True, env=env,
                       timeout=INSTALL_TIMEOUT_S)
        subprocess.run(["apt-get", "install", "-y", CHROMIUM_PACKAGE], check=True,
                       capture_output=True, env=env, timeout=INSTALL_TIMEOUT_S)
    except (subprocess.SubprocessError, OSError) as exc:
        pytest.skip(f"chromium is not installed and apt-get could not install it: {exc}")
    found = _find_chromium()
    if not found:
        pytest.skip("apt-get installed chromium but no chromium binary is on PATH")
    return found
