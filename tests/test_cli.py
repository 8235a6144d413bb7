"""The CLI frame: fast start (no torch for help/info), one subcommand's arguments at a time."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lobsurf.cli import COMMANDS, build_parser, main
from tests.conftest import random_walk_books, write_store


def test_help_and_info_do_not_import_torch(tmp_path):
    store = write_store(tmp_path / "s", [random_walk_books(100, seed=1)])
    code = ("import sys; from lobsurf.cli import main; "
            f"rc = main(['info', {str(store.path)!r}, '--json']); "
            "assert rc == 0; assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_subcommand_declares_its_arguments(capsys):
    for name in COMMANDS:
        with pytest.raises(SystemExit) as exit_info:
            main([name, "--help"])
        assert exit_info.value.code == 0
        help_text = capsys.readouterr().out
        assert help_text.startswith(f"usage: lobsurf {name}") and "--debug" in help_text
    top = build_parser([]).format_help()
    assert all(name in top for name in COMMANDS)


def test_synth_warns_about_files_from_earlier_runs(tmp_path, capsys):
    out = tmp_path / "dbn"
    assert main(["synth", "--out", str(out), "--snapshots", "500", "--days", "2"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["synth", "--out", str(out), "--snapshots", "500", "--days", "1"]) == 0
    assert "also holds 1 DBN file(s) from earlier runs" in capsys.readouterr().err


def test_output_cut_short_by_a_pipe_is_not_an_error(tmp_path):
    # 600 one-file segments: the JSON (~150 KB) outgrows the pipe buffer, so the write fails
    chunks = [random_walk_books(3, seed=i, start_ns=(i + 1) * 10**15) for i in range(600)]
    store = write_store(tmp_path / "s", chunks)
    done = subprocess.run(
        f"{sys.executable} -m lobsurf.cli info --json {store.path} | head -c 20; "
        "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash", capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith('{"snapshots": 1800')


def test_no_arguments_lists_the_commands_and_version(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: lobsurf") and all(name in out for name in COMMANDS)
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("lobsurf ")


def test_debug_keeps_the_exit_code_and_adds_the_traceback(tmp_path, capsys):
    missing = ["info", str(tmp_path / "nope")]
    assert main(missing) == 2
    plain = capsys.readouterr().err
    assert main(["--debug", *missing]) == 2 and main([missing[0], "--debug", missing[1]]) == 2
    debug = capsys.readouterr().err
    assert "Traceback" not in plain and "Traceback" in debug
    assert plain.strip().splitlines()[-1] in debug  # the same one-line message, last


@pytest.mark.parametrize("name", ["ingest", "synth", "pretrain", "eval"])
def test_progress_flag_is_the_same_everywhere(name, capsys):
    with pytest.raises(SystemExit):
        main([name, "--help"])
    assert "--progress, --no-progress" in capsys.readouterr().out


def test_pretrain_out_refuses_folders_that_are_not_its_runs(tmp_path, capsys):
    from lobsurf.commands.pretrain import check_run_folder
    from lobsurf.errors import UserError
    from lobsurf.pretrain.checkpoint import CHECKPOINT_NAME

    store = write_store(tmp_path / "store", [random_walk_books(300, seed=1)])
    base = ["pretrain", "--store", str(store.path), "--steps", "1", "--device", "cpu"]
    run = tmp_path / "run"
    run.mkdir()
    (run / CHECKPOINT_NAME).write_bytes(b"earlier run")
    for out, extra, says in [
        (store.path, ["--overwrite"], "is a folder but not a pretrain run"),
        (run, [], "holds an earlier pretrain run; pass --overwrite"),
    ]:
        assert main([*base, "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0]
    assert (store.path / "manifest.json").exists()
    assert (run / CHECKPOINT_NAME).read_bytes() == b"earlier run"
    check_run_folder(run, overwrite=True)  # an earlier run with --overwrite: accepted
    check_run_folder(tmp_path / "new", overwrite=False)
    (tmp_path / "empty").mkdir()
    check_run_folder(tmp_path / "empty", overwrite=False)
    with pytest.raises(UserError, match="not a pretrain run"):
        check_run_folder(store.path, overwrite=False)


def test_pretrain_flag_errors_name_the_flag(tmp_path, capsys):
    store = write_store(tmp_path / "store", [random_walk_books(300, seed=1)])
    base = ["pretrain", "--store", str(store.path), "--device", "cpu", "--out", str(tmp_path / "r")]
    for extra, says in [(["--horizons", "10,abc"], "--horizons must be comma-separated whole"),
                        (["--batch", "0"], "--batch must be >= 1"),
                        (["--layers", "0"], "--layers must be >= 1")]:
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err


def test_synth_preset_with_overrides(tmp_path, capsys):
    out = tmp_path / "dbn"
    assert main(["synth", "--preset", "tradeable", "--out", str(out), "--snapshots", "500",
                 "--days", "1"]) == 0
    text = capsys.readouterr().out
    assert "500 snapshots" in text and "edge 1.0, move_prob 0.15" in text
    assert "(preset tradeable)" in text and len(list(out.glob("*.dbn.zst"))) == 1


def test_pretrain_progress_never_shows_a_nan_loss(tiny_store, monkeypatch):
    import contextlib

    import lobsurf.pretrain.loop as loop
    from lobsurf.data.labels import LabelConfig
    from lobsurf.models.config import EncoderConfig
    from lobsurf.pretrain.config import PretrainConfig

    shown: list[dict] = []

    @contextlib.contextmanager
    def recording(total, description, enabled=True):
        yield lambda n=1, **fields: shown.append(fields)

    monkeypatch.setattr(loop, "step_progress", recording)
    cfg = PretrainConfig(window=8, batch_size=8, steps=4, log_every=3, eval_max_windows=50,
                         logistic_max_rows=200, labels=LabelConfig(horizons_snapshots=(5, 20)),
                         encoder=EncoderConfig(kind="mamba2", d_model=32, n_layers=1, headdim=32,
                                               d_state=16))
    loop.pretrain(cfg, tiny_store, out_dir=None, progress=True)
    # no loss before the first logging step (3), a finite one from then on
    assert shown[:2] == [{}, {}] and all("nan" not in f["loss"] for f in shown[2:])
    assert len(shown) == 4


def test_train_help_lists_every_setting(capsys):
    import dataclasses
    import typing

    from lobsurf.training.config import RunConfig

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for section in dataclasses.fields(RunConfig):
        cls = typing.get_type_hints(RunConfig)[section.name]
        for f in dataclasses.fields(cls):
            assert f.name in text, f"{section.name}.{f.name} missing from lobsurf train --help"
