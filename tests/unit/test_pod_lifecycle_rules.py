"""Pure parts of an offloaded pod's life: status replacement, monotonic restarts and phases,
live updates carried to the remote pod, the end of a pod whose twin went away, tolerations."""

from __future__ import annotations

import asyncio
import copy
from typing import Any, cast

import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import Status
from lightkube.resources.core_v1 import Pod

from runtime.__main__ import main
from runtime.api import names
from runtime.api.resources import ShadowPodResource
from runtime.api.shadowpod import pod_spec_of
from runtime.controllers.shadowpod import ShadowPodController
from runtime.forging.pods import (
    aborted_status,
    ever_ran,
    home_pod_status,
    live_pod_spec,
    merge_patch,
    nothing_to_tell,
    remote_pod_spec,
)
from runtime.forging.shadowpods import applied_hash, live_changes
from runtime.kube.packing import Packer

IDS = {"home_cluster_id": "home", "foreign_cluster_id": "foreign-1"}
RUNNING = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}


def status(**fields: Any) -> dict[str, Any]:
    return home_pod_status(fields, pod_cidr_mapping=None, host_ip="10.1.2.3", recreations=0)


# -- item 2: the home status equals the translated remote one -----------------------------------
def test_what_the_remote_status_lacks_is_removed_from_the_home_status() -> None:
    backed_off = {"phase": "Pending", "reason": "OffloadingBackOff", "message": "not offloaded", "podIP": "10.0.0.9"}
    remote = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "startTime": "t"}
    desired = home_pod_status(remote, home_status=backed_off, pod_cidr_mapping=None, host_ip="10.1.2.3", recreations=0)
    patch = merge_patch(backed_off, desired)
    assert patch["reason"] is None and patch["message"] is None and patch["podIP"] is None
    assert patch["phase"] == "Running" and patch["conditions"] == [{"type": "Ready", "status": "True"}]
    assert patch["hostIP"] == "10.1.2.3" and patch["hostIPs"] == [{"ip": "10.1.2.3"}]
    assert merge_patch(desired, desired) == {}, "nothing to write when equal"


