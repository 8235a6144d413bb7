"""Ctrl-C (SIGINT) and SIGTERM during training: stop after the current step, cleanly.

``StopOnSignal`` installs handlers that only record the signal; the loop looks at
``requested`` after every step, writes a final checkpoint and the metrics, and returns
``interrupted``. A second signal of either kind falls back to the previous handlers
(Ctrl-C again raises KeyboardInterrupt at once), so a stuck run can still be killed.
Handlers can only be installed from the main thread; elsewhere (a run inside a worker
thread) the context does nothing and the run stops only when its steps are done.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

from lobsurf.training.recovery import pause_points

SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: exit status of a run stopped by a signal: 128 + the signal number (shell convention)
SIGNAL_EXIT_BASE = 128


class StopOnSignal:
    """Context manager: while inside, SIGINT/SIGTERM ask the loop to stop after a step."""

    def __init__(self) -> None:
        self.requested: signal.Signals | None = None
        self._previous: dict[signal.Signals, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested is not None:  # second signal: stop waiting
            self._restore()
            signal.raise_signal(signum)
            return
        self.requested = signal.Signals(signum)

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        pause_points.stop_requested = lambda: False

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            pause_points.stop_requested = lambda: self.requested is not None
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    @property
    def exit_status(self) -> int:
        return SIGNAL_EXIT_BASE + int(self.requested) if self.requested else 0
