"""The foreign agent's grant per home (runtime/controllers/granting.py) and its rules
(runtime/api/quota.py), with the API calls left out: the e2e test (tests/e2e/test_foreign_guards.py)
runs them against the real clusters."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, cast

import pytest
from lightkube.resources.core_v1 import Pod

from runtime.api import names
from runtime.api.quota import LimitsEnforcement, grant_problem, limits_problem, spec_requests
from runtime.api.resources import QuotaResource, ResourceAdvertisementResource, ShadowPodResource
from runtime.api.shadowpod import FIELDS_THE_FOREIGN_CLUSTER_DECIDES
from runtime.controllers.granting import Grants
from runtime.controllers.namespacemap import twin_floor
from runtime.controllers.shadowpod import ShadowPodController
from runtime.forging.pods import HOME_SCHEDULING_FIELDS
from runtime.kube.packing import Packer, unpacked
from runtime.virtualkubelet.node import CORDONED_CONDITION, node_apply, node_conditions

TWIN = "demo-home"
TENANT = names.tenant_namespace("home")


def container(name: str = "c", cpu: str | None = "500m", memory: str | None = None, **limits: str) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": name, "image": "i", "resources": {"requests": requests, "limits": limits}}


def shadow(name: str, *containers: dict[str, Any], origin: str = "home", namespace: str = TWIN, **status: Any) -> Any:
    return ShadowPodResource.from_dict(
        {
            "metadata": {"name": name, "namespace": namespace, "labels": {names.ORIGIN_LABEL: origin}},
            "spec": {"pod": {"containers": list(containers) or [container()]}},
            "status": status,
        }
    )


def grants(quota: dict[str, Any] | None = None, advertised: dict[str, str] | None = None) -> tuple[Grants, list[str]]:
    requeued: list[str] = []
    twins = {TWIN: "home", "other-home2": "home2"}
    granted = Grants(cast(Any, None), "foreign-1", requeued.append, twins.get)
    if quota is not None:
        granted.quotas.store[f"{TENANT}/{names.quota_name('home')}"] = QuotaResource.from_dict(
            {"metadata": {"name": "home", "namespace": TENANT}, "spec": quota}
        )
    if advertised is not None:
        granted.advertisements.store[f"{TENANT}/foreign-1"] = ResourceAdvertisementResource.from_dict(
            {"metadata": {"name": "foreign-1", "namespace": TENANT}, "spec": {"resources": advertised}}
        )
    return granted, requeued


def test_a_pod_requests_its_containers_sum_the_largest_init_container_and_a_pod_slot() -> None:
    spec = {
        "containers": [container(cpu="250m", memory="64Mi"), container("d", cpu="250m")],
        "initContainers": [container("i", cpu="2")],
    }
    assert spec_requests(spec) == {"cpu": Decimal(2), "memory": Decimal(64 * 2**20), "pods": Decimal(1)}
    with pytest.raises(ValueError):
        spec_requests({"containers": [container(cpu="lots")]})


def test_hard_enforcement_wants_requests_equal_to_limits_for_cpu_and_memory() -> None:
    equal = {"containers": [container(cpu="1", memory="1Gi")]}
    equal["containers"][0]["resources"]["limits"] = {"cpu": "1000m", "memory": "1Gi"}
    assert limits_problem(equal, LimitsEnforcement.HARD) is None
    no_limits = {"containers": [container(cpu="1", memory="1Gi")]}
    problem = limits_problem(no_limits, LimitsEnforcement.HARD)
    assert problem is not None and "resources.limits.cpu" in problem and "'c'" in problem
    assert limits_problem(no_limits, LimitsEnforcement.SOFT) is None


def test_the_grant_names_what_is_over_and_what_is_left() -> None:
    grant = {"cpu": Decimal(2), "pods": Decimal(10)}
    assert grant_problem({"cpu": Decimal(1), "pods": Decimal(1)}, {"cpu": Decimal(1)}, grant) is None
    problem = grant_problem({"cpu": Decimal("1.5"), "pods": Decimal(1)}, {"cpu": Decimal(1)}, grant)
    assert problem == "cpu 1500m asked does not fit in what is left of 2"
    assert grant_problem({"memory": Decimal(10**12)}, {}, grant) is None  # what the grant does not name is free


def test_fifty_concurrent_creates_never_put_more_than_the_grant_in_use() -> None:
    granted, _ = grants({"resources": {"cpu": "10"}})
    admitted = [n for n in range(50) if granted.admit(f"{TWIN}/p{n}", shadow(f"p{n}", container(cpu="1"))) is None]
    assert len(admitted) == 10
    assert granted.used("home")["cpu"] == Decimal(10)


def test_a_refused_pod_is_tried_again_when_room_is_made() -> None:
    granted, requeued = grants({"resources": {"cpu": "1"}})
    assert granted.admit(f"{TWIN}/a", shadow("a", container(cpu="1"))) is None
    problem = granted.admit(f"{TWIN}/b", shadow("b", container(cpu="1")))
    assert (
        problem is not None
        and "exceeds what foreign-1" in problem
        and "cpu 1 asked does not fit in what is left of 1" in problem
    )
    granted.release(f"{TWIN}/a")
    assert requeued == [f"{TWIN}/b"]
    assert granted.admit(f"{TWIN}/b", shadow("b", container(cpu="1"))) is None


def test_without_a_quota_the_grant_is_what_the_cluster_advertises_to_the_home() -> None:
    granted, _ = grants(advertised={"cpu": "2", "pods": "2"})
    assert granted.admit(f"{TWIN}/a", shadow("a", container(cpu="1"))) is None
    assert granted.admit(f"{TWIN}/b", shadow("b", container(cpu=None))) is None  # no requests: a pod slot
    problem = granted.admit(f"{TWIN}/c", shadow("c", container(cpu=None)))
    assert problem is not None and "pods 1 asked does not fit in what is left of 2" in problem


def test_none_enforcement_holds_no_resources_but_cordoned_starts_nothing() -> None:
    granted, _ = grants({"limitsEnforcement": "None", "resources": {"cpu": "1"}})
    assert granted.admit(f"{TWIN}/a", shadow("a", container(cpu="30"))) is None
    cordoned, _ = grants({"cordoned": True})
    problem = cordoned.admit(f"{TWIN}/a", shadow("a"))
    assert problem is not None and "cordoned" in problem


def test_a_shadowpod_outside_its_homes_twins_is_refused() -> None:
    granted, _ = grants({"limitsEnforcement": "None"})
    problem = granted.admit("other-home2/a", shadow("a", namespace="other-home2"))
    assert problem is not None and "not a twin namespace of home cluster home" in problem and "serves home2" in problem
    problem = granted.admit("default/a", shadow("a", namespace="default"))
    assert problem is not None and "not a twin namespace" in problem
    unlabelled = ShadowPodResource.from_dict({"metadata": {"name": "a", "namespace": TWIN}, "spec": {"pod": {}}})
    problem = granted.admit(f"{TWIN}/a", unlabelled)
    assert problem is not None and names.ORIGIN_LABEL in problem


def test_what_runs_is_counted_again_after_a_restart() -> None:
    granted, _ = grants({"resources": {"cpu": "2"}})
    packer = Packer(ShadowPodResource)
    running = shadow("a", container(cpu="1"), podUID="u-1", phase="Running")
    done = shadow("b", container(cpu="1"), podUID="u-2", phase="Succeeded")
    stores = {f"{TWIN}/a": packer.pack(running), f"{TWIN}/b": packer.pack(done)}
    granted.seed(stores, {}, unpacked)
    assert granted.used("home") == {"cpu": Decimal(1), "pods": Decimal(1)}


@dataclass
class RecordingAgent:
    """The agent's ShadowPod controller with its writes recorded instead of sent."""

    agent: ShadowPodController
    created: list[str] = field(default_factory=list)
    patches: list[dict[str, Any]] = field(default_factory=list)
    specs: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # name -> the pod spec it was made with

    @classmethod
    def with_quota(cls, spec: dict[str, Any] | None = None) -> RecordingAgent:
        agent = ShadowPodController(cast(Any, None), "foreign-1", twin_origin={TWIN: "home"}.get)
        assert agent.grants is not None
        if spec is not None:
            agent.grants.quotas.store[f"{TENANT}/home"] = QuotaResource.from_dict(
                {"metadata": {"name": "home", "namespace": TENANT}, "spec": spec}
            )
        recording = cls(agent)

        async def create_pod(shadow: Any, spec: dict[str, Any] | None = None) -> None:
            recording.created.append(shadow.metadata.name)
            recording.specs[shadow.metadata.name] = spec

        async def patch_status(shadow: Any, update: dict[str, Any]) -> None:
            recording.patches.append(update)

        async def update_pod(shadow: Any, pod: Any, applied_keys: dict[str, list[str]] | None) -> bool:
            return True

        agent._create_pod = create_pod  # type: ignore[method-assign]
        agent._patch_status = patch_status  # type: ignore[method-assign]
        agent._update_pod = update_pod  # type: ignore[method-assign]
        return recording

    @property
    def grants(self) -> Grants:
        assert self.agent.grants is not None
        return self.agent.grants


