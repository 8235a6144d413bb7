"""``lobsurf train``: train the agent (defaults <- --config FILE.toml <- --set key=value <- flags).

With no arguments it trains on the bundled default data set (generated once, cached) on
CUDA when available, else CPU, for a budget of a few minutes on a 2-core CPU, and says at
the end where the run is and what to run next. ``--resume RUN`` continues a run to
``--steps`` total steps, exactly where its newest complete checkpoint left off.

Before loading data it states the run's memory ceiling (lobsurf.training.faults.resources) and refuses
a config that cannot fit; Ctrl-C or SIGTERM stops after the current step with a checkpoint
and prints the command that continues the run (exit status 128 + the signal). It names the
fee the run pays and where it comes from (given, the store's, or the default:
lobsurf.sim.fees) and warns where its round trip is above the typical move of the training
rows.

``--gpus N`` starts N processes, one per GPU, through torchrun's API
(lobsurf.training.distributed.torchrun); ``torchrun --nproc-per-node N -m lobsurf train
...`` does the same by hand (``--device cpu``: N CPU processes over gloo). Rank 0 prints
and writes the run folder; docs/distributed.md.

Everything but ``--gpus`` is ``lobsurf.api.train`` (lobsurf.training.run.job: one run;
lobsurf.training.run.seed_group: ``--seeds``); this module maps the flags onto its arguments.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lobsurf.errors import UserError
from lobsurf.training.run.job import DEFAULT_RUNS_DIR


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults after each option; the settings epilog kept as written."""


def settings_epilog() -> str:
    """Every setting of a run, by section, as ``--set`` takes them (their defaults and
    meanings: docs/training.md, "Settings"; a run folder's config.toml holds them all)."""
    import dataclasses
    import textwrap
    import typing

    from lobsurf.training.config import RunConfig

    lines = ["settings (--set section.key=value; defaults and meanings: docs/training.md, "
             "\"Settings\"):"]
    for section in dataclasses.fields(RunConfig):
        cls = typing.get_type_hints(RunConfig)[section.name]
        keys = ", ".join(f.name for f in dataclasses.fields(cls))
        lines += textwrap.wrap(f"{section.name}: {keys}", width=88, initial_indent="  ",
                               subsequent_indent="    ")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = _Formatter
    parser.epilog = settings_epilog()
    parser.add_argument("--store", default=None,
                        help="snapshot store (lobsurf ingest); default: the bundled data set")
    parser.add_argument("--config", default=None, help="TOML file of settings (see config.toml "
                        "in any run folder for every key)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one setting, e.g. --set learner.lr=1e-4 (repeatable)")
    parser.add_argument("--steps", type=int, default=None,
                        help="total training steps of the run (default: train.steps)")
    parser.add_argument("--envs", type=int, default=None,
                        help="parallel environments B (default: train.envs)")
    parser.add_argument("--out", default=None,
                        help=f"run folder (default: {DEFAULT_RUNS_DIR}/train-<date>-<time>)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing training run in --out")
    parser.add_argument("--resume", default=None, metavar="RUN",
                        help="continue RUN from its newest checkpoint up to --steps")
    parser.add_argument("--device", default=None, choices=["auto", "cpu", "cuda"],
                        help="torch device (default: train.device, auto = cuda if available)")
    parser.add_argument("--init-from", default=None, metavar="RUN",
                        help="start the normaliser and encoder from a lobsurf pretrain run")
    parser.add_argument("--gpus", type=int, default=None, metavar="N",
                        help="train on N GPUs, one process each (torchrun; docs/distributed.md)")
    parser.add_argument("--tensorboard", action="store_true", default=None,
                        help="also write the metrics to RUN/tb for TensorBoard")
    parser.add_argument("--cuda-graph", action=argparse.BooleanOptionalAction, default=None,
                        help="replay the learning step as one CUDA graph (default: "
                        "train.cuda_graph, on; ignored on CPU)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile the step's networks and tensor functions (default: "
                        "train.compile, auto: on for one CUDA process, off on CPU)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="progress bar (shown only on a terminal)")
    parser.add_argument("--seeds", type=int, default=None, metavar="N",
                        help="train N runs (train.seed + k) into RUN/seed_S/; side by side on "
                        "one GPU, one after another on CPU; lobsurf eval RUN gives the verdict "
                        "over them (lobsurf.training.run.seed_group)")


def run(args: argparse.Namespace) -> int:
    from lobsurf.api import train
    from lobsurf.training.distributed.collective import launched_by_torchrun
    from lobsurf.training.run.seed_group import is_seed_group

    if args.gpus is not None:
        if args.seeds is not None or (args.resume and is_seed_group(Path(args.resume))):
            raise UserError("--seeds trains the seeds side by side on one GPU; --gpus (one "
                            "run over several GPUs) cannot be combined with it")
        if not launched_by_torchrun():
            if args.device == "cpu":
                raise UserError("--gpus needs CUDA; for CPU processes run torchrun "
                                "--nproc-per-node N -m lobsurf train --device cpu ...")
            from lobsurf.training.distributed.torchrun import launch

            return launch(args.gpus, args._argv)
    from lobsurf.training.run.job import train_keywords

    return train(**train_keywords(args)).exit_status
