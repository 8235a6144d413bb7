"""The tiny run configuration as a TOML file (tests of the train and eval commands)."""

from __future__ import annotations

import pytest
import tomli_w

from tests.agent.conftest import TINY, passive_store, tiny_setup  # noqa: F401  (fixtures here)


@pytest.fixture
def tiny_toml(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(tomli_w.dumps(TINY))
    return path
