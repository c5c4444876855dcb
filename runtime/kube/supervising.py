"""Restarting one part of a process alone: the peerings of a virtual-kubelet process, the foreign
agents of an agent process. A part that fails is started again after a backoff that doubles up to
`MAX_BACKOFF_SECONDS` (as a crash-looping container's), so a part failing at once never spins, and
one that ran steadily for a while starts its backoff afresh."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)

FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0
STEADY_AFTER_SECONDS = 120.0  # a part that ran this long before failing starts its backoff afresh


def being_cancelled() -> bool:
    """The current task was asked to end: a failure met meanwhile (a cleanup step that raised) must
    not turn its cancellation into a restart."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def cancel_once(task: asyncio.Task[Any]) -> bool:
    """Cancel `task` unless that was asked already (False then): each further cancel() on 3.11
    interrupts its cleanup again, at whatever step it has reached."""
    if task.cancelling():
        return False
    return task.cancel()


async def stop_side_by_side(stops: Iterable[Awaitable[None]]) -> None:
    """Run every stop to its end at once, then raise the first failure among them: a part's stop may
    drain its queue for up to its deadline while its cluster does not answer, and one after another
    those deadlines would add up (minutes for a peering's dozen reflectors)."""
    failures = [outcome for outcome in await asyncio.gather(*stops, return_exceptions=True) if outcome is not None]
    for failure in failures[1:]:
        log.error("a further stop failed too", exc_info=failure)
    if failures:
        raise failures[0]


def backoff_seconds(failures_in_a_row: int) -> float:
    """The wait before restarting a part that failed `failures_in_a_row` times (1: the first)."""
    return float(min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** max(0, failures_in_a_row - 1)))


class Backoff:
    """The failures in a row of one part, and the wait before its next start."""

    def __init__(self) -> None:
        self.failures = 0
        self.started = time.monotonic()

    def start(self) -> None:
        self.started = time.monotonic()

    def failed(self) -> float:
        """Count a failure of the run begun at the last `start`; the seconds to wait."""
        steady = time.monotonic() - self.started > STEADY_AFTER_SECONDS
        self.failures = 1 if steady else self.failures + 1
        return backoff_seconds(self.failures)


async def restarting(name: str, run: Callable[[], Awaitable[None]]) -> None:
    """`run()` until it returns (or is cancelled), started again with backoff whenever it fails."""
    backoff = Backoff()
    while True:
        backoff.start()
        try:
            await run()
            return
        except asyncio.CancelledError:
            raise
        except Exception as err:
            if being_cancelled():
                raise asyncio.CancelledError from err
            delay = backoff.failed()
            log.exception("%s failed; restarting it alone in %.0f s", name, delay)
        await asyncio.sleep(delay)  # the backoff
