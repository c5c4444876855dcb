"""A loop with a deadline on each step still ends when it is cancelled as the step completes.

Python 3.11's `asyncio.wait_for` returns the result of an awaitable that completes in the same turn
as its task is cancelled, and the cancellation is lost. A peering's health loop met it in CI: the
peering was cancelled (its VirtualNodes gone), the loop went on checking for good, and the peering
never ended, so it was never served again once its VirtualNode came back. The runtime uses
`asyncio.timeout` instead (pyproject.toml bans `asyncio.wait_for`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime.kube.liveness import Reachability
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
        while not foreign.reads:
            await asyncio.sleep(0)
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
        await asyncio.sleep(0)
        reachability.answered()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(scenario())
