"""The Python API (lobsurf.api) against the commands it sits under: the same store, the same
evaluation dict, one-line errors as UserError, the README's example run on a tiny config."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lobsurf
import lobsurf.api
from lobsurf.cli import build_parser, main
from lobsurf.data.store.summary import summarize
from lobsurf.data.synth import SynthConfig, write_synth
from lobsurf.errors import UserError
from lobsurf.training.recovery.run_folder import is_run_folder, read_metrics
from tests.agent.conftest import TINY
from tests.conftest import random_walk_books, write_store

README = Path(__file__).resolve().parents[1] / "README.md"
#: TINY as ``section.key=value`` overrides (JSON scalars and arrays are TOML values too)
TINY_SETS = [f"{section}.{key}={json.dumps(value)}" for section, settings in TINY.items()
             for key, value in settings.items()]


def cli_json(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out.strip()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> lobsurf.api.Run:
    """One tiny run trained through ``lobsurf.training`` on the tiny store."""
    root = tmp_path_factory.mktemp("api")
    store = write_store(root / "store", [random_walk_books(2000, 1), random_walk_books(
        1500, 2, start_ns=1_700_100_000 * 10**9)])
    return lobsurf.train(store=store, out=root / "run", overrides=TINY_SETS, device="cpu")


def test_import_is_light_and_names_the_api():
    code = ("import sys, lobsurf; fns = (lobsurf.ingest, lobsurf.evaluate, lobsurf.train); "
            "assert all(map(callable, fns)); assert 'torch' not in sys.modules, 'torch'; "
            "import lobsurf.training.run.loop, lobsurf.api; "  # the package is lobsurf.training
            "assert lobsurf.train is lobsurf.api.train")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr


def test_ingest_gives_the_store_the_command_builds(tmp_path, capsys):
    files = write_synth(tmp_path / "data", SynthConfig(snapshots_per_day=500, days=2))
    store = lobsurf.ingest(files, tmp_path / "a", multiplier=50, fee_per_lot=1.0)
    assert len(store) == 1000 and store.path == tmp_path / "a"
    cli = cli_json(capsys, ["ingest", *map(str, files), "--out", str(tmp_path / "b"),
                            "--multiplier", "50", "--fee-per-lot", "1", "--json"])
    assert json.dumps(summarize(store.manifest)) == cli
    money = json.loads(cli)["instruments"][0]
    assert (money["multiplier"], money["fee_per_lot"], money["fee_bps"]) == (50, 1, 0)
    with pytest.raises(UserError, match="format must be one of auto, dbn, lobster, binance, tardis"):
        lobsurf.ingest(files, tmp_path / "c", format="csv")


def test_train_returns_the_run(tiny_run):
    assert is_run_folder(tiny_run.path) and Path(tiny_run) == tiny_run.path
    assert (tiny_run.step, tiny_run.exit_status, tiny_run.seeds) == (20, 0, ())
    last = [r for r in read_metrics(tiny_run.path / "metrics.jsonl") if r["event"] == "metrics"]
    assert tiny_run.last_metrics == last[-1]


def test_evaluate_is_what_eval_json_prints(tiny_run, capsys):
    from lobsurf.eval.run import evaluate_run

    result = lobsurf.evaluate(tiny_run, envs=16)
    assert json.dumps(result) == json.dumps(evaluate_run(tiny_run.path, num_envs=16))
    assert result["settings"]["device"] == "cpu"  # auto, without CUDA
    # the command's default device is auto too, so both ran on the same device
    assert json.dumps(result) == cli_json(capsys, ["eval", str(tiny_run.path), "--json",
                                                   "--no-progress", "--envs", "16"])


def test_eval_device_defaults_to_auto():
    args = build_parser(["eval", "run"]).parse_args(["eval", "run"])
    assert args.device == "auto"


@pytest.mark.parametrize("config, overrides", [
    (None, ["learner.lrr=1"]), ({"learner": {"lrr": 1}}, [])])
def test_a_bad_setting_is_a_user_error_naming_it(tiny_store, tmp_path, config, overrides):
    with pytest.raises(UserError, match=r"unknown key learner\.lrr"):
        lobsurf.train(config, store=tiny_store, out=tmp_path / "r", overrides=overrides)
    assert not (tmp_path / "r").exists()


def test_config_as_values_file_or_runconfig_resolves_alike(tmp_path):
    import tomli_w

    from lobsurf.training.config import resolve_run_config, run_config_from_dict

    (tmp_path / "tiny.toml").write_text(tomli_w.dumps(TINY))
    want = resolve_run_config(None, TINY_SETS)
    for config in (TINY, tmp_path / "tiny.toml", run_config_from_dict(TINY)):
        file, sets = lobsurf.api._config_source(config)
        assert resolve_run_config(file, sets) == want, type(config).__name__


def readme_example() -> str:
    text = README.read_text()
    section = text[text.index("## From Python"):]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def test_readme_example_runs_on_a_tiny_config(tmp_path, monkeypatch, capsys):
    # the README's code as written; its data folder holds two small synthetic sessions and
    # each training gets TINY's settings after the example's own
    write_synth(tmp_path / "data", SynthConfig(snapshots_per_day=2000, days=2))
    monkeypatch.chdir(tmp_path)
    train = lobsurf.api.train
    monkeypatch.setattr(lobsurf.api, "train", lambda *a, overrides=(), **k: train(
        *a, overrides=[*overrides, *TINY_SETS, 'train.device="cpu"'], **k))
    namespace: dict = {}
    exec(readme_example(), namespace)  # noqa: S102 (the README's own code)
    out = capsys.readouterr().out
    assert re.search(r"seed 0: held-out net PnL -?[\d,]+\.\d\d", out), out
    assert "P(agent > hold) =" in out
    result, run = namespace["result"], namespace["run"]
    assert run.seeds == (0, 1) and {"seeds", "chosen"} <= set(result)
    assert [c["seed"] for c in result["chosen"]] == [0, 1]
    assert json.dumps(result) == cli_json(capsys, ["eval", str(run.path), "--json",
                                                   "--no-progress"])
