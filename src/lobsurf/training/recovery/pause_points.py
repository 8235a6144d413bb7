"""Test hooks that make a training process stop at a named point, so that a test's signal
(SIGKILL, SIGTERM) lands exactly there instead of wherever the scheduler happens to be.

A test sets two environment variables on the ``lobsurf train`` subprocess:

    LOBSURF_TEST_PAUSE        "POINT:N": the N-th arrival (1-based, counted in this process)
                              at POINT pauses
    LOBSURF_TEST_PAUSE_FILE   a path the process creates when it pauses (the test waits for it)

Points: ``step`` (after a step, before its log and checkpoint), ``checkpoint_write``
(a checkpoint's temporary file is partly written and flushed), ``metrics_flush`` (half of a
metrics line is written and flushed). The pause lasts ``PAUSE_S`` seconds at most and ends
early when a stop was requested (SIGINT/SIGTERM), so an interrupt test sees the stop path.
Without the variables every hook is one dictionary lookup.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Callable

ENV_PAUSE = "LOBSURF_TEST_PAUSE"
ENV_PAUSE_FILE = "LOBSURF_TEST_PAUSE_FILE"
POINTS = ("step", "checkpoint_write", "metrics_flush")
#: longest pause: ample for a test to send its signal, short enough that a lost test ends
PAUSE_S = 60.0
#: how often a pause looks whether a stop was requested
POLL_S = 0.02

_arrivals: Counter[str] = Counter()
#: set by lobsurf.training.faults.interrupts while a stop is pending (ends a pause early)
stop_requested: Callable[[], bool] = lambda: False  # noqa: E731


def pause_point(point: str) -> None:
    """Pause here when the environment asks for this arrival at ``point`` (see module doc)."""
    wanted = os.environ.get(ENV_PAUSE)
    if not wanted:
        return
    name, _, count = wanted.partition(":")
    if name != point:
        return
    _arrivals[point] += 1
    if _arrivals[point] != int(count or 1):
        return
    marker = os.environ.get(ENV_PAUSE_FILE)
    if marker:
        Path(marker).write_text(f"{point}:{_arrivals[point]}\n")
    deadline = time.monotonic() + PAUSE_S
    while time.monotonic() < deadline and not stop_requested():
        time.sleep(POLL_S)
