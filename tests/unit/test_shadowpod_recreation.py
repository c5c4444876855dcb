"""The foreign agent's decision to (re)create a ShadowPod's pod, with the API calls left out."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from lightkube.resources.core_v1 import Pod

from runtime.api.resources import ShadowPodResource
from runtime.controllers.shadowpod import ShadowPodController
from runtime.forging.shadowpods import applied, applied_hash
from runtime.kube.packing import Packer

KEY = "twin/p"


def shadow(**status: Any) -> Any:
    """As the agent's informer keeps it: packed."""
    return Packer(ShadowPodResource).pack(
        ShadowPodResource.from_dict(
            {
                "metadata": {"name": "p", "namespace": "twin", "uid": "s-1"},
                "spec": {"pod": {"containers": [{"name": "c", "image": "i"}]}},
                "status": status,
            }
        )
    )


def pod(uid: str, phase: str) -> Any:
    return Pod.from_dict({"metadata": {"name": "p", "namespace": "twin", "uid": uid}, "status": {"phase": phase}})


def controller(
    recreate_after: float, patches: list[dict[str, Any]] | None = None
) -> tuple[ShadowPodController, list[str]]:
    agent = ShadowPodController(cast(Any, None), "foreign-1", recreate_after=recreate_after)
    created: list[str] = []

    async def create_pod(shadow: Any, spec: dict[str, Any] | None = None) -> None:
        created.append(shadow.metadata.name)

    async def patch_status(shadow: Any, update: dict[str, Any]) -> None:
        if patches is not None:
            patches.append(update)

    agent._create_pod = create_pod  # type: ignore[method-assign]
    agent._patch_status = patch_status  # type: ignore[method-assign]
    return agent, created


def test_a_first_pod_is_created_at_once() -> None:
    async def scenario() -> list[str]:
        agent, created = controller(recreate_after=60)
        agent.shadows.store[KEY] = shadow()
        await agent.reconcile(KEY)
        return created

    assert asyncio.run(scenario()) == ["p"]


def test_a_vanished_pod_is_recreated_only_after_the_delay_and_the_key_comes_back_by_itself() -> None:
    async def scenario() -> tuple[list[str], bool, list[str]]:
        agent, created = controller(recreate_after=1.0)  # far longer than two reconciles take
        agent.shadows.store[KEY] = shadow(podUID="old", phase="Running")
        await agent.reconcile(KEY)
        await agent.reconcile(KEY)  # a status event meanwhile changes nothing
        early, queued_again = list(created), KEY in agent.queue._delayed
        await asyncio.sleep(1.05)
        await agent.reconcile(KEY)
        return early, queued_again, created

    early, queued_again, created = asyncio.run(scenario())
    assert early == [] and queued_again
    assert created == ["p"]


def test_a_pod_back_before_the_delay_resets_the_wait() -> None:
    async def scenario() -> list[str]:
        agent, created = controller(recreate_after=0.2)
        agent.shadows.store[KEY] = shadow(podUID="old", phase="Running")
        await agent.reconcile(KEY)
        agent.pods.store[KEY] = pod("old", "Running")
        await agent.reconcile(KEY)
        del agent.pods.store[KEY]
        await asyncio.sleep(0.25)
        await agent.reconcile(KEY)  # missing again: the wait starts over
        return created

    assert asyncio.run(scenario()) == []


def test_a_finished_pod_is_never_recreated() -> None:
    async def scenario() -> list[str]:
        agent, created = controller(recreate_after=0)
        agent.shadows.store[KEY] = shadow(podUID="old", phase="Succeeded")
        await agent.reconcile(KEY)
        return created

    assert asyncio.run(scenario()) == []


def test_the_pod_is_recorded_once_it_runs_and_a_new_uid_counts_as_a_recreation() -> None:
    async def scenario() -> list[dict[str, Any]]:
        patches: list[dict[str, Any]] = []
        agent, _ = controller(recreate_after=0, patches=patches)
        agent.shadows.store[KEY] = shadow()
        agent.pods.store[KEY] = pod("first", "Pending")
        await agent.reconcile(KEY)  # nothing to record while Pending
        agent.pods.store[KEY] = pod("first", "Running")
        await agent.reconcile(KEY)
        agent.shadows.store[KEY] = shadow(podUID="first", phase="Running", recreations=2)
        await agent.reconcile(KEY)  # nothing new
        agent.pods.store[KEY] = pod("second", "Pending")
        await agent.reconcile(KEY)
        agent.pods.store[KEY] = pod("second", "Running")
        await agent.reconcile(KEY)
        return patches

    carried = applied(shadow(), applied_hash(shadow()))  # the pod matches its ShadowPod: recorded with the status
    assert asyncio.run(scenario()) == [
        {"podUID": "first", "phase": "Running", **carried},
        {"podUID": "second", "recreations": 3, "previousRestarts": {"c": 3}, **carried},
    ]


def test_a_pod_that_vanished_before_running_is_recreated_after_the_delay_too() -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        agent, created = controller(recreate_after=60)
        agent.shadows.store[KEY] = shadow()
        await agent.reconcile(KEY)  # the first pod: at once
        first = list(created)
        await agent.reconcile(KEY)  # gone before the agent ever recorded it: waits like any other
        return first, created

    assert asyncio.run(scenario()) == (["p"], ["p"])
