"""``lobsurf train --seeds N``: N runs of one config (seeds train.seed + k), for a verdict over
seeds rather than one run's anecdote (``lobsurf eval RUN``: lobsurf.eval.seed_verdict).

    RUN/
      seeds.json       marker: {"format", "seeds": [S, ...], "argv": the command line each
                       seed starts from, "created"}
      seed_S/          a complete run folder (lobsurf.training.recovery.run_folder) for each seed S
      logs/seed_S.log  side by side on CUDA: that process's output

Each seed's run is ``lobsurf train`` with the same command line plus ``--out RUN/seed_S
--set train.seed=S``. On CUDA the N runs train side by side on one GPU, one process each
(their small steps leave most of the GPU idle; each process says its memory ceiling as a
lone run does); on CPU one after another in this process (the cores are shared: side by
side each would only run slower). Progress says which seed runs and which finished.
``--resume RUN`` continues every seed that has not finished (``--resume RUN/seed_S`` for a
seed with a checkpoint, a fresh start for one without) and skips the finished ones.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lobsurf.errors import UserError
from lobsurf.training.recovery.run_folder import METRICS_NAME, fresh_folder, is_run_folder, read_metrics

SEEDS_NAME = "seeds.json"
SEEDS_FORMAT = "lobsurf-seeds"
LOGS_DIR = "logs"
#: how often the side-by-side launcher looks whether a process has ended
POLL_S = 1.0
#: how often the side-by-side launcher prints every seed's step
STATUS_EVERY_S = 30.0
#: flags of the command line each seed's run leaves out (it gets its own --out), with a value
_OWN_VALUE_FLAGS = ("--seeds", "--out", "--resume")
#: the same, without a value
_OWN_BARE_FLAGS = ("--overwrite",)


def seed_dir(group: Path, seed: int) -> Path:
    return group / f"seed_{seed}"


def is_seed_group(path: Path) -> bool:
    try:
        return json.loads((path / SEEDS_NAME).read_text()).get("format") == SEEDS_FORMAT
    except (OSError, ValueError):
        return False


def read_group(group: Path) -> dict[str, Any]:
    """seeds.json of a seed group (UserError where ``group`` is none)."""
    if not is_seed_group(group):
        raise UserError(f"{group}: not a lobsurf seed group (no {SEEDS_NAME})")
    return json.loads((group / SEEDS_NAME).read_text())


def without_own_flags(argv: list[str]) -> list[str]:
    """``argv`` less the flags each seed's run sets for itself (``_OWN_*_FLAGS``)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _OWN_VALUE_FLAGS:
            skip = True
        elif arg not in _OWN_BARE_FLAGS and not arg.startswith(
                tuple(f"{flag}=" for flag in _OWN_VALUE_FLAGS)):
            out.append(arg)
    return out


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the options before the subcommand, the train command's own arguments) of a full
    ``lobsurf`` command line."""
    at = argv.index("train")
    return argv[:at], argv[at + 1:]


def _prepare_group(group: Path, overwrite: bool) -> None:
    """A fresh, empty group folder (the refusals of lobsurf.training.recovery.run_folder: never a folder
    that holds anything but lobsurf runs, and only with --overwrite an existing one)."""
    fresh_folder(group, overwrite, lambda path: is_seed_group(path) or is_run_folder(path))


def finished(folder: Path, steps: int) -> bool:
    """The seed's run ended: its newest run_end reached ``steps`` or train.patience ended it."""
    if not (folder / METRICS_NAME).is_file():
        return False
    ends = [r for r in read_metrics(folder / METRICS_NAME) if r.get("event") == "run_end"]
    return bool(ends) and (ends[-1].get("stopped") == "patience" or ends[-1]["step"] >= steps)


