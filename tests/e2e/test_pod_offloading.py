"""Pods offloaded through the virtual nodes, end to end (docs/reflection.md and 004).

The vanilla scheduler places pods on the virtual nodes; the virtual kubelets turn them into
ShadowPods in the twin namespaces; the foreign agents run them; status comes back home.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any, cast

import pytest
from lightkube import Client
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from liqo_stack.dev.external_runtime import ExternalRuntime
from runtime.api import names
from runtime.api.resources import ShadowPodResource
from tests.support.kube import (
    VIRTUAL_NODES,
    all_running,
    deploy_running,
    get_or_none,
    home_pods,
    home_view,
    metric_samples,
    pod_on_each_virtual_node,
    queue_drained,
    remote_pod,
    restarts,
    wait_until,
)

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]


def shadow_phase_is(client: Client, namespace: str, name: str, phase: str) -> bool:
    found: Any = client.get(ShadowPodResource, name, namespace=namespace)
    return bool((found.get("status") or {}).get("phase") == phase)


def phase_is(client: Client, namespace: str, name: str, phase: str) -> bool:
    found: Any = client.get(Pod, name, namespace=namespace)
    return bool(found.status and found.status.phase == phase)


def replaced(client: Client, namespace: str, name: str, uid: str) -> bool:
    """The pod is there again, a new one."""
    found: Any = remote_pod(client, namespace, name)
    return found is not None and found.metadata.uid != uid


def foreign_requests(url: str, cluster_id: str) -> dict[tuple[str, str], float]:
    """The requests a virtual kubelet has sent to its foreign cluster since it started: (method, resource) -> count."""
    return {
        (dict(labels)["method"], dict(labels)["resource"]): value
        for labels, value in metric_samples(url, "liqo_api_requests_total").items()
        if dict(labels)["cluster"] == cluster_id
    }


def test_the_scheduler_spreads_pods_over_both_virtual_nodes_and_they_run_remotely(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    running = deploy_running(home, offloaded, "spread", 6)
    placed = {cast(Any, p.spec).nodeName for p in running}
    assert placed == set(VIRTUAL_NODES.values())
    for pod in running:
        cluster_id = cast(Any, pod.spec).nodeName.removeprefix("liqo-")
        remote = remote_pod(foreign[cluster_id], f"{offloaded}-home", cast(Any, pod.metadata).name)
        assert remote is not None and remote.status and remote.status.phase == "Running"
        assert cast(Any, remote.metadata).labels[names.ORIGIN_LABEL] == "home"
        assert cast(Any, pod.status).podIP == home_view(home, cluster_id, cast(str, remote.status.podIP))


def test_a_remote_pod_deleted_by_hand_comes_back_and_counts_as_a_restart(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    pod = deploy_running(home, offloaded, "resilient", 1)[0]
    name, cluster_id = pod.metadata.name, pod.spec.nodeName.removeprefix("liqo-")
    twin_client, twin = foreign[cluster_id], f"{offloaded}-home"
    first = remote_pod(twin_client, twin, name)
    assert first is not None and restarts(pod) == 0
    twin_client.delete(Pod, name, namespace=twin, grace_period=0)

    def recreated() -> bool:
        again: Any = remote_pod(twin_client, twin, name)
        return bool(again and again.metadata.uid != cast(Any, first).metadata.uid and again.status.phase == "Running")

    wait_until(recreated, 60, "remote pod recreated")
    wait_until(lambda: restarts(home.get(Pod, name, namespace=offloaded)) == 1, 30, "home restart count 1")


def test_deleting_the_home_pod_deletes_the_remote_one(offloaded: str, home: Client, foreign: dict[str, Client]) -> None:
    pod = deploy_running(home, offloaded, "leaving", 1)[0]
    name, cluster_id = pod.metadata.name, pod.spec.nodeName.removeprefix("liqo-")
    home.delete(Pod, name, namespace=offloaded)
    wait_until(lambda: remote_pod(foreign[cluster_id], f"{offloaded}-home", name) is None, 60, "remote pod deleted")
    wait_until(lambda: not any(p.metadata.name == name for p in home_pods(home, offloaded, "leaving")), 60, "gone")  # type: ignore[union-attr]


def test_a_pod_forced_onto_a_virtual_node_of_a_namespace_not_offloaded_backs_off(home: Client, offloaded: str) -> None:
    toleration = {"key": names.VIRTUAL_NODE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}
    body = {
        "metadata": {"name": "forced", "namespace": "default"},
        "spec": {
            "nodeName": VIRTUAL_NODES["foreign-1"],
            "tolerations": [toleration],
            "containers": [{"name": "app", "image": "nginx"}],
        },
    }
    home.create(cast(Pod, Pod.from_dict(body)))
    try:
        wait_until(
            lambda: (
                (s := home.get(Pod, "forced", namespace="default").status) is not None
                and s.reason == "OffloadingBackOff"
                and s.phase == "Pending"
            ),
            30,
            "pod Pending with reason OffloadingBackOff",
        )
    finally:
        home.delete(Pod, "forced", namespace="default", grace_period=0)


def test_deleting_the_home_pod_passes_its_grace_period_on(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    pod = deploy_running(home, offloaded, "graceful", 1)[0]
    name, cluster_id = pod.metadata.name, pod.spec.nodeName.removeprefix("liqo-")
    twin = f"{offloaded}-home"
    remote = remote_pod(foreign[cluster_id], twin, name)
    assert remote is not None
    seen: list[int | None] = []  # deletionGracePeriodSeconds of the remote pod, event by event

    def watch() -> None:
        events = foreign[cluster_id].watch(
            Pod,
            namespace=twin,
            fields={"metadata.name": name},
            resource_version=cast(Any, remote.metadata).resourceVersion,
        )
        for kind, obj in events:
            seen.append(cast(Any, obj.metadata).deletionGracePeriodSeconds)
            if kind == "DELETED":
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    home.delete(Pod, name, namespace=offloaded, grace_period=7)
    watcher.join(60)
    assert not watcher.is_alive(), "the remote pod was not deleted"
    assert 7 in seen, f"remote pod deleted with grace periods {seen}, not the home pod's 7 s"


def test_a_jobs_pods_complete_and_are_never_run_again(offloaded: str, home: Client, foreign: dict[str, Client]) -> None:
    template = {
        "metadata": {"labels": {"app": "batch"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox", "command": ["true"]}]},
    }
    job_body = {
        "metadata": {"name": "batch", "namespace": offloaded},
        "spec": {"completions": 2, "parallelism": 2, "template": template},
    }
    home.create(cast(Job, Job.from_dict(job_body)))
    pods = wait_until(lambda: all_running(home, offloaded, "batch", 2), 90, "the Job's 2 pods Running")
    twin = f"{offloaded}-home"
    placed = {cast(Any, p).metadata.name: cast(Any, p).spec.nodeName.removeprefix("liqo-") for p in pods}
    # kwok completes only pods a Job owns; remote pods belong to their ShadowPods, so the test plays
    # the foreign kubelet: the containers exit 0.
    for name, cluster_id in placed.items():
        exited = {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}, "ready": False, "restartCount": 0}
        status = {"phase": "Succeeded", "containerStatuses": [{"name": "work", "image": "busybox", **exited}]}
        foreign[cluster_id].patch(Pod.Status, name, {"status": status}, namespace=twin, patch_type=PatchType.MERGE)
    wait_until(
        lambda: (cast(Any, home.get(Job, "batch", namespace=offloaded)).status.succeeded or 0) == 2, 60, "Job complete"
    )
    finished = {cast(Any, p).metadata.name: cast(Any, p).status.phase for p in home_pods(home, offloaded, "batch")}
    assert finished == dict.fromkeys(placed, "Succeeded")
    for name, cluster_id in placed.items():  # the agent has recorded the pod as finished
        wait_until(partial(shadow_phase_is, foreign[cluster_id], twin, name, "Succeeded"), 30, f"{name} Succeeded")
    sentinels = pod_on_each_virtual_node(home, offloaded, "sentinel", "c")
    old_uids = {c: cast(Any, remote_pod(foreign[c], twin, n)).metadata.uid for c, n in sentinels.items()}
    for name, cluster_id in placed.items():  # a finished pod removed by hand stays gone
        foreign[cluster_id].delete(Pod, name, namespace=twin, grace_period=0)
    # Sentinel: a running pod deleted by hand afterwards, which each agent does bring back. The
    # agent's one Pod watch delivers the deletes in order into a FIFO queue, and a finished pod's
    # reconcile returns without awaiting: once the sentinel is back, the finished ones were decided.
    for cluster_id, name in sentinels.items():
        foreign[cluster_id].delete(Pod, name, namespace=twin, grace_period=0)
    for cluster_id, name in sentinels.items():
        wait_until(partial(replaced, foreign[cluster_id], twin, name, old_uids[cluster_id]), 60, f"{name} back")
    assert all(remote_pod(foreign[c], twin, name) is None for name, c in placed.items())
    assert {cast(Any, p).metadata.name for p in home_pods(home, offloaded, "batch")} == set(placed)


def test_a_pod_deleted_at_home_while_its_virtual_kubelet_is_down_goes_from_the_foreign_cluster_once_it_is_back(
    offloaded: str, runtime: ExternalRuntime, home: Client, foreign: dict[str, Client]
) -> None:
    """Nothing at home names the pods any more when the kubelet comes back: their ShadowPods and remote
    pods, found in the twins, go all the same."""
    twin = f"{offloaded}-home"
    pods = pod_on_each_virtual_node(home, offloaded, "gone-while-away", "c")
    for cluster_id in VIRTUAL_NODES:
        runtime.kill(f"kubelet-{cluster_id}")
    try:
        for cluster_id, name in pods.items():
            home.delete(Pod, name, namespace=offloaded, grace_period=0)  # gone at once: no kubelet to release it
            assert get_or_none(foreign[cluster_id], ShadowPodResource, name, twin), "still there, the kubelet down"
    finally:
        for cluster_id in VIRTUAL_NODES:
            runtime.start(f"kubelet-{cluster_id}")

    def gone() -> bool:
        return all(
            get_or_none(foreign[cluster_id], ShadowPodResource, name, twin) is None
            and get_or_none(foreign[cluster_id], Pod, name, twin) is None
            for cluster_id, name in pods.items()
        )

    wait_until(gone, 60, "their ShadowPods and remote pods deleted")


def test_a_restarted_virtual_kubelet_keeps_every_remote_pod(
    offloaded: str, runtime: ExternalRuntime, home: Client, foreign: dict[str, Client]
) -> None:
    deploy_running(home, offloaded, "steady", 100, timeout=240)
    twin = f"{offloaded}-home"

    def remote_uids() -> dict[str, str]:
        return {
            f"{cluster_id}/{cast(Any, p).metadata.name}": str(cast(Any, p).metadata.uid)
            for cluster_id, client in foreign.items()
            for p in client.list(Pod, namespace=twin, labels={"app": "steady"})
        }

    before = remote_uids()
    assert len(before) == 100
    for cluster_id in VIRTUAL_NODES:
        runtime.kill(f"kubelet-{cluster_id}")  # returns once the process is gone
    for cluster_id in VIRTUAL_NODES:
        runtime.start(f"kubelet-{cluster_id}")
    # Sentinels: each restarted kubelet ready (its home informers synced), then a pod created after
    # that, on each virtual node, Running at home, then its pod queue drained. Every steady pod's
    # reconcile after the restart has then begun, and the damage one could do (deleting a ShadowPod
    # or a remote pod, creating a ShadowPod again) is a request to the foreign cluster, counted as sent.
    for cluster_id in VIRTUAL_NODES:
        wait_until(partial(runtime.ready, f"kubelet-{cluster_id}"), 60, f"kubelet-{cluster_id} ready again")
    for cluster_id, node in VIRTUAL_NODES.items():
        body = {
            "metadata": {"name": f"after-restart-{cluster_id}", "namespace": offloaded},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [{"name": "c", "image": "x"}]},
        }
        home.create(cast(Pod, Pod.from_dict(body)))
    for cluster_id in VIRTUAL_NODES:
        name = f"after-restart-{cluster_id}"
        wait_until(partial(phase_is, home, offloaded, name, "Running"), 90, f"{name} Running")
    for cluster_id in VIRTUAL_NODES:
        url = cast(str, runtime.probes_url(f"kubelet-{cluster_id}"))
        wait_until(partial(queue_drained, url, "pods"), 60, f"kubelet-{cluster_id}'s pod queue drained")
        sent = foreign_requests(url, cluster_id)
        deletes = {k: v for k, v in sent.items() if k[0] == "DELETE" and k[1] in ("pods", "shadowpods") and v}
        assert not deletes, f"{cluster_id}: a restarted kubelet deleted {deletes}"
        assert sent.get(("POST", "shadowpods"), 0) == 1, f"{cluster_id}: only the new pod's ShadowPod created"
    assert remote_uids() == before
    assert all_running(home, offloaded, "steady", 100) is not None
