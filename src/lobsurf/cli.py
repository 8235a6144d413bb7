"""Console entry point ``lobsurf``: parses arguments and calls one function per subcommand.

Each subcommand lives in ``lobsurf.commands.<name>`` with ``add_arguments(parser)`` and
``run(args) -> int``. Only the module of the subcommand named on the command line is
imported (its arguments may need torch-heavy config classes), so ``lobsurf --help`` and
``lobsurf info`` start without importing torch.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from lobsurf import __version__
from lobsurf.data.store import StoreError
from lobsurf.errors import UserError

#: subcommand → one-line help. The module is lobsurf.commands.<name with - as _>.
COMMANDS = {
    "synth": "write synthetic MBP-10 data as genuine DBN files",
    "ingest": "build a snapshot store from DBN MBP-10/MBO, LOBSTER, Binance or Tardis files",
    "info": "summarise a snapshot store",
    "eval": "evaluate a trained run (lobsurf eval RUN) or baselines on held-out rows",
    "pretrain": "supervised pretraining of the encoder and auxiliary heads",
    "train": "train the RL agent (no arguments: the bundled default data set)",
    "report": "write RUN/report/index.html: held-out metrics, equity, training curves",
    "bench": "time the training step, eager and as one CUDA graph, per batch size",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; arguments are declared for the subcommand named in ``argv`` (all if None)."""
    parser = argparse.ArgumentParser(
        prog="lobsurf",
        description="lobsurf: deep reinforcement learning for trading from limit-order-book data")
    parser.add_argument("--debug", action="store_true",
                        help="show tracebacks for errors (the exit code stays the same)")
    parser.add_argument("--version", action="version", version=f"lobsurf {__version__}")
    # not required: plain `lobsurf` prints the list of commands instead of an error
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    named = [a for a in argv if a in COMMANDS] if argv is not None else list(COMMANDS)
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name not in named[:1] and argv is not None:
            continue  # not the one that runs: listed in --help, arguments not declared
        module = importlib.import_module(f"lobsurf.commands.{name.replace('-', '_')}")
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks for errors (the exit code stays the same)")
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    args._argv = argv  # a command that starts itself again (train --gpus) needs them
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return int(args._module.run(args) or 0)
    except (UserError, StoreError) as exc:
        if args.debug:
            traceback.print_exc()  # --debug adds the traceback; the exit code stays 2
        print(f"lobsurf {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"lobsurf {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into a reader that stopped early (`| head`): not an error of ours.
        # Point stdout at devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
