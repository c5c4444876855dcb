"""Leader election against a real API server: one leader, take-over after expiry or release, loss."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Iterator
from typing import cast

import pytest
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace

from liqo_stack.dev.clusters import DevEnvironment
from runtime.api.leaderelection import LeaderElectionTiming
from runtime.kube.client import RuntimeClient, async_client
from runtime.kube.controlling import gate_on, run_controller
from runtime.kube.informing import Informer
from runtime.kube.leaderelection import LeaderElector
from runtime.kube.queueing import WorkQueue
from tests.support.kube import wait_until_async

pytestmark = pytest.mark.clusters

# short, in client-go's proportions, so a test waits seconds rather than the default 15
FAST = LeaderElectionTiming(lease_duration=4, renew_deadline=3, retry_period=1)


@pytest.fixture
def namespace(home: Client, unique_name: str) -> Iterator[str]:
    home.create(Namespace(metadata=ObjectMeta(name=unique_name)))
    yield unique_name
    home.delete(Namespace, unique_name)


def electors(dev_env: DevEnvironment, namespace: str, *identities: str) -> list[LeaderElector]:
    return [
        LeaderElector(
            async_client(KubeConfig.from_file(dev_env.kubeconfig("home"))),
            namespace=namespace,
            name="component",
            identity=identity,
            timing=FAST,
        )
        for identity in identities
    ]


def lease_reads(elector: LeaderElector) -> list[float]:
    """When (monotonic) the candidate reads its Lease from now on: one read per round of its campaign."""
    reads: list[float] = []
    client = cast(RuntimeClient, elector.client)
    client.on_request(lambda method, path: reads.append(time.monotonic()) if method == "GET" else None)
    return reads


def holder(home: Client, namespace: str) -> str | None:
    spec = home.get(Lease, "component", namespace=namespace).spec
    return spec.holderIdentity if spec else None


def test_one_leads_and_a_crashed_leader_is_replaced_after_the_lease_expires(
    dev_env: DevEnvironment, home: Client, namespace: str
) -> None:
    async def scenario() -> tuple[float, list[str]]:
        first, second = electors(dev_env, namespace, "first", "second")
        await first.acquire()
        lost: list[str] = []
        keeping = asyncio.create_task(first.campaign(lambda: lost.append("first")))
        reads = lease_reads(second)
        standing_by = asyncio.create_task(second.campaign(lambda: lost.append("second")))
        # the leader renews: the stand-by never takes over, though it reads the Lease again more than
        # a lease duration after its first read (it would take over then, were the record unchanged)
        await wait_until_async(
            lambda: len(reads) >= 2 and reads[-1] - reads[0] > FAST.lease_duration + FAST.retry_period,
            30,
            "the stand-by reading the Lease past a lease duration",
        )
        assert not second.is_leader.is_set() and first.is_leader.is_set()
        assert holder(home, namespace) == "first"
        keeping.cancel()  # a crash: no release
        crashed = time.monotonic()
        await asyncio.wait_for(second.is_leader.wait(), 3 * FAST.lease_duration)
        took_over = time.monotonic() - crashed
        standing_by.cancel()
        return took_over, lost

    took_over, lost = asyncio.run(scenario())
    assert holder(home, namespace) == "second"
    assert FAST.lease_duration - FAST.retry_period <= took_over <= FAST.lease_duration + 2 * FAST.retry_period
    assert lost == []
    lease = home.get(Lease, "component", namespace=namespace)
    assert lease.spec is not None and lease.spec.leaseTransitions == 1


def test_release_hands_over_at_once(dev_env: DevEnvironment, home: Client, namespace: str) -> None:
    async def scenario() -> float:
        first, second = electors(dev_env, namespace, "first", "second")
        await first.acquire()
        reads = lease_reads(second)
        standing_by = asyncio.create_task(second.campaign(lambda: None))
        # standing by: it has found the Lease held, and waits for its next round
        await wait_until_async(lambda: reads and not second.is_leader.is_set(), 10, "the stand-by campaigning")
        await first.release()
        released = time.monotonic()
        await asyncio.wait_for(second.is_leader.wait(), FAST.lease_duration)
        standing_by.cancel()
        return time.monotonic() - released

    handed_over = asyncio.run(scenario())
    assert handed_over < FAST.lease_duration / 2  # the next retry, not an expiry
    assert holder(home, namespace) == "second"


def test_a_release_that_meets_a_changed_lease_releases_the_lease_as_it_is_now(
    dev_env: DevEnvironment, home: Client, namespace: str
) -> None:
    """The Lease changed after the leader last read it (here: labelled by another writer; in the
    failover e2e test, a renewal in flight when the campaign was cancelled): the release's replace gets
    409, and the leader releases the Lease as it is now instead of leaving it to expire."""

    async def scenario() -> None:
        (first,) = electors(dev_env, namespace, "first")
        await first.acquire()
        home.patch(Lease, "component", {"metadata": {"labels": {"touched": "yes"}}}, namespace=namespace)
        await first.release()

    asyncio.run(scenario())
    lease = home.get(Lease, "component", namespace=namespace)
    assert lease.spec is not None and lease.spec.holderIdentity is None
    assert lease.metadata is not None and (lease.metadata.labels or {}).get("touched") == "yes"


def test_a_leader_that_cannot_renew_gives_up_within_the_renew_deadline(
    dev_env: DevEnvironment, home: Client, namespace: str
) -> None:
    async def scenario() -> float:
        [leader] = electors(dev_env, namespace, "leader")
        lost = asyncio.Event()
        campaign = asyncio.create_task(leader.campaign(lost.set))
        await asyncio.wait_for(leader.is_leader.wait(), 10)
        # someone else takes the Lease (as after a partition): renewals are refused from now on
        lease = home.get(Lease, "component", namespace=namespace)
        assert lease.spec is not None
        lease.spec.holderIdentity = "usurper"
        home.replace(lease)
        taken = time.monotonic()
        await asyncio.wait_for(lost.wait(), FAST.renew_deadline + 3 * FAST.retry_period)
        await campaign
        return time.monotonic() - taken

    gave_up = asyncio.run(scenario())
    assert gave_up <= FAST.renew_deadline + 2 * FAST.retry_period
    assert holder(home, namespace) == "usurper"


def test_a_stand_by_controller_syncs_its_informers_but_reconciles_only_once_it_leads(
    dev_env: DevEnvironment, home: Client, namespace: str
) -> None:
    async def scenario() -> tuple[bool, list[str], list[str]]:
        client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("home")))
        leadership = asyncio.Event()
        gate_on(leadership)

        def controller(reconciled: list[str], context: contextvars.Context | None = None) -> asyncio.Task[None]:
            async def reconcile(key: str) -> None:
                reconciled.append(key)

            informer = Informer(client, Namespace)
            queue = WorkQueue(reconcile, workers=1, name="test")
            informer.add_handler(lambda event: queue.add(event.key) if event.key == namespace else None)
            informers.append(informer)
            return asyncio.create_task(run_controller([informer], queue), context=context)

        informers: list[Informer] = []
        reconciled: list[str] = []
        running = controller(reconciled)
        informer = informers[0]
        await asyncio.wait_for(informer.synced.wait(), 30)
        # a sentinel: the same controller, started now without the gate (a context of its own), lists,
        # syncs and reconciles; meanwhile the gated one, already synced, has long reached its gate
        ungated: list[str] = []
        sentinel = controller(ungated, contextvars.Context())
        await wait_until_async(lambda: ungated == [namespace], 30, "the ungated controller reconciled")
        sentinel.cancel()
        await asyncio.gather(sentinel, return_exceptions=True)
        warm = namespace in informer.store
        before = list(reconciled)
        leadership.set()
        deadline = time.monotonic() + 10
        while not reconciled and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await client.close()
        return warm, before, reconciled

    warm, before, after = asyncio.run(scenario())
    assert warm
    assert before == []
    assert after == [namespace]
