"""The loop every controller runs: informers fill their stores, then the queue's workers reconcile."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from runtime.kube.informing import Informer
from runtime.kube.queueing import WorkQueue


async def run_controller(informers: Sequence[Informer], queue: WorkQueue) -> None:
    """Reconciling starts once every informer has synced; cancel to stop (queued work drains)."""
    tasks = [asyncio.create_task(informer.run()) for informer in informers]
    try:
        for informer in informers:
            await informer.synced.wait()
        queue.start()
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await queue.shutdown()
