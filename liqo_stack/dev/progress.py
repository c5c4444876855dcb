"""Long steps are never silent: a "still ..." line when a step has said nothing for a while.

Plain lines, no terminal tricks: the demo runs in CI logs as well as in terminals.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

from runtime.api import format_duration

Progress = Callable[[str], None]
INTERVAL = 15.0  # seconds of silence before a "still ..." line


class Heartbeat:
    """`with Heartbeat(progress, "home: starting the control plane"):` says
    `still home: starting the control plane (45s)` after each `interval` without other output;
    `touch()` counts as output (e.g. a line that the step itself printed)."""

    def __init__(self, progress: Progress, what: str, interval: float = INTERVAL) -> None:
        self.progress = progress
        self.what = what
        self.interval = interval
        self.started = self.last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat {what}", daemon=True)

    def touch(self) -> None:
        self.last = time.monotonic()

    def elapsed(self) -> str:
        return format_duration(round(time.monotonic() - self.started))

    def _run(self) -> None:
        while not self._stop.wait(min(self.interval, 1.0)):
            if time.monotonic() - self.last >= self.interval:
                self.progress(f"still {self.what} ({self.elapsed()})")
                self.touch()

    def __enter__(self) -> Heartbeat:
        self.started = self.last = time.monotonic()
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
