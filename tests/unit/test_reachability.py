"""When an API server answers again (runtime/kube/liveness.py, Reachability): what could not reach it
stops waiting at the server's first answer after a failure, and at nothing else."""

from __future__ import annotations

import asyncio
import time

from runtime.kube.liveness import Reachability


def test_an_answer_after_a_failure_ends_the_wait_at_once() -> None:
    async def scenario() -> tuple[bool, float]:
        reachability = Reachability()
        reachability.failed()
        started = time.monotonic()
        waiting = asyncio.create_task(reachability.answer_within(30))
        await asyncio.sleep(0)  # the waiter's first step: it waits now
        reachability.answered()
        return await waiting, time.monotonic() - started

    answered, took = asyncio.run(scenario())
    assert answered and took < 5


def test_answers_while_the_server_answers_all_along_wake_no_one() -> None:
    async def scenario() -> bool:
        reachability = Reachability()
        waiting = asyncio.create_task(reachability.answer_within(0.3))
        for _ in range(5):  # the other requests of a healthy client: no failure before them
            await asyncio.sleep(0)
            reachability.answered()
        return await waiting

    assert asyncio.run(scenario()) is False


def test_only_the_first_answer_after_a_failure_counts() -> None:
    async def scenario() -> tuple[bool, bool]:
        reachability = Reachability()
        reachability.failed()
        first = asyncio.create_task(reachability.answer_within(5))
        await asyncio.sleep(0)
        reachability.answered()
        woken = await first
        later = asyncio.create_task(reachability.answer_within(0.3))  # up again: nothing to wait for
        await asyncio.sleep(0)
        reachability.answered()
        return woken, await later

    assert asyncio.run(scenario()) == (True, False)


def test_the_first_answer_after_a_failure_calls_each_subscriber_once_and_a_failing_one_stops_none() -> None:
    reachability = Reachability()
    called: list[str] = []

    def broken() -> None:
        called.append("broken")
        raise RuntimeError("a subscriber's bug")

    reachability.on_answer_again += [broken, lambda: called.append("queue")]
    reachability.answered()  # up all along: nothing to retry
    assert called == []
    reachability.failed()
    reachability.failed()
    reachability.answered()  # the request that answered is not failed by the broken subscriber
    reachability.answered()
    assert called == ["broken", "queue"]


def test_a_subscriber_removed_while_called_is_not_called_again() -> None:
    reachability = Reachability()
    called: list[int] = []

    def once() -> None:
        called.append(1)
        reachability.on_answer_again.remove(once)  # a peering that stops as the server answers

    reachability.on_answer_again.append(once)
    for _ in range(2):
        reachability.failed()
        reachability.answered()
    assert called == [1]
