"""The controller registry: one declaration each, bootstraps inside their bounds, the table
in checkpoints and in metrics.jsonl."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from lobsurf.agent.controllers import CONTROLLERS, ControllerState, controller_table


def test_every_bootstrap_is_inside_its_bounds():
    for spec in CONTROLLERS:
        assert spec.low <= spec.bootstrap <= spec.high, spec.name
        assert spec.meaning.strip(), spec.name


def test_registry_is_the_state_fields_one_each():
    names = [s.name for s in CONTROLLERS]
    assert names == [f.name for f in fields(ControllerState)]
    assert len(set(names)) == len(names)


def test_bootstrap_state_matches_the_declarations():
    state = ControllerState.bootstrap("cpu")
    for spec in CONTROLLERS:
        value = getattr(state, spec.name)
        assert value.shape == () and value.dtype == torch.float64
        assert float(value) == spec.bootstrap


def test_start_values_outside_bounds_and_unknown_names_are_refused():
    with pytest.raises(ValueError, match="per_beta"):
        ControllerState.bootstrap("cpu", {"per_beta": 1.5})
    with pytest.raises(KeyError):
        ControllerState.bootstrap("cpu", {"nope": 1.0})


def test_load_keeps_addresses_and_table_is_json_ready():
    state = ControllerState.bootstrap("cpu")
    ptr = state.v_min.data_ptr()
    state.load_({**{k: v.clone() for k, v in state.as_dict().items()}, "v_min": torch.tensor(-2.0)})
    assert state.v_min.data_ptr() == ptr and float(state.v_min) == -2.0
    import json
    json.dumps(controller_table())
