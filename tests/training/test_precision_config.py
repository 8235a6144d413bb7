"""train.precision: parsed, range-checked and passed to the step."""

from __future__ import annotations

import pytest

from lobsurf.errors import UserError
from lobsurf.training.config import TrainConfig, run_config_from_dict
from lobsurf.training.run.state import step_config


def test_precision_defaults_to_fp32_and_reaches_the_step():
    assert TrainConfig().precision == "fp32"
    cfg = run_config_from_dict({"train": {"precision": "bf16"}})
    assert cfg.train.precision == "bf16"
    assert step_config(cfg).precision == "bf16"
    assert step_config(run_config_from_dict({})).precision == "fp32"


def test_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="precision"):
        TrainConfig(precision="fp16")
    with pytest.raises((UserError, ValueError), match="precision"):
        run_config_from_dict({"train": {"precision": "half"}})
