"""The tiny run configuration as a TOML file, for the tests that train a run to evaluate."""

from tests.training.conftest import tiny_toml  # noqa: F401  (a fixture for tests here)
