"""An offloaded pod's life after its creation, end to end (docs/offloading.md, 002, 003).

What happens when its namespace is unoffloaded, when the remote status loses fields, when the home
pod is updated, when the foreign cluster refuses it, when its remote pod is recreated after
restarts, which hostIP it shows, which tolerations it keeps, how anti-affinity presets spread
remote pods, and that a new pod offloading strategy leaves running pods alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, cast

import pytest
from lightkube import ApiError, Client
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Event, Namespace, Node, Pod, ResourceQuota
from lightkube.types import PatchType

from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.workloads import apply_deployment, example_deployment
from runtime.api import names
from runtime.api.resources import NamespaceOffloadingResource, ShadowPodResource
from tests.support.kube import (
    VIRTUAL_NODES,
    all_running,
    create_namespace,
    deploy_running,
    get_or_none,
    home_pods,
    offload,
    pod_on_each_virtual_node,
    queue_drained,
    remote_pod,
    restarts,
    unoffload,
    wait_phase,
    wait_until,
)

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

TWIN_SUFFIX = "-home"  # DefaultName twins: <namespace>-<home cluster id>


def bare_pod(name: str, namespace: str, **spec: Any) -> Pod:
    body = {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "containers": [{"name": "web", "image": "nginx:1.27", "resources": {"requests": {"cpu": "50m"}}}],
            **spec,
        },
    }
    return cast(Pod, Pod.from_dict(body))


def get_pod(client: Client, namespace: str, name: str) -> Any:
    return get_or_none(client, Pod, name, namespace)


def running_pod(home: Client, namespace: str, name: str, timeout: float = 60, **spec: Any) -> Any:
    home.create(bare_pod(name, namespace, **spec))
    return wait_until(
        lambda: (p := get_pod(home, namespace, name)) is not None and p.status.phase == "Running" and p,
        timeout,
        f"pod {name} Running at home",
    )


def cluster_of(pod: Any) -> str:
    return str(pod.spec.nodeName).removeprefix("liqo-")


@pytest.fixture
def own_namespace(runtime: ExternalRuntime, home: Client, unique_name: str) -> Iterator[str]:
    """A namespace of the test's own, offloaded with the Remote strategy to both clusters."""
    offload(home, unique_name, {"podOffloadingStrategy": "Remote"})
    wait_phase(home, unique_name, "Ready")
    yield unique_name
    if list(home.list(NamespaceOffloadingResource, namespace=unique_name)):
        unoffload(home, unique_name)


# -- item 1: unoffloading ends remote pods as a drain would --------------------------------------
def twin_pods_deleted_by_the_agent(client: Client, twin: str) -> None:
    """A twin's pods go as its namespace does, deleted by the foreign agent at once: gone before
    the namespace controller, which waits 5 s after a namespace's deletion before it deletes what is
    in it (namespaceDeletionGracePeriod, kube-controller-manager), has begun."""
    leaving: Any = wait_until(
        lambda: (n := cast(Any, get_or_none(client, Namespace, twin))) and n.metadata.deletionTimestamp and n,
        30,
        f"twin {twin} being deleted",
    )
    wait_until(lambda: not list(client.list(Pod, namespace=twin)), 30, f"no pod left in twin {twin}")
    # the timestamp has whole seconds: the namespace controller begins at least 5 s after it
    since = datetime.now(UTC) - leaving.metadata.deletionTimestamp
    assert since < timedelta(seconds=5), f"the pods of {twin} went {since} after it was deleted: not by the agent"