def _seed_argvs(args: argparse.Namespace, group: Path, seeds: list[int], base: list[str]
                ) -> dict[int, list[str]]:
    """Each unfinished seed's command line (a resume where it has a checkpoint)."""
    from lobsurf.training.recovery.checkpoint import list_checkpoints
    from lobsurf.training.recovery.saved_config import load_run_config

    out = {}
    for seed in seeds:
        folder = seed_dir(group, seed)
        if args.resume and is_run_folder(folder) and list_checkpoints(folder):
            steps = args.steps or load_run_config(folder).train.steps
            if finished(folder, steps):
                print(f"train: seed {seed}: finished, skipped", file=sys.stderr)
                continue
            before, own = split_argv(args._argv)
            out[seed] = [*before, "train", *without_own_flags(own), "--resume", str(folder)]
        else:  # a fresh start, with the resume's own flags (--steps, --device) on top
            extra = without_own_flags(split_argv(args._argv)[1]) if args.resume else []
            out[seed] = [*base, "--out", str(folder), "--overwrite", "--set",
                         f"train.seed={seed}", *extra]
    return out


def _start_group(args: argparse.Namespace, group: Path) -> tuple[list[int], list[str]]:
    """A new group: its folder, seeds.json; returns (seeds, each seed's base command line)."""
    from lobsurf.training.config import resolve_run_config

    if args.seeds < 2:
        raise UserError(f"--seeds {args.seeds}: give at least 2 (one seed is a plain run: leave "
                        "--seeds out)")
    first = resolve_run_config(args.config, args.set).train.seed
    seeds = [first + k for k in range(args.seeds)]
    before, own = split_argv(args._argv)
    base = [*before, "train", *without_own_flags(own)]
    _prepare_group(group, args.overwrite)
    (group / SEEDS_NAME).write_text(json.dumps({
        "format": SEEDS_FORMAT, "seeds": seeds, "argv": base,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=1) + "\n")
    return seeds, base


def train_seeds(argv: list[str], run_one: Callable[[argparse.Namespace], int]) -> int:
    """``lobsurf train --seeds N --out RUN ...`` and ``lobsurf train --resume RUN`` of a seed
    group (module doc; ``argv``: that command line, as lobsurf.api.train writes it);
    ``run_one`` runs one seed's parsed command line (``lobsurf.commands.train.run``)."""
    args = _parse(argv)
    if args.resume:
        group = Path(args.resume)
        if args.seeds is not None:
            raise UserError("--resume of a seed group continues its own seeds; leave --seeds out")
        info = read_group(group)
        seeds, base = info["seeds"], info["argv"]
    else:
        group = Path(args.out)
        seeds, base = _start_group(args, group)
    argvs = _seed_argvs(args, group, seeds, base)
    if argvs and _device(next(iter(argvs.values()))).startswith("cuda"):
        codes = _side_by_side(group, argvs)
    else:
        codes = _one_after_another(group, argvs, len(seeds), run_one)
    return _report(group, seeds, codes)


def _device(argv: list[str]) -> str:
    """The device a seed's run (command line ``argv``) trains on, resolved as it will be."""
    from lobsurf.devices import resolve_device
    from lobsurf.training.config import resolve_run_config
    from lobsurf.training.recovery.saved_config import load_run_config

    a = _parse(argv)
    flag = [f'train.device="{a.device}"'] if a.device else []
    cfg = (load_run_config(Path(a.resume), flag) if a.resume
           else resolve_run_config(a.config, a.set + flag))
    return resolve_device(None if cfg.train.device == "auto" else cfg.train.device)


def _parse(argv: list[str]) -> argparse.Namespace:
    from lobsurf.cli import build_parser

    parsed = build_parser(argv).parse_args(argv)
    parsed._argv = argv
    return parsed


def _one_after_another(group: Path, argvs: dict[int, list[str]], total: int,
                       run_one: Callable[[argparse.Namespace], int]) -> dict[int, int]:
    codes = {}
    for k, (seed, argv) in enumerate(argvs.items(), 1):
        print(f"train: seed {seed} ({k} of {len(argvs)} to train, {total} in all): running",
              file=sys.stderr)
        try:
            codes[seed] = run_one(_parse(argv))
        except UserError as exc:
            raise UserError(f"seed {seed}: {exc} (continue with: lobsurf train --resume "
                            f"{group})") from exc
        if codes[seed] != 0:
            break  # an interrupt or an error: the rest wait for --resume
        print(f"train: seed {seed}: finished", file=sys.stderr)
    return codes


def _seed_step(folder: Path) -> str:
    """The newest logged step of a running seed (for the status line)."""
    try:
        lines = (folder / METRICS_NAME).read_text().splitlines()
    except OSError:
        return "starting"
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "step" in record:
            return f"step {record['step']:,}"
    return "starting"


def _side_by_side(group: Path, argvs: dict[int, list[str]]) -> dict[int, int]:
    """Every seed's run as its own process at once (CUDA); their output in RUN/logs/."""
    logs = group / LOGS_DIR
    logs.mkdir(exist_ok=True)
    procs: dict[int, subprocess.Popen] = {}
    for seed, argv in argvs.items():
        with open(logs / f"seed_{seed}.log", "ab") as log:
            procs[seed] = subprocess.Popen(
                [sys.executable, "-m", "lobsurf", *argv, "--no-progress"], stdout=log,
                stderr=subprocess.STDOUT)
    print(f"train: seeds {', '.join(map(str, argvs))} training side by side (output in "
          f"{logs})", file=sys.stderr)
    codes: dict[int, int] = {}
    said = time.monotonic()

    def forward(signum: int, _frame: Any = None) -> None:
        # each process stops after its step, with a checkpoint (lobsurf.training.faults.interrupts)
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signum)

    before = signal.signal(signal.SIGTERM, forward)
    try:
        while len(codes) < len(procs):
            time.sleep(POLL_S)
            for seed, proc in procs.items():
                if seed not in codes and proc.poll() is not None:
                    codes[seed] = proc.returncode
                    state = "finished" if proc.returncode == 0 else f"exit {proc.returncode}"
                    print(f"train: seed {seed}: {state} ({len(codes)} of {len(procs)})",
                          file=sys.stderr)
            if time.monotonic() - said >= STATUS_EVERY_S:
                said = time.monotonic()
                print("train: " + " | ".join(
                    f"seed {s} {_seed_step(seed_dir(group, s))}" for s in procs if s not in codes),
                    file=sys.stderr)
    except KeyboardInterrupt:
        forward(signal.SIGINT)
        for seed, proc in procs.items():
            codes[seed] = proc.wait()
    finally:
        signal.signal(signal.SIGTERM, before)
    return codes


def _report(group: Path, seeds: list[int], codes: dict[int, int]) -> int:
    """Every seed's chosen policy, or which failed and how to go on; the exit status."""
    from lobsurf.training.selection.choice import choice_summary, read_choice
    from lobsurf.training.faults.interrupts import SIGNAL_EXIT_BASE

    failed = {s: c for s, c in codes.items() if c != 0}
    if failed:
        interrupted = all(c > SIGNAL_EXIT_BASE for c in failed.values())
        logs = group / LOGS_DIR
        where = f" (output in {logs})" if logs.is_dir() else ""
        print(f"train: seed(s) {', '.join(map(str, failed))} "
              f"{'stopped' if interrupted else 'failed'}{where}; continue with: lobsurf train "
              f"--resume {group}", file=sys.stderr)
        return max(failed.values())
    for seed in seeds:
        folder = seed_dir(group, seed)
        cfg_path = folder / "config.toml"
        summary = choice_summary(read_choice(folder)) if cfg_path.is_file() else "not trained"
        print(f"seed {seed}: {summary}")
    print(f"runs saved in {group}/seed_*\n"
          f"next: lobsurf eval {group}   (held-out verdict over {len(seeds)} seeds)\n"
          f"      lobsurf report {group}")
    return 0
