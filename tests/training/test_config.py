"""Run config: TOML file, --set overrides, and errors that name the key."""

from __future__ import annotations

import pytest

from lobsurf.errors import UserError
from lobsurf.training.config import (RunConfig, parse_override, resolve_run_config,
                                  run_config_from_dict, run_config_to_toml)


def test_defaults_round_trip_through_toml(tmp_path):
    cfg = RunConfig()
    path = tmp_path / "c.toml"
    path.write_text(run_config_to_toml(cfg))
    assert resolve_run_config(str(path), []) == cfg


def test_file_then_set_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[learner]\nlr = 1e-4\n[sim]\norder_sizes_lots = [1, 2]\n")
    cfg = resolve_run_config(str(path), ["learner.lr=5e-4", "train.device=cpu", "sim.fee_bps=2"])
    assert cfg.learner.lr == 5e-4 and cfg.sim.order_sizes_lots == (1, 2)
    assert cfg.train.device == "cpu" and cfg.sim.fee_bps == 2.0
    assert cfg.sim.num_actions == 5


def test_a_section_override_keeps_the_runs_other_defaults_of_that_section():
    """RunConfig's sim default differs from SimConfig's (fees not given, stride 10): setting
    one sim key must not reset the others to SimConfig's (fee 0 made every run free)."""
    default = RunConfig().sim
    assert (default.fee_per_lot, default.fee_bps, default.stride) == (None, None, 10)
    cfg = resolve_run_config(None, ["sim.window=32"])
    assert cfg.sim.window == 32
    assert (cfg.sim.fee_per_lot, cfg.sim.fee_bps, cfg.sim.stride) == (None, None, 10)
    assert resolve_run_config(None, ["sim.stride=1"]).sim.fee_per_lot is None


def test_fees_not_given_are_left_out_of_the_toml_and_read_back_as_not_given(tmp_path):
    """TOML has no null: a fee not given is a key left out, and reads back as None; a given
    (or resolved) fee is written and reads back equal."""
    text = run_config_to_toml(RunConfig())
    assert "fee_per_lot" not in text and "fee_bps" not in text
    given = resolve_run_config(None, ["sim.fee_per_lot=0.5"])
    assert (given.sim.fee_per_lot, given.sim.fee_bps) == (0.5, None)
    path = tmp_path / "c.toml"
    path.write_text(run_config_to_toml(given))
    assert resolve_run_config(str(path), []) == given
    with pytest.raises(UserError, match="sim.fee_bps: expected a number"):
        resolve_run_config(None, ["sim.fee_bps=cheap"])
    with pytest.raises(UserError, match=r"\[sim\].*fees must be finite and >= 0"):
        resolve_run_config(None, ["sim.fee_per_lot=-1"])


@pytest.mark.parametrize("overrides,message", [
    (["learner.lrr=1"], "unknown key learner.lrr"),
    (["nosuch.x=1"], "unknown key nosuch"),
    (["learner.lr=fast"], "learner.lr: expected a number"),
    (["train.steps=1.5"], "train.steps: expected an integer"),
    (["train.steps=true"], "train.steps: expected an integer"),
    (["learner.acting=random"], "learner.acting: expected one of"),
    (["train.steps=0"], r"\[train\].*steps must be >= 1"),
    (["learner.gamma=1.5"], r"\[learner\].*gamma"),
    (["sim.order_sizes_lots=[1, 'a']"], r"sim.order_sizes_lots\[1\]"),
    (["learner.lr"], "expected section.key=value"),
    (["learner=1"], "learner: expected a table"),
])
def test_bad_settings_name_the_key(overrides, message):
    with pytest.raises(UserError, match=message):
        resolve_run_config(None, overrides)


def test_bad_toml_file_is_one_clear_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[learner\nlr = ")
    with pytest.raises(UserError, match="not valid TOML"):
        resolve_run_config(str(bad), [])
    with pytest.raises(UserError, match="no such config file"):
        resolve_run_config(str(tmp_path / "missing.toml"), [])


def test_override_values_parse_as_toml():
    assert parse_override("a.b=3e-4") == (["a", "b"], 3e-4)
    assert parse_override("a.b=true") == (["a", "b"], True)
    assert parse_override("a.b=cuda") == (["a", "b"], "cuda")
    assert run_config_from_dict({}) == RunConfig()


def test_a_saved_run_with_retired_kernel_choices_reads_back_without_them(tmp_path):
    """A run saved before the experimental kernel choices were removed
    (models.config.RETIRED_FIELDS) still loads for eval and resume; a config file or --set
    that gives one is told why it is gone."""
    from lobsurf.models.config import RETIRED_FIELDS
    from lobsurf.training.config import load_toml

    path = tmp_path / "config.toml"
    old = run_config_to_toml(RunConfig()).replace(
        "[encoder]\n", "[encoder]\nfused_inference = \"auto\"\nscan_conv_warps = 8\n"
        "weight_grads_beside = false\nscan_scores_in_head = false\ngated_out = \"auto\"\n")
    path.write_text(old)
    assert "fused_inference" in load_toml(str(path))["encoder"]
    assert resolve_run_config(None, [], base=load_toml(str(path))) == RunConfig()
    for name in RETIRED_FIELDS:
        with pytest.raises(UserError, match=f"encoder.{name} no longer exists"):
            resolve_run_config(None, [f"encoder.{name}=1"])
    with pytest.raises(UserError, match="encoder.fused_inference no longer exists"):
        resolve_run_config(str(path), [])
    with pytest.raises(UserError, match="weight_grads_beside no longer exists: it was the "
                                        "projections' weight gradients"):
        resolve_run_config(None, ["encoder.weight_grads_beside=false"])
