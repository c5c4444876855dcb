"""A loop with a deadline on each step still ends when it is cancelled as the step completes.

Python 3.11's `asyncio.wait_for` returns the result of an awaitable that completes in the same turn
as its task is cancelled, and the cancellation is lost. A peering's health loop met it in CI: the
peering was cancelled (its VirtualNodes gone), the loop went on checking for good, and the peering
never ended, so it was never served again once its VirtualNode came back. The runtime uses
`asyncio.timeout` instead (pyproject.toml bans `asyncio.wait_for`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from runtime.kube import WorkQueue
from runtime.kube.liveness import Reachability
from runtime.kube.supervising import cancel_once, restarting
from runtime.virtualkubelet.node import VirtualNodeController

from .test_node_health import controller


class AnsweringForeign:
    """A foreign API server whose reads answer when told to."""

    def __init__(self) -> None:
        self.answer = asyncio.Event()
        self.reads = 0

    async def get(self, *_: Any, **__: Any) -> None:
        self.reads += 1
        await self.answer.wait()


async def turns_until(condition: Callable[[], bool], turns: int = 1000) -> None:
    """Until `condition` holds, letting the other tasks run: no clock in these tests."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not met in {turns} turns of the event loop")


async def ended_within(task: asyncio.Task[Any], seconds: float) -> bool:
    await asyncio.wait([task], timeout=seconds)
    return task.done()


def test_the_health_loop_ends_when_cancelled_as_its_check_answers() -> None:
    async def scenario() -> None:
        node: VirtualNodeController = controller()
        foreign = AnsweringForeign()
        node.foreign, node.home_cluster_id, node.on_unauthorized = foreign, "home", None  # type: ignore[assignment]
        node.spec = lambda: None  # type: ignore[method-assign]
        loop = asyncio.create_task(node.check_health())
        await turns_until(lambda: foreign.reads > 0)
        foreign.answer.set()  # the answer and the cancellation in the same turn of the event loop
        loop.cancel()
        assert await ended_within(loop, 2), "the health loop went on after its peering cancelled it"
        assert loop.cancelled()

    asyncio.run(scenario())


def test_a_wait_for_an_answer_ends_when_cancelled_as_the_answer_comes() -> None:
    async def scenario() -> None:
        reachability = Reachability()
        reachability.failed()
        waiting = asyncio.create_task(reachability.answer_within(30))
        await turns_until(lambda: reachability._answer is not None)  # waiting
        reachability.answered()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(scenario())


def test_a_task_asked_twice_to_end_still_runs_its_whole_cleanup() -> None:
    """A peering reconciled again while it ends is not cancelled again: each cancel() on 3.11 would
    interrupt its cleanup at whatever step it had reached."""

    async def scenario() -> None:
        cleaned: list[str] = []
        serving = asyncio.Event()

        async def peering() -> None:
            try:
                serving.set()
                await asyncio.Event().wait()
            finally:
                for step in ("kubelet APIs", "queues", "reflection", "client"):
                    await asyncio.sleep(0)  # each step awaits something: where a cancel() lands
                    cleaned.append(step)

        task = asyncio.create_task(peering())
        await serving.wait()
        assert cancel_once(task), "asked now"
        await turns_until(lambda: len(cleaned) >= 1)  # the cleanup under way
        assert not cancel_once(task), "asked already"
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled() and cleaned == ["kubelet APIs", "queues", "reflection", "client"]

    asyncio.run(scenario())


def test_a_part_whose_cleanup_fails_as_it_is_cancelled_ends_and_is_not_restarted() -> None:
    async def scenario() -> None:
        starts = 0

        async def part() -> None:
            nonlocal starts
            starts += 1
            if starts > 1:
                return  # restarted (the failure this test is for): it ends, so the test does too
            try:
                await asyncio.Event().wait()
            finally:
                raise RuntimeError("the connection was already closed")  # what a cleanup step may meet

        supervised = asyncio.create_task(restarting("agent of foreign-1", part))
        await turns_until(lambda: starts == 1)
        supervised.cancel()
        assert await ended_within(supervised, 2), "restarted instead of ended"
        assert supervised.cancelled() and starts == 1

    asyncio.run(scenario())


def test_a_queue_shutdown_cancelled_while_it_drains_still_stops_its_workers() -> None:
    async def scenario() -> None:
        reconciling = asyncio.Event()

        async def reconcile(_: str) -> None:
            reconciling.set()
            await asyncio.Event().wait()  # a reconcile that never ends: the drain waits its deadline

        queue = WorkQueue(reconcile, workers=1)
        queue.add("a")
        queue.start()
        await reconciling.wait()
        workers = list(queue._tasks)
        draining = asyncio.Event()

        async def shut_down() -> None:
            draining.set()  # shutdown runs on at once to its drain's first wait
            await queue.shutdown(drain_timeout=30)

        stopping = asyncio.create_task(shut_down())
        await draining.wait()
        stopping.cancel()
        await asyncio.gather(stopping, return_exceptions=True)
        assert all(worker.done() for worker in workers), "a worker went on after its queue was shut down"

    asyncio.run(scenario())