def test_the_agent_makes_no_pod_for_a_refused_shadowpod_and_says_why() -> None:
    async def scenario() -> RecordingAgent:
        recording = RecordingAgent.with_quota({"resources": {"cpu": "1"}})
        packer = Packer(ShadowPodResource)
        for name in ("a", "b"):
            recording.agent.shadows.store[f"{TWIN}/{name}"] = packer.pack(shadow(name, container(cpu="1")))
            await recording.agent.reconcile(f"{TWIN}/{name}")
        return recording

    recording = asyncio.run(scenario())
    assert recording.created == ["a"]
    last = recording.patches[-1]
    assert last["reason"] == "CreateFailed" and "cpu 1 asked does not fit" in last["message"]


def test_twins_get_their_tenants_pod_security_floor_else_baseline() -> None:
    assert twin_floor({}) == dict.fromkeys(names.POD_SECURITY_LABELS, "baseline")
    floor = twin_floor({names.POD_SECURITY_ENFORCE_LABEL: "restricted", "other": "x"})
    assert floor[names.POD_SECURITY_ENFORCE_LABEL] == "restricted"
    assert set(floor) == set(names.POD_SECURITY_LABELS)


def test_a_finished_pod_frees_its_share() -> None:
    async def scenario() -> dict[str, Decimal]:
        recording = RecordingAgent.with_quota()
        agent = recording.agent
        agent.shadows.store[f"{TWIN}/a"] = Packer(ShadowPodResource).pack(shadow("a", container(cpu="1"), podUID="u-1"))
        finished = {"metadata": {"name": "a", "namespace": TWIN, "uid": "u-1"}, "status": {"phase": "Succeeded"}}
        agent.pods.store[f"{TWIN}/a"] = Packer(Pod).pack(Pod.from_dict(finished))
        await agent.reconcile(f"{TWIN}/a")
        return recording.grants.used("home")

    assert asyncio.run(scenario()) == {}