def test_remote_conditions_reach_home_without_the_remote_generation_and_home_disruption_stays() -> None:
    remote = {
        "phase": "Running",
        "observedGeneration": 3,
        "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 3}],
    }
    home = {"conditions": [{"type": "DisruptionTarget", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}
    desired = home_pod_status(remote, home_status=home, pod_cidr_mapping=None, host_ip="h", recreations=0)
    assert desired["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "DisruptionTarget", "status": "True"},
    ]
    assert "observedGeneration" not in desired


def test_a_recreated_remote_pod_neither_moves_the_phase_back_nor_drops_containers_or_restarts() -> None:
    home = {
        "phase": "Running",
        "podIP": "10.0.0.9",
        "containerStatuses": [{"name": "web", "image": "nginx", "restartCount": 5, "ready": True, "state": RUNNING}],
    }
    remote = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    assert not nothing_to_tell(remote, home), "a running home pod must learn about the new remote pod"
    desired = home_pod_status(remote, home_status=home, pod_cidr_mapping=None, host_ip="h", recreations=1)
    assert desired["phase"] == "Running", "a phase never goes backwards"
    assert "podIP" not in desired, "the old pod's IP is gone with it"
    [web] = desired["containerStatuses"]
    assert web["restartCount"] == 5 and web["ready"] is False and "waiting" in web["state"]


# -- item 5: restarts --------------------------------------------------------------------------
def test_restarts_add_the_previous_remote_pods_and_never_go_down() -> None:
    remote = {"phase": "Running", "containerStatuses": [{"name": "web", "restartCount": 1, "state": RUNNING}]}
    home = {"phase": "Running", "containerStatuses": [{"name": "web", "restartCount": 5}]}
    with_history = home_pod_status(
        remote, home_status=home, pod_cidr_mapping=None, host_ip="h", recreations=1, previous_restarts={"web": 5}
    )
    assert with_history["containerStatuses"][0]["restartCount"] == 6, "5 before + 1 of the new remote pod"
    without_history = home_pod_status(remote, home_status=home, pod_cidr_mapping=None, host_ip="h", recreations=1)
    assert without_history["containerStatuses"][0]["restartCount"] == 5, "never below what home showed"


def shadow_body(pod: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "twin", "uid": "s-1", "labels": {"app": "a"}},
        "spec": {"pod": pod or {"containers": [{"name": "c", "image": "i"}]}},
        "status": status,
    }


def stored(body: dict[str, Any]) -> Any:
    """A ShadowPod as the agent's informer keeps it: packed."""
    return Packer(ShadowPodResource).pack(ShadowPodResource.from_dict(copy.deepcopy(body)))


def shadow(pod: dict[str, Any] | None = None, **status: Any) -> Any:
    return stored(shadow_body(pod, **status))


def remote(uid: str, phase: str, restarts: int = 0, **spec: Any) -> Any:
    statuses = [{"name": "c", "image": "i", "imageID": "", "ready": True, "restartCount": restarts}]
    return Pod.from_dict(
        {
            "metadata": {"name": "p", "namespace": "twin", "uid": uid, "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "i"}], **spec},
            "status": {"phase": phase, "containerStatuses": statuses},
        }
    )


class RecordingAgent(ShadowPodController):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cast(Any, None), "foreign-1", recreate_after=0, **kwargs)
        self.patches: list[dict[str, Any]] = []
        self.pod_patches: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.refusal: ApiError | None = None

    async def _create_pod(self, shadow: Any, spec: dict[str, Any] | None = None) -> None:
        if self.refusal is not None:
            raise self.refusal

    async def _patch_status(self, shadow: Any, update: dict[str, Any]) -> None:
        self.patches.append(update)
        merged = {**(shadow.get("status") or {}), **update}
        self.shadows.store["twin/p"] = stored({**shadow.to_dict(), "status": merged})

    async def _update_pod(self, shadow: Any, pod: Any, applied_keys: dict[str, list[str]] | None) -> bool:
        patch, resize = live_changes(shadow.to_dict(), pod.to_dict(), applied_keys)
        if patch or resize:
            self.pod_patches.append((patch, resize))
        return bool(patch or resize)


def test_the_agent_records_the_old_pods_restarts_at_a_recreation() -> None:
    async def scenario() -> list[dict[str, Any]]:
        agent = RecordingAgent()
        agent.shadows.store["twin/p"] = shadow()
        agent.pods.store["twin/p"] = remote("first", "Running", restarts=4)
        await agent.reconcile("twin/p")
        agent.pods.store["twin/p"] = remote("second", "Running", restarts=0)
        await agent.reconcile("twin/p")
        return agent.patches

    first, second = asyncio.run(scenario())
    assert first["podUID"] == "first" and "previousRestarts" not in first
    assert second["recreations"] == 1 and second["previousRestarts"] == {"c": 5}, "4 restarts + the recreation"


# -- item 4: a refused create is recorded --------------------------------------------------------
def test_a_refused_create_is_recorded_once_and_cleared_by_the_next_success() -> None:
    refusal = ApiError(status=Status(code=403, message='pods "p" is forbidden: exceeded quota: no-pods'))

    async def scenario() -> list[dict[str, Any]]:
        agent = RecordingAgent()
        agent.refusal = refusal
        agent.shadows.store["twin/p"] = shadow()
        for _ in range(2):
            with pytest.raises(ApiError):
                await agent.reconcile("twin/p")  # raised: the work queue retries with backoff
        agent.refusal = None
        await agent.reconcile("twin/p")
        return agent.patches

    assert asyncio.run(scenario()) == [
        {"reason": "CreateFailed", "message": 'pods "p" is forbidden: exceeded quota: no-pods'},
        {"reason": None, "message": None},
    ]


# -- item 3: live updates --------------------------------------------------------------------------
def live_home_pod(**changes: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "name": "p",
            "labels": {"app": "web"},
            "annotations": {names.ANTI_AFFINITY_PRESET_ANNOTATION: "hard"},
        },
        "spec": {
            "nodeName": "liqo-foreign-1",
            "tolerations": [{"key": names.VIRTUAL_NODE_TAINT_KEY, "operator": "Exists"}],
            "containers": [{"name": "web", "image": "nginx:1.27", "resources": {"requests": {"cpu": "100m"}}}],
        },
    }
    pod["spec"].update(changes)
    return pod


def test_live_changes_of_the_home_pod_reach_the_offloaded_spec_and_the_affinity_stays() -> None:
    offloaded = remote_pod_spec(live_home_pod(), **IDS)
    changed = live_home_pod(
        activeDeadlineSeconds=60,
        tolerations=[
            {"key": names.VIRTUAL_NODE_TAINT_KEY, "operator": "Exists"},
            {"key": "maintenance", "operator": "Exists"},
        ],
        containers=[{"name": "web", "image": "nginx:1.28", "resources": {"requests": {"cpu": "80m"}}}],
    )
    changed["metadata"]["annotations"] = {names.ANTI_AFFINITY_PRESET_ANNOTATION: "bogus"}  # no effect any more
    spec = live_pod_spec(offloaded, changed)
    assert spec["activeDeadlineSeconds"] == 60
    assert spec["tolerations"] == [{"key": "maintenance", "operator": "Exists"}]
    assert spec["containers"][0]["image"] == "nginx:1.28"
    assert spec["containers"][0]["resources"] == {"requests": {"cpu": "80m"}}
    assert spec["affinity"] == offloaded["affinity"]
    assert live_pod_spec(offloaded, live_home_pod()) == offloaded