def test_unoffloading_deletes_controlled_pods_so_they_run_locally_and_fails_bare_ones(
    own_namespace: str, home: Client, foreign: dict[str, Client]
) -> None:
    ns = own_namespace
    offloaded = {p.metadata.name for p in deploy_running(home, ns, "drained", 3)}
    bare = running_pod(home, ns, "solo")
    assert bare.spec.nodeName in VIRTUAL_NODES.values()

    home.delete(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=ns)
    for client in foreign.values():
        twin_pods_deleted_by_the_agent(client, ns + TWIN_SUFFIX)
    unoffload(home, ns)

    def rescheduled_locally() -> list[Any] | None:
        pods = cast(list[Any], all_running(home, ns, "drained", 3))
        if not pods or {p.metadata.name for p in pods} & offloaded:
            return None
        return pods if all(p.spec.nodeName not in VIRTUAL_NODES.values() for p in pods) else None

    wait_until(rescheduled_locally, 120, "the Deployment's pods recreated and Running on physical nodes")
    # the old pods may still be terminating while the new ones run: deleted once their remote pods are
    wait_until(
        lambda: not {cast(Any, p).metadata.name for p in home_pods(home, ns, "drained")} & offloaded,
        60,
        "old pods deleted",
    )
    # the Deployment's status follows its pods a moment later (the deployment controller's sync)
    deployment = cast(
        Any,
        wait_until(
            lambda: (d := cast(Any, home.get(Deployment, "drained", namespace=ns))).status.readyReplicas == 3 and d,
            30,
            "the Deployment's status counting its 3 local pods ready",
        ),
    )
    assert deployment.status.readyReplicas == 3
    # its virtual kubelet ends it on its own: nothing above waited for that (gone counts as decided too)
    wait_until(
        lambda: (p := get_pod(home, ns, "solo")) is None or p.status.phase in ("Succeeded", "Failed"),
        60,
        "the bare pod ended by its virtual kubelet",
    )
    solo = get_pod(home, ns, "solo")
    assert solo is not None, "a bare pod is not deleted: nothing would bring it back"
    assert solo.status.phase == "Failed" and solo.status.reason == "OffloadingAborted"
    assert not any(c.type == "Ready" and c.status == "True" for c in solo.status.conditions or [])
    assert all(s.state.terminated is not None for s in solo.status.containerStatuses or [])


def test_deselecting_a_cluster_moves_its_pods_to_the_cluster_still_selected(own_namespace: str, home: Client) -> None:
    ns = own_namespace
    pods = deploy_running(home, ns, "moving", 4)
    leaving = {p.metadata.name for p in pods if p.spec.nodeName == VIRTUAL_NODES["foreign-1"]}
    assert leaving, "the scheduler spread the pods over both virtual nodes"
    us_west = {"key": "region", "operator": "In", "values": ["us-west"]}
    selector = {"nodeSelectorTerms": [{"matchExpressions": [us_west]}]}
    home.patch(
        NamespaceOffloadingResource,
        names.NAMESPACE_OFFLOADING_NAME,
        {"spec": {"clusterSelector": selector}},
        namespace=ns,
        patch_type=PatchType.MERGE,
    )

    def moved() -> bool:
        running = cast(list[Any] | None, all_running(home, ns, "moving", 4))
        return bool(
            running
            and not {p.metadata.name for p in running} & leaving
            and all(p.spec.nodeName == VIRTUAL_NODES["foreign-2"] for p in running)
        )

    wait_until(moved, 120, "the pods of foreign-1 replaced by pods on foreign-2")
    wait_until(
        lambda: not {cast(Any, p).metadata.name for p in home_pods(home, ns, "moving")} & leaving,
        60,
        "the pods that ran in foreign-1 deleted",
    )


# -- item 2: the home status is the remote one ---------------------------------------------------
def test_a_pod_that_backed_off_loses_the_reason_once_it_runs(
    runtime: ExternalRuntime, home: Client, unique_name: str
) -> None:
    """Forced onto a virtual node before its namespace was offloaded: OffloadingBackOff, then it runs."""
    ns = unique_name
    create_namespace(home, ns)
    toleration = {"key": names.VIRTUAL_NODE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}
    home.create(bare_pod("early", ns, nodeName=VIRTUAL_NODES["foreign-1"], tolerations=[toleration]))
    wait_until(lambda: cast(Any, get_pod(home, ns, "early")).status.reason == "OffloadingBackOff", 30, "pod backed off")
    home.create(
        NamespaceOffloadingResource.from_dict(
            {"metadata": {"name": names.NAMESPACE_OFFLOADING_NAME, "namespace": ns}, "spec": {}}
        )
    )
    try:
        wait_phase(home, ns, "Ready")
        pod = wait_until(lambda: (p := get_pod(home, ns, "early")).status.phase == "Running" and p, 60, "pod Running")
        assert pod.status.reason is None and pod.status.message is None, "the back-off reason is gone"
        types = {c.type for c in pod.status.conditions}
        assert {"Ready", "ContainersReady", "PodScheduled"} <= types
    finally:
        unoffload(home, ns)


