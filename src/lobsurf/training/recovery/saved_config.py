"""A saved run's config read back (``--resume``, ``lobsurf eval RUN``): settings added after
the run was saved take the value that reproduces that run, not today's default, so an older
run resumes and evaluates as it trained."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lobsurf.training.config import RunConfig, load_toml, resolve_run_config
from lobsurf.training.recovery.run_folder import CONFIG_NAME

#: settings added since runs were first saved -> the value of a run saved without them
#: (validation_fraction: such a run's simulator trained on every row before the held-out
#: purge, and trades its last checkpoint)
ADDED_SETTINGS: dict[str, Any] = {"data.validation_fraction": 0.0}


def saved_values(run_dir: Path) -> dict[str, Any]:
    """RUN/config.toml's values, with ``ADDED_SETTINGS`` filled in where it lacks them."""
    values = load_toml(str(run_dir / CONFIG_NAME))
    for dotted, value in ADDED_SETTINGS.items():
        *sections, key = dotted.split(".")
        node = values
        for section in sections:
            node = node.setdefault(section, {})
        node.setdefault(key, value)
    return values


def load_run_config(run_dir: Path, overrides: list[str] | None = None) -> RunConfig:
    """The run's RunConfig (``overrides``: ``--set``-style settings on top)."""
    return resolve_run_config(None, overrides or [], base=saved_values(run_dir))
