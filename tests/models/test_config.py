"""EncoderConfig's settings, and the retired ones a saved run or checkpoint may still hold:
read without them, and named with the reason when a config file or ``--set`` gives them."""

from __future__ import annotations

import dataclasses
import re

import pytest

from lobsurf.errors import UserError
from lobsurf.models.config import RETIRED_FIELDS, EncoderConfig, without_retired

#: the fields the kernel choices, switches and tuning constants took, at their last defaults
#: (what a run saved before they went holds)
SAVED_BEFORE = {"ssd_backend": "auto", "conv_backend": "auto", "scan_gate": "auto",
                "scan_last_row": "vector", "scan_z_proj": "auto", "fold_norm_weights": True,
                "one_in_projection": False, "in_proj_pad_multiple": 1,
                "ssd_triton_warps_fwd": 4, "ssd_triton_warps_bwd": 8,
                "ssd_window_warps_fwd": 4, "ssd_window_warps_bwd": 4,
                "ssd_window_warps_fwd_last": 2, "ssd_window_warps_bwd_last": 2,
                "cuda_gemm_align_bytes": 16, "append_log_dt": False, "dt_init_floor": 1e-4,
                "cfc_time_scale": 1.0}


def test_the_config_holds_at_most_16_settings_none_of_them_retired() -> None:
    names = {f.name for f in dataclasses.fields(EncoderConfig)}
    assert len(names) <= 16
    assert not names & set(RETIRED_FIELDS)
    assert set(SAVED_BEFORE) <= set(RETIRED_FIELDS)


def test_a_saved_encoder_config_with_every_retired_field_loads(tmp_path) -> None:
    # the encoder's own reader, a run's config.toml (eval and resume) and a pretraining
    # checkpoint's config: each drops the retired fields and keeps the rest
    from lobsurf.pretrain.config import PretrainConfig, config_from_dict, config_to_dict
    from lobsurf.training.config import RunConfig, load_toml, resolve_run_config, run_config_to_toml

    cfg = EncoderConfig(d_model=32, n_layers=1)
    saved = {**dataclasses.asdict(cfg), **SAVED_BEFORE}
    assert EncoderConfig(**without_retired(saved)) == cfg
    path = tmp_path / "config.toml"
    lines = "".join(f"{name} = {_toml(value)}\n" for name, value in SAVED_BEFORE.items())
    path.write_text(run_config_to_toml(RunConfig()).replace("[encoder]\n", "[encoder]\n" + lines))
    assert set(SAVED_BEFORE) <= set(load_toml(str(path))["encoder"])
    assert resolve_run_config(None, [], base=load_toml(str(path))) == RunConfig()
    checkpoint = config_to_dict(PretrainConfig(encoder=cfg))
    checkpoint["encoder"] = {**checkpoint["encoder"], **SAVED_BEFORE}
    assert config_from_dict(checkpoint).encoder == cfg


@pytest.mark.parametrize("name", sorted(SAVED_BEFORE))
def test_setting_a_retired_field_names_it_and_why(name: str) -> None:
    from lobsurf.training.config import resolve_run_config

    why = re.escape(RETIRED_FIELDS[name])
    with pytest.raises(UserError, match=f"encoder.{name} no longer exists: it was {why}"):
        resolve_run_config(None, [f"encoder.{name}={_toml(SAVED_BEFORE[name])}"])


def _toml(value) -> str:
    # a saved value as TOML writes it
    if isinstance(value, bool):
        return str(value).lower()
    return f'"{value}"' if isinstance(value, str) else repr(value)
