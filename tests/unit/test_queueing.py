"""WorkQueue semantics: coalescing, one worker per key, retries with backoff, draining shutdown."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Callable

import pytest

from runtime.kube import WorkQueue


def test_a_key_added_many_times_while_queued_is_reconciled_once() -> None:
    async def scenario() -> Counter[str]:
        seen: Counter[str] = Counter()

        async def reconcile(key: str) -> None:
            seen[key] += 1

        queue = WorkQueue(reconcile, workers=2)
        for _ in range(5):
            queue.add("a")
        queue.add("b")
        queue.start()
        await queue.wait_idle(timeout=5)
        await queue.shutdown()
        return seen

    assert asyncio.run(scenario()) == Counter({"a": 1, "b": 1})


def test_a_key_is_never_reconciled_by_two_workers_and_runs_again_after_adds_meanwhile() -> None:
    async def scenario() -> tuple[int, int]:
        running = 0
        most = 0
        runs = 0
        release = asyncio.Event()

        async def reconcile(key: str) -> None:
            nonlocal running, most, runs
            running += 1
            runs += 1
            most = max(most, running)
            if runs == 1:
                await release.wait()
            running -= 1

        queue = WorkQueue(reconcile, workers=4)
        queue.start()
        queue.add("k")
        await asyncio.sleep(0.05)  # the first reconcile is now blocked
        for _ in range(3):
            queue.add("k")  # coalesced into one follow-up run
        await asyncio.sleep(0.05)
        release.set()
        await queue.wait_idle(timeout=5)
        await queue.shutdown()
        return most, runs

    most, runs = asyncio.run(scenario())
    assert most == 1
    assert runs == 2


def test_failures_are_retried_with_growing_backoff_until_success() -> None:
    async def scenario() -> tuple[list[float], WorkQueue]:
        attempts: list[float] = []
        loop = asyncio.get_running_loop()

        async def reconcile(key: str) -> None:
            attempts.append(loop.time())
            if len(attempts) < 4:
                raise RuntimeError("not yet")

        queue = WorkQueue(reconcile, workers=1, base_delay=0.02, max_delay=1.0)
        queue.start()
        queue.add("k")
        await queue.wait_idle(timeout=5)
        await queue.shutdown()
        return attempts, queue

    attempts, queue = asyncio.run(scenario())
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert len(attempts) == 4
    assert gaps[0] >= 0.02 and gaps[1] >= 0.04 and gaps[2] >= 0.08
    assert queue.stats.failures == 3
    assert queue.backoff("k") == 0.02, "a success resets the key's backoff"


def test_backoff_is_capped() -> None:
    async def scenario() -> float:
        async def reconcile(key: str) -> None:
            raise RuntimeError

        queue = WorkQueue(reconcile, base_delay=1, max_delay=5)
        queue._failures["k"] = 20
        return queue.backoff("k")

    assert asyncio.run(scenario()) == 5


def test_shutdown_drains_queued_work() -> None:
    async def scenario() -> list[str]:
        done: list[str] = []

        async def reconcile(key: str) -> None:
            await asyncio.sleep(0.01)
            done.append(key)

        queue = WorkQueue(reconcile, workers=1)
        queue.start()
        for key in "abc":
            queue.add(key)
        await queue.shutdown(drain_timeout=5)
        return done

    assert asyncio.run(scenario()) == ["a", "b", "c"]


def test_a_queue_never_started_stops_at_once_with_its_keys_unreconciled() -> None:
    """A stand-by replica fills its queues and never starts their workers: its shutdown has nothing
    to wait for (it waited out the drain timeout, and the process was killed before it ended)."""

    async def scenario() -> tuple[list[str], float]:
        done: list[str] = []

        async def reconcile(key: str) -> None:
            done.append(key)

        queue = WorkQueue(reconcile, workers=1)
        for key in "abc":
            queue.add(key)
        started = asyncio.get_running_loop().time()
        await queue.shutdown(drain_timeout=30)
        return done, asyncio.get_running_loop().time() - started

    done, took = asyncio.run(scenario())
    assert done == []
    assert took < 5, "it waited for a drain nobody would do"


def test_a_queue_needs_a_worker() -> None:
    async def reconcile(key: str) -> None:
        return None

    with pytest.raises(ValueError, match="at least one worker"):
        WorkQueue(reconcile, workers=0)


def test_diff_of_stores_reports_vanished_new_and_changed_objects() -> None:
    from types import SimpleNamespace

    from runtime.kube import diff_stores

    def obj(rv: str) -> SimpleNamespace:
        return SimpleNamespace(metadata=SimpleNamespace(resourceVersion=rv))

    old = {"a": obj("1"), "b": obj("2"), "c": obj("3")}
    new = {"b": obj("2"), "c": obj("4"), "d": obj("5")}
    assert [(e.type, e.key) for e in diff_stores(old, new)] == [("DELETED", "a"), ("MODIFIED", "c"), ("ADDED", "d")]


def test_the_number_of_workers_changes_live_and_a_worker_let_go_finishes_its_key_first() -> None:
    async def until(condition: Callable[[], bool]) -> None:
        for _ in range(1000):  # loop turns, not time: every worker that can run has run
            if condition():
                return
            await asyncio.sleep(0)
        raise AssertionError("condition not met")

    async def scenario() -> tuple[list[int], list[int], int]:
        running: set[str] = set()
        done: list[str] = []
        gate = asyncio.Event()

        async def reconcile(key: str) -> None:
            running.add(key)
            await gate.wait()
            running.discard(key)
            done.append(key)

        def workers() -> int:
            return sum(1 for t in asyncio.all_tasks() if t.get_name().startswith("live-worker-") and not t.done())

        queue = WorkQueue(reconcile, workers=3, name="live")
        queue.start()
        for i in range(20):
            queue.add(str(i))
        busy, depth = [], []
        for count in (3, 8):
            queue.resize(count)
            await until(lambda count=count: len(running) == count and queue.depth == 20 - count)  # type: ignore[misc]
            busy.append(len(running))
            depth.append(queue.depth)
        queue.resize(1)  # seven workers in the middle of a reconcile: let go once it ends
        gate.set()
        await queue.wait_idle(timeout=5)
        await until(lambda: workers() == 1)
        assert sorted(done, key=int) == [str(i) for i in range(20)], "no key lost"
        gate.clear()
        queue.resize(3)
        for i in range(10):
            queue.add(f"again-{i}")
        await until(lambda: len(running) == 3)
        assert workers() == 3, "no fourth worker left to take a key"
        busy.append(len(running))
        depth.append(queue.depth)
        gate.set()
        await queue.shutdown()
        return busy, depth, workers()

    busy, depth, left = asyncio.run(scenario())
    assert busy == [3, 8, 3]
    assert depth == [17, 12, 7]
    assert left == 0


def reconcile_order(adds: list[tuple[str, bool]]) -> list[str]:
    """The order one worker reconciles keys in, added (key, first) while it is busy with another."""

    async def scenario() -> list[str]:
        seen: list[str] = []
        gate, taken = asyncio.Event(), asyncio.Event()

        async def reconcile(key: str) -> None:
            if key == "busy":
                taken.set()
                await gate.wait()
            seen.append(key)

        queue = WorkQueue(reconcile, workers=1)
        queue.start()
        queue.add("busy")
        await asyncio.wait_for(taken.wait(), 5)  # the one worker holds it: the next keys queue up
        for key, first in adds:
            queue.add(key, first=first)
        gate.set()
        await queue.wait_idle(5)
        await queue.shutdown()
        return seen[1:]

    return asyncio.run(scenario())


def test_a_key_added_first_is_reconciled_before_the_keys_waiting() -> None:
    """A newly bound pod goes ahead of follow-ups of pods already offloaded (issue 41: pick-up latency)."""
    adds = [("status-1", False), ("status-2", False), ("new-pod", True), ("status-1", True)]
    assert reconcile_order(adds) == ["new-pod", "status-1", "status-2"], "a key already waiting keeps its place"


def test_keys_added_first_go_two_for_one_and_never_starve_the_others() -> None:
    """1,000 pods bound at once must not hold back the status updates of the pods already running."""
    adds = [(f"status-{i}", False) for i in range(3)] + [(f"new-{i}", True) for i in range(5)]
    order = ["new-0", "new-1", "status-0", "new-2", "new-3", "status-1", "new-4", "status-2"]
    assert reconcile_order(adds) == order


def test_a_key_waiting_to_be_retried_later_is_reconciled_at_the_earliest_time_asked() -> None:
    """A refused twin's offloading, retried in 30 s, then deleted: the controller asks to look again in a
    moment, and must not wait out the 30 s (unoffloading such a namespace took 30 s instead of 6)."""

    async def scenario() -> Counter[str]:
        seen: Counter[str] = Counter()

        async def reconcile(key: str) -> None:
            seen[key] += 1

        queue = WorkQueue(reconcile, workers=1)
        queue.start()
        queue.add_after("refused", 30)
        queue.add_after("refused", 0.2)  # sooner: it wins
        queue.add_after("polled", 0.2)
        queue.add_after("polled", 30)  # later: the earlier look stays, and no second one is left waiting
        await queue.wait_idle(timeout=10)  # idle: nothing scheduled for 30 s from now
        await queue.shutdown()
        return seen

    assert asyncio.run(scenario()) == Counter({"refused": 1, "polled": 1})


def test_keys_waiting_out_their_backoff_run_at_once_when_told_and_planned_looks_keep_their_time() -> None:
    """After an outage (its foreign cluster answers again) a key whose backoff grew to a minute runs
    now, its failures forgotten; a look planned without a failure is not brought forward."""

    async def scenario() -> tuple[list[str], int]:
        runs: list[str] = []
        failing = True

        async def reconcile(key: str) -> None:
            runs.append(key)
            if key == "failed" and failing:
                raise RuntimeError("the foreign cluster does not answer")

        async def until(condition: Callable[[], bool]) -> None:
            while not condition():
                await asyncio.sleep(0)  # each turn lets the worker run

        queue = WorkQueue(reconcile, workers=1, base_delay=60, max_delay=60)
        queue.start()
        queue.add("failed")
        queue.add_after("planned", 60)
        await asyncio.wait_for(until(lambda: queue.stats.retries_scheduled == 1), 5)
        assert runs == ["failed"] and queue.backoff("failed") == 60
        failing = False
        woken = queue.retry_failed()
        # far sooner than its 60 s backoff
        await asyncio.wait_for(until(lambda: queue.stats.reconciles == 2), 5)
        after = list(runs)
        await queue.shutdown()
        return after, woken

    after, woken = asyncio.run(scenario())
    assert woken == 1
    assert after == ["failed", "failed"], "retried at once, and the planned look still waits"
