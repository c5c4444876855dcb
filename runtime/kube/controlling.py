"""The loop every controller runs: informers fill their stores, then the queue's workers reconcile.

With leader election (runtime/kube/leaderelection.py) a process's informers run and sync while it
stands by, so a takeover starts from warm stores; its queues start only once it leads. The gate is a
context variable set once by the process's entry point, so controllers need no parameter for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextvars import ContextVar

from runtime.kube.informing import Informer
from runtime.kube.queueing import WorkQueue

# Set while this process may write; None: no leader election (always may).
_leadership: ContextVar[asyncio.Event | None] = ContextVar("leadership", default=None)


def gate_on(leadership: asyncio.Event | None) -> None:
    """Tasks created from now on in this context write only once `leadership` is set."""
    _leadership.set(leadership)


def leads_now() -> bool:
    """Whether this process may write now (always without leader election)."""
    leadership = _leadership.get()
    return leadership is None or leadership.is_set()


async def leading() -> None:
    """Returns once this process may write: at once without leader election."""
    leadership = _leadership.get()
    if leadership is not None:
        await leadership.wait()


async def run_controller(informers: Sequence[Informer], queue: WorkQueue, *, shared: Sequence[Informer] = ()) -> None:
    """Reconciling starts once every informer has synced and this process leads; cancel to stop
    (queued work drains). `shared`: informers another controller runs, that this one reads too."""
    tasks = [asyncio.create_task(informer.run()) for informer in informers]
    try:
        for informer in [*informers, *shared]:
            await informer.synced.wait()
        await leading()
        queue.start()
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await queue.shutdown()