def test_a_cordoned_home_shows_on_its_virtual_node_and_only_while_it_lasts() -> None:
    applied = node_apply("liqo-foreign-1", {"a": "b"}, [], None, unschedulable=True)
    assert applied is not None and applied["spec"]["unschedulable"] is True
    live = {**applied, "metadata": {**applied["metadata"], "resourceVersion": "1"}}
    assert node_apply("liqo-foreign-1", {"a": "b"}, [], live, unschedulable=True) is None, "already shown"
    uncordoned = node_apply("liqo-foreign-1", {"a": "b"}, [], live)
    assert uncordoned is not None and "unschedulable" not in uncordoned["spec"], "left out: apply drops it"
    condition = next(
        c for c in node_conditions(True, 0, [], cordoned_by="foreign-1") if c["type"] == CORDONED_CONDITION
    )
    assert condition["status"] == "True" and "foreign-1 cordoned" in condition["message"]


def test_a_pod_gone_while_its_home_is_cordoned_is_not_started_again() -> None:
    async def scenario() -> tuple[list[str], list[dict[str, Any]], dict[str, Decimal]]:
        recording = RecordingAgent.with_quota({"cordoned": True})
        ran = shadow("a", container(cpu="1"), podUID="u-1", phase="Running")
        recording.agent.shadows.store[f"{TWIN}/a"] = Packer(ShadowPodResource).pack(ran)
        recording.grants.count(f"{TWIN}/a", ran)
        await recording.agent.reconcile(f"{TWIN}/a")  # its pod was evicted (a drain)
        return recording.created, recording.patches, recording.grants.used("home")

    created, patches, used = asyncio.run(scenario())
    assert created == []
    assert patches == [
        {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "home cluster home is cordoned in foreign-1: its pods there are not started again",
        }
    ]
    assert used == {}


def test_a_shadowpod_refused_for_its_namespace_is_checked_again_later() -> None:
    """The twin may not be in the agent's store yet (just made, or the agent just started)."""
    rechecks: list[tuple[str, float]] = []
    twins: dict[str, str] = {}
    granted = Grants(cast(Any, None), "foreign-1", lambda key: None, twins.get, lambda k, s: rechecks.append((k, s)))
    assert granted.admit(f"{TWIN}/a", shadow("a")) is not None
    assert rechecks == [(f"{TWIN}/a", 5.0)]
    twins[TWIN] = "home"
    assert granted.admit(f"{TWIN}/a", shadow("a")) is None


def test_the_fields_the_admission_policy_refuses_are_ones_the_home_side_never_sets() -> None:
    assert set(FIELDS_THE_FOREIGN_CLUSTER_DECIDES) <= set(HOME_SCHEDULING_FIELDS)