def test_the_agent_brings_the_live_pod_to_its_shadow() -> None:
    foreign_default = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
    wanted = {
        "metadata": {"labels": {"app": "a", "tier": "gold"}, "annotations": {"note": "hi"}},
        "spec": {
            "pod": {
                "activeDeadlineSeconds": 60,
                "tolerations": [{"key": "maintenance", "operator": "Exists"}],
                "containers": [{"name": "c", "image": "i2", "resources": {"requests": {"cpu": "100m"}}}],
            }
        },
    }
    live: dict[str, Any] = {
        "metadata": {"labels": {"app": "a", "old": "x", "topology.kubernetes.io/zone": "z1"}, "annotations": {}},
        "spec": {
            "tolerations": [foreign_default],
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "0.2"}}}],
        },
    }
    carried = {"labels": ["app", "old"], "annotations": []}
    patch, resize = live_changes(wanted, live, carried)
    assert patch == {
        "metadata": {"labels": {"tier": "gold", "old": None}, "annotations": {"note": "hi"}},  # the zone stays
        "spec": {
            "activeDeadlineSeconds": 60,
            "tolerations": [foreign_default, {"key": "maintenance", "operator": "Exists"}],
            "containers": [{"name": "c", "image": "i2"}],
        },
    }
    assert resize == {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}}
    live["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "0.1"}}
    assert live_changes(wanted, {**copy.deepcopy(live), "metadata": wanted["metadata"]})[1] == {}, "100m == 0.1"
    assert live_changes(wanted, live)[0]["metadata"]["labels"] == {"tier": "gold"}, "nothing carried: nothing removed"


def test_the_agent_touches_the_live_pod_only_when_its_shadow_changed() -> None:
    async def scenario() -> tuple[int, int, int]:
        agent = RecordingAgent()
        agent.shadows.store["twin/p"] = shadow()
        agent.pods.store["twin/p"] = remote("first", "Running")
        await agent.reconcile("twin/p")
        recorded = agent.shadows.store["twin/p"].get("status")["appliedHash"]
        assert recorded == applied_hash(agent.shadows.store["twin/p"])
        untouched = len(agent.pod_patches)
        current = agent.shadows.store["twin/p"].to_dict()
        spec = pod_spec_of(current)
        spec["containers"][0]["image"] = "i2"
        agent.shadows.store["twin/p"] = stored({**current, "spec": {"pod": spec}})
        await agent.reconcile("twin/p")
        after_change = len(agent.pod_patches)
        agent.pods.store["twin/p"] = remote("first", "Running")  # a pod event, the image not there yet
        await agent.reconcile("twin/p")
        return untouched, after_change, len(agent.pod_patches)

    assert asyncio.run(scenario()) == (0, 1, 1)


# -- item 1: the end of a pod whose twin went away ------------------------------------------------
def test_a_pod_whose_twin_went_away_fails_with_its_containers_killed() -> None:
    running = {
        "phase": "Running",
        "podIP": "10.0.0.9",
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [{"name": "web", "restartCount": 2, "ready": True, "state": RUNNING}],
    }
    assert ever_ran(running) and not ever_ran({"phase": "Pending"})
    aborted = aborted_status(running, "namespace x is not offloaded to foreign-1", "2026-01-02T00:00:00Z")
    assert aborted["phase"] == "Failed" and aborted["reason"] == "OffloadingAborted"
    assert {c["type"]: c["status"] for c in aborted["conditions"]} == {"Ready": "False", "PodScheduled": "True"}
    [web] = aborted["containerStatuses"]
    assert web["ready"] is False and web["restartCount"] == 2
    assert web["state"]["terminated"]["reason"] == "OffloadingAborted"
    assert web["state"]["terminated"]["startedAt"] == "2026-01-01T00:00:00Z"


# -- item 14 -------------------------------------------------------------------------------------
def test_the_users_not_ready_and_unreachable_tolerations_reach_the_remote_pod() -> None:
    mine = [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 45},
    ]
    pod = live_home_pod(tolerations=[{"key": names.VIRTUAL_NODE_TAINT_KEY, "operator": "Exists"}, *mine])
    pod["metadata"]["annotations"] = {}
    assert remote_pod_spec(pod, **IDS)["tolerations"] == mine


# -- item 6 --------------------------------------------------------------------------------------
def test_node_address_must_be_an_ip(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["virtual-kubelet", "--home-cluster-id", "h", "--foreign-cluster-id", "f", "--node-address", "my-host"])
    assert "--node-address: not an IP address: 'my-host'" in capsys.readouterr().err


def test_a_packed_shadowpod_gives_back_its_spec_and_keeps_its_applied_hash() -> None:
    """Informers keep ShadowPods packed; what reads one sees the same spec and hash."""
    body = shadow_body()
    kept = stored(body)
    assert pod_spec_of(kept) == body["spec"]["pod"] == pod_spec_of(ShadowPodResource.from_dict(body))
    assert applied_hash(kept) == applied_hash(ShadowPodResource.from_dict(body)), "recorded hashes stay valid"
