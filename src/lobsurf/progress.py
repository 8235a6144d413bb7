"""Progress display for long work: a rich progress bar on a terminal, silence otherwise."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from collections.abc import Iterator


@contextmanager
def byte_progress(enabled: bool = True) -> Iterator:
    """Yield ``update(name, done, total)``; draws one bar per name while enabled and on a TTY."""
    if not enabled or not sys.stderr.isatty():
        yield lambda name, done, total: None
        return
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn,
                               TimeRemainingColumn, TransferSpeedColumn)

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
               TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=False) as bar:
        tasks: dict[str, int] = {}

        def update(name: str, done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=total)
            bar.update(tasks[name], completed=done, total=total)

        yield update


@contextmanager
def step_progress(total: int, description: str, enabled: bool = True) -> Iterator:
    """Yield ``advance(n=1, **fields)`` for a counted loop; rich bar on a TTY."""
    if not enabled or not sys.stderr.isatty():
        yield lambda n=1, **fields: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), TextColumn("{task.fields[status]}"),
                  console=Console(stderr=True)) as bar:
        task = bar.add_task(description, total=total, status="")

        def advance(n: int = 1, **fields) -> None:
            status = " ".join(f"{k}={v}" for k, v in fields.items())
            bar.update(task, advance=n, status=status)

        yield advance


@contextmanager
def status(description: str, enabled: bool = True) -> Iterator[None]:
    """A spinner with ``description`` on stderr while the block runs (a TTY only), for work
    without a count (an evaluation pass, a fit)."""
    if not enabled or not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(description):
        yield


def add_progress_flag(parser) -> None:
    """``--progress/--no-progress`` (default on; drawn only when stderr is a terminal): the
    one spelling every long-running command uses."""
    import argparse

    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="show progress on stderr when it is a terminal (default: on)")