def test_fields_the_remote_status_lost_are_cleared_at_home(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    pod = running_pod(home, offloaded, "hygiene")
    twin, client = offloaded + TWIN_SUFFIX, foreign[cluster_of(pod)]
    note = {"status": {"reason": "Testing", "message": "set on the remote pod"}}
    client.patch(Pod.Status, "hygiene", note, namespace=twin, patch_type=PatchType.MERGE)
    wait_until(lambda: get_pod(home, offloaded, "hygiene").status.reason == "Testing", 30, "reason reflected")
    gone = {"status": {"reason": None, "message": None}}
    client.patch(Pod.Status, "hygiene", gone, namespace=twin, patch_type=PatchType.MERGE)
    wait_until(
        lambda: (s := get_pod(home, offloaded, "hygiene").status).reason is None and s.message is None,
        30,
        "reason and message cleared at home",
    )


# -- item 3: updates of the live home pod reach the remote pod ----------------------------------
def test_labels_annotations_image_deadline_tolerations_and_resize_reach_the_remote_pod(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    pod = running_pod(home, offloaded, "living")
    twin, client = offloaded + TWIN_SUFFIX, foreign[cluster_of(pod)]
    first: Any = remote_pod(client, twin, "living")
    uid = first.metadata.uid
    # labels the foreign cluster put on its pod (topology labels at binding) are not ours to remove
    foreign_labels = {k: v for k, v in first.metadata.labels.items() if k.startswith("topology.kubernetes.io/")}
    toleration = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}
    patch = {
        "metadata": {"labels": {"tier": "gold"}, "annotations": {"note": "hello"}},
        "spec": {
            "containers": [{"name": "web", "image": "nginx:1.28"}],
            "activeDeadlineSeconds": 36000,
            "tolerations": [*(cast(Any, t).to_dict() for t in pod.spec.tolerations or []), toleration],
        },
    }
    home.patch(Pod, "living", patch, namespace=offloaded, patch_type=PatchType.STRATEGIC)

    def remote_updated() -> bool:
        remote: Any = remote_pod(client, twin, "living")
        return bool(
            remote
            and remote.metadata.labels.get("tier") == "gold"
            and (remote.metadata.annotations or {}).get("note") == "hello"
            and remote.spec.containers[0].image == "nginx:1.28"
            and remote.spec.activeDeadlineSeconds == 36000
            and any(t.key == "example.com/maintenance" for t in remote.spec.tolerations or [])
        )

    wait_until(remote_updated, 30, "labels, annotation, image, deadline and toleration on the remote pod")
    home.patch(Pod, "living", {"metadata": {"labels": {"tier": None}}}, namespace=offloaded)
    wait_until(lambda: "tier" not in cast(Any, remote_pod(client, twin, "living")).metadata.labels, 30, "label removed")
    labels = cast(Any, remote_pod(client, twin, "living")).metadata.labels
    assert foreign_labels.items() <= labels.items(), "the foreign cluster's labels stay"
    # An API server accepts a resize only for a pod whose kubelet reports the containers' actuated
    # resources; kwok does not, so the test plays the foreign kubelet, and the report comes home.
    container = cast(Any, remote_pod(client, twin, "living")).status.containerStatuses[0].to_dict()
    actuated = {**container, "resources": {"requests": {"cpu": "50m"}}}
    client.patch(
        Pod.Status, "living", {"status": {"containerStatuses": [actuated]}}, namespace=twin, patch_type=PatchType.MERGE
    )
    wait_until(
        lambda: cast(Any, get_pod(home, offloaded, "living")).status.containerStatuses[0].resources is not None,
        30,
        "the actuated resources reported at home",
    )
    resize = {"spec": {"containers": [{"name": "web", "resources": {"requests": {"cpu": "80m"}}}]}}
    home.patch(Pod.Resize, "living", resize, namespace=offloaded, patch_type=PatchType.STRATEGIC)
    wait_until(
        lambda: cast(Any, remote_pod(client, twin, "living")).spec.containers[0].resources.requests["cpu"] == "80m",
        30,
        "remote pod resized",
    )
    assert cast(Any, remote_pod(client, twin, "living")).metadata.uid == uid, "updated in place, not recreated"


# -- item 4: a remote create the foreign cluster refuses shows at home ---------------------------
def test_a_pod_the_foreign_cluster_refuses_shows_why_at_home_and_runs_once_allowed(
    own_namespace: str, home: Client, foreign: dict[str, Client]
) -> None:
    ns, twin = own_namespace, own_namespace + TWIN_SUFFIX
    quota = cast(
        ResourceQuota,
        ResourceQuota.from_dict({"metadata": {"name": "no-pods", "namespace": twin}, "spec": {"hard": {"pods": "0"}}}),
    )
    foreign["foreign-1"].create(quota)  # the foreign cluster's admin forbids pods in the twin
    wait_until(
        lambda: cast(Any, foreign["foreign-1"].get(ResourceQuota, "no-pods", namespace=twin)).status or {},
        30,
        "the quota in force",
    )
    home.create(bare_pod("refused", ns, nodeName=VIRTUAL_NODES["foreign-1"]))

    def shadow_status() -> dict[str, Any]:
        try:
            found = foreign["foreign-1"].get(ShadowPodResource, "refused", namespace=twin)
        except ApiError:
            return {}
        return dict(found.get("status") or {})

    wait_until(
        lambda: (s := shadow_status()).get("reason") == "CreateFailed" and "exceeded quota" in s.get("message", ""),
        30,
        "the foreign API server's refusal recorded on the ShadowPod",
    )

    def warning() -> Any:
        events = home.list(Event, namespace=ns, fields={"involvedObject.name": "refused"})
        return next((e for e in events if e.type == "Warning" and "exceeded quota" in (e.message or "")), None)

    event = wait_until(warning, 30, "a Warning event on the home pod with the foreign API server's message")
    assert "foreign-1" in event.message
    foreign["foreign-1"].delete(ResourceQuota, "no-pods", namespace=twin)
    wait_until(lambda: get_pod(home, ns, "refused").status.phase == "Running", 120, "pod Running once allowed")
    wait_until(lambda: "reason" not in shadow_status(), 30, "failure cleared from the ShadowPod")


# -- item 5: restarts never go down ------------------------------------------------------------
def test_restarts_keep_growing_across_a_remote_pod_recreation(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    pod = running_pod(home, offloaded, "restarting")
    twin, client = offloaded + TWIN_SUFFIX, foreign[cluster_of(pod)]
    remote: Any = remote_pod(client, twin, "restarting")
    container = remote.status.containerStatuses[0].to_dict()
    status = {"status": {"containerStatuses": [{**container, "restartCount": 4}]}}
    client.patch(Pod.Status, "restarting", status, namespace=twin, patch_type=PatchType.MERGE)
    wait_until(lambda: restarts(home.get(Pod, "restarting", namespace=offloaded)) == 4, 30, "4 restarts at home")
    client.delete(Pod, "restarting", namespace=twin, grace_period=0)
    wait_until(
        lambda: (
            (r := cast(Any, remote_pod(client, twin, "restarting"))) is not None
            and r.metadata.uid != remote.metadata.uid
            and r.status.phase == "Running"
        ),
        60,
        "remote pod recreated",
    )
    seen: list[int] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        seen.append(restarts(home.get(Pod, "restarting", namespace=offloaded)))
        time.sleep(0.2)
    assert min(seen) >= 4, f"the restart count went down: {seen}"
    wait_until(
        lambda: restarts(home.get(Pod, "restarting", namespace=offloaded)) == 5,
        30,
        "5 restarts at home: 4 of the old remote pod + its recreation",
    )


# -- item 6: hostIP is the virtual kubelet's address -------------------------------------------
def test_host_ip_and_internal_ip_are_the_virtual_kubelets_address(
    offloaded: str, runtime: ExternalRuntime, home: Client
) -> None:
    address = "127.0.0.7"
    pod = running_pod(home, offloaded, "addressed", nodeName=VIRTUAL_NODES["foreign-1"])
    component = "kubelet-foreign-1"
    runtime.extra_args[component] = ["--node-address", address]
    runtime.stop(component)
    runtime.start(component)
    try:

        def internal_ip() -> str | None:
            node: Any = home.get(Node, VIRTUAL_NODES["foreign-1"])
            return next((a.address for a in node.status.addresses if a.type == "InternalIP"), None)

        wait_until(lambda: internal_ip() == address, 60, f"Node InternalIP {address}")
        wait_until(
            lambda: (
                (s := get_pod(home, offloaded, "addressed").status).hostIP == address
                and [h.ip for h in s.hostIPs] == [address]
            ),
            60,
            f"hostIP {address}",
        )
        assert pod.status.hostIP == "127.0.0.1", "the default address in external mode"
    finally:
        del runtime.extra_args[component]
        runtime.stop(component)
        runtime.start(component)


# -- item 14: the user's tolerationSeconds reach the remote pod ---------------------------------
def test_the_users_not_ready_and_unreachable_tolerations_are_kept(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    tolerations = [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 45},
    ]
    pod = running_pod(home, offloaded, "tolerant", tolerations=tolerations)
    remote: Any = remote_pod(foreign[cluster_of(pod)], offloaded + TWIN_SUFFIX, "tolerant")
    seconds = {t.key: t.tolerationSeconds for t in remote.spec.tolerations}
    assert seconds["node.kubernetes.io/not-ready"] == 30
    assert seconds["node.kubernetes.io/unreachable"] == 45


# -- docs/reflection.md: anti-affinity presets spread remote pods over the foreign nodes -----------------
def test_a_hard_anti_affinity_preset_puts_each_remote_pod_on_its_own_foreign_node(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    deployment = cast(Any, example_deployment("spread-hard", offloaded, 3))
    template = deployment.spec.template
    template.metadata.annotations = {names.ANTI_AFFINITY_PRESET_ANNOTATION: "hard"}
    # every replica to foreign-1, which has 2 nodes: the third cannot be placed there
    template.spec.nodeSelector = {names.REMOTE_CLUSTER_ID_LABEL: "foreign-1"}
    apply_deployment(home, deployment)
    twin, client = offloaded + TWIN_SUFFIX, foreign["foreign-1"]

    def placed() -> tuple[list[Any], list[Any]] | None:
        remote = list(client.list(Pod, namespace=twin, labels={"app": "spread-hard"}))
        running = [p for p in remote if p.status and p.status.phase == "Running"]
        pending = [p for p in remote if p.status and p.status.phase == "Pending"]
        return (running, pending) if len(running) == 2 and len(pending) == 1 else None

    running, pending = wait_until(placed, 90, "2 remote pods Running, 1 Pending")
    assert len({p.spec.nodeName for p in running}) == 2, "each on its own foreign node"
    required = running[0].spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution
    assert required[0].topologyKey == "kubernetes.io/hostname"
    name = pending[0].metadata.name

    def unschedulable_at_home() -> bool:
        conditions = cast(Any, home.get(Pod, name, namespace=offloaded)).status.conditions or []
        return any(c.type == "PodScheduled" and c.status == "False" for c in conditions)

    try:
        wait_until(unschedulable_at_home, 30, "the remote scheduler's verdict shown at home")
    except TimeoutError as err:  # what each side shows, for a failure to be read from its report alone
        home_status = cast(Any, home.get(Pod, name, namespace=offloaded)).status
        remote_status = cast(Any, client.get(Pod, name, namespace=twin)).status
        raise AssertionError(f"{err}; home: {home_status.to_dict()}; remote: {remote_status.to_dict()}") from err


def test_a_soft_anti_affinity_preset_spreads_remote_pods(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    deployment = cast(Any, example_deployment("spread-soft", offloaded, 2))
    template = deployment.spec.template
    template.metadata.annotations = {names.ANTI_AFFINITY_PRESET_ANNOTATION: "soft"}
    template.spec.nodeSelector = {names.REMOTE_CLUSTER_ID_LABEL: "foreign-2"}
    apply_deployment(home, deployment)
    wait_until(lambda: all_running(home, offloaded, "spread-soft", 2), 90, "2 pods Running")
    remote = list(foreign["foreign-2"].list(Pod, namespace=offloaded + TWIN_SUFFIX, labels={"app": "spread-soft"}))
    assert len({cast(Any, p).spec.nodeName for p in remote}) == 2
    preferred = cast(Any, remote[0]).spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution
    assert preferred[0].podAffinityTerm.labelSelector.matchLabels["app"] == "spread-soft"


# -- docs/offloading.md: a new pod offloading strategy applies to new pods only ---------------------------
def kubelets_past_offloading_changes(home: Client, runtime: ExternalRuntime, namespace: str) -> None:
    """A sentinel: `namespace` offloaded now, a pod on each virtual node in it Running, then each
    virtual kubelet's pod queue drained; the namespace goes again.

    Each kubelet reads NamespaceOffloadings through one watch: it got every earlier change (which
    requeued that namespace's pods) before this namespace's Ready status, without which the sentinel
    pod is not offloaded (once that status comes, its namespace is requeued, behind them). With the
    queue drained every requeued pod's reconcile has begun, and its first await is its first write.
    The namespace is deleted without waiting: the controllers withdraw its offloading meanwhile."""
    offload(home, namespace, {"podOffloadingStrategy": "Remote"})
    try:
        wait_phase(home, namespace, "Ready")
        pod_on_each_virtual_node(home, namespace, "sentinel", "c")
        for cluster_id in VIRTUAL_NODES:
            url = runtime.probes_url(f"kubelet-{cluster_id}")
            assert url is not None
            wait_until(partial(queue_drained, url, "pods"), 60, f"kubelet-{cluster_id}'s pod queue drained")
    finally:
        home.delete(Namespace, namespace)


def test_changing_the_pod_offloading_strategy_leaves_running_pods_alone(
    own_namespace: str, home: Client, foreign: dict[str, Client], runtime: ExternalRuntime
) -> None:
    ns, twin = own_namespace, own_namespace + TWIN_SUFFIX
    before = {p.metadata.name: p.metadata.uid for p in deploy_running(home, ns, "steadfast", 2)}

    def remote_uids() -> dict[str, str]:
        return {
            cast(Any, p).metadata.name: cast(Any, p).metadata.uid
            for client in foreign.values()
            for p in client.list(Pod, namespace=twin, labels={"app": "steadfast"})
        }

    remote_before = remote_uids()
    assert set(remote_before) == set(before)
    home.patch(
        NamespaceOffloadingResource,
        names.NAMESPACE_OFFLOADING_NAME,
        {"spec": {"podOffloadingStrategy": "Local"}},
        namespace=ns,
        patch_type=PatchType.MERGE,
    )
    wait_until(
        lambda: (
            (o := cast(Any, home.get(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=ns)))
            .get("status", {})
            .get("observedGeneration")
            == o.metadata.generation
        ),
        30,
        "the new strategy observed",
    )
    deployment = example_deployment("steadfast", ns, 3)
    apply_deployment(home, deployment)
    pods = cast(list[Any], wait_until(lambda: all_running(home, ns, "steadfast", 3), 90, "3 pods Running"))
    new = [p for p in pods if p.metadata.name not in before]
    assert len(new) == 1 and new[0].spec.nodeName not in VIRTUAL_NODES.values(), "a new pod runs locally"
    kubelets_past_offloading_changes(home, runtime, f"{ns[:50]}-sentinel")
    now = cast(list[Any], home_pods(home, ns, "steadfast"))
    still = {p.metadata.name: p.metadata.uid for p in now if p.metadata.name in before}
    assert still == before, "the running remote pods are neither evicted nor recreated"
    assert all(p.status.phase == "Running" for p in now), "nor failed"
    assert remote_uids() == remote_before
