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
