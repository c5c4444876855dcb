"""A virtual node over its life: it shows exactly what is declared and advertised, follows run-time
changes, and an unreachable foreign cluster is a NotReady node, with the standard taint-based eviction.

Declared changes go the user's way: the stack config changed, then `pulumi up`. Capacity follows
docs/offloading.md: the share of what the foreign cluster has free, so it shrinks when the foreign cluster's
own pods consume and loses a resource the cluster stops offering. The `installed` stack checks the
foreign API server every 2 s and gives up after 2 failures.
"""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any, cast

import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node, Pod
from lightkube.resources.core_v1 import Event as CoreEvent
from lightkube.resources.rbac_authorization_v1 import RoleBinding
from lightkube.utils.quantity import parse_quantity
from pulumi import automation as auto

from liqo_stack.declaring.components.destroy_guard import CONSENT_VARIABLE
from liqo_stack.dev.clusters import DevEnvironment, NodeShape, fake_node_manifest
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from liqo_stack.dev.workloads import apply_deployment, example_deployment
from runtime.api import names
from runtime.api.nodeaccess import NOT_READY_TAINT, UNREACHABLE_TAINT
from runtime.api.plan import shared_resources
from runtime.api.resources import ResourceAdvertisementResource, VirtualNodeResource
from runtime.virtualkubelet.pods import BACKOFF_REASON
from runtime.virtualkubelet.removal import REMOVED_REASON
from tests.support.kube import (
    VIRTUAL_NODES,
    all_running,
    create_namespace,
    deploy_running,
    get_or_none,
    home_pods,
    metric_samples,
    node_ready,
    remote_pod,
    wait_phase,
    wait_until,
)

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

HEALTH_CHECK_INTERVAL, FAILURE_THRESHOLD = 2, 2  # as the `installed` stack configures them
NOT_READY_BOUND = HEALTH_CHECK_INTERVAL * (FAILURE_THRESHOLD + 1) + 5  # a check's own timeout, and the write


# -- helpers ----------------------------------------------------------------------------------
def node_of(home: Client, cluster_id: str) -> Any:
    return home.get(Node, VIRTUAL_NODES[cluster_id])


def labels_of(home: Client, cluster_id: str) -> dict[str, str]:
    return dict(node_of(home, cluster_id).metadata.labels or {})


def taints_of(home: Client, cluster_id: str) -> set[tuple[str, str | None, str]]:
    return {(t.key, t.value, t.effect) for t in node_of(home, cluster_id).spec.taints or []}


def capacity_of(home: Client, cluster_id: str) -> dict[str, str]:
    status = node_of(home, cluster_id).status
    assert dict(status.capacity or {}) == dict(status.allocatable or {})
    return dict(status.capacity or {})


def advertised(foreign: Client, cluster_id: str) -> dict[str, str]:
    found = foreign.get(ResourceAdvertisementResource, cluster_id, namespace=names.tenant_namespace("home"))
    return dict((found.get("spec") or {}).get("resources") or {})


def expected_capacity(
    foreign: Client, cluster_id: str, percentage: int = 90, fixed: dict[str, str] | None = None
) -> dict[str, str]:
    return shared_resources(advertised(foreign, cluster_id), percentage, fixed).capacity


def ready_condition(home: Client, cluster_id: str) -> Any:
    conditions = node_of(home, cluster_id).status.conditions or []
    return next(c for c in conditions if c.type == "Ready")


def stack_up(stack: auto.Stack, config: dict[str, Any], unoffloading: str | None = None) -> auto.UpResult:
    """`pulumi up` with `config`; `unoffloading`: a namespace the stack did not declare that it may unoffload
    (a peering's removal is refused while one has twins there: components/destroy_guard.py)."""
    PulumiEnvironment.set_liqo_config(stack, config)
    if unoffloading is None:
        return stack.up(on_output=print)
    before = stack.workspace.env_vars
    stack.workspace.env_vars = {**before, CONSENT_VARIABLE: unoffloading}
    try:
        return stack.up(on_output=print)
    finally:
        stack.workspace.env_vars = before


def edit_node(
    home: Client,
    node_name: str,
    taints: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    labels: dict[str, str | None] | None = None,
) -> None:
    """What `kubectl taint|label node` does: read, change, write back unless someone wrote meanwhile."""
    for _ in range(10):
        node: Any = home.get(Node, node_name)
        metadata = {"resourceVersion": node.metadata.resourceVersion, "labels": labels or {}}
        patch = {"metadata": metadata, "spec": {"taints": taints([t.to_dict() for t in node.spec.taints or []])}}
        try:
            home.patch(Node, node_name, patch)
            return
        except ApiError as err:
            if err.status.code != 409:
                raise
    raise AssertionError(f"{node_name}: the edit conflicted 10 times in a row")


def health_checks(runtime: ExternalRuntime, cluster_id: str, count: int) -> None:
    """Until the virtual kubelet of `cluster_id` has run `count` more health checks (node.py: each
    GETs the foreign cluster's ResourceAdvertisement, and may change what the Node shows). Its
    advertisement informer's GETs count too, but it watches for 300 s at a time: at most one of them
    falls in a few checks."""
    url = runtime.probes_url(f"kubelet-{cluster_id}")
    assert url is not None

    def reads() -> float:
        samples = metric_samples(url, "liqo_api_requests_total")
        wanted = (("cluster", cluster_id), ("method", "GET"), ("resource", "resourceadvertisements"))
        return samples.get(wanted, 0)

    start = reads()
    wait_until(lambda: reads() >= start + count, count * HEALTH_CHECK_INTERVAL + 30, f"{count} health checks")


@pytest.fixture
def declared_again(installed: auto.Stack) -> Iterator[dict[str, Any]]:
    """The stack's config, given back after the test whatever it changed."""
    config = PulumiEnvironment.liqo_config(installed)
    try:
        yield json.loads(json.dumps(config))
    finally:
        if PulumiEnvironment.liqo_config(installed) != config:
            stack_up(installed, config)


# -- what the Node shows ----------------------------------------------------------------------
def test_the_node_shows_exactly_what_is_declared_and_follows_the_sharing_percentage_at_run_time(
    offloaded: str,
    home: Client,
    foreign: dict[str, Client],
    installed: auto.Stack,
    declared_again: dict[str, Any],
    runtime: ExternalRuntime,
) -> None:
    base = declared_again
    wait_until(
        lambda: expected_capacity(foreign["foreign-1"], "foreign-1") == capacity_of(home, "foreign-1"),
        60,
        "liqo-foreign-1 showing 90% of what foreign-1 has free",
    )

    changed = json.loads(json.dumps(base))
    first = changed["foreignClusters"][0]
    assert first["clusterId"] == "foreign-1"
    first["labels"] = {**first.get("labels", {}), "tier": "gold"}
    first["taints"] = [{"key": "example.com/dedicated", "value": "batch", "effect": "PreferNoSchedule"}]
    first["fixedResources"] = {"example.com/dongle": "3"}
    first["sharingPercentage"] = 50
    stack_up(installed, changed)
    dedicated = ("example.com/dedicated", "batch", "PreferNoSchedule")
    fixed = {"example.com/dongle": "3"}
    wait_until(
        lambda: (
            labels_of(home, "foreign-1").get("tier") == "gold"
            and dedicated in taints_of(home, "foreign-1")
            and capacity_of(home, "foreign-1") == expected_capacity(foreign["foreign-1"], "foreign-1", 50, fixed)
        ),
        30,
        "liqo-foreign-1 with the new label, taint, fixed resource and a 50% share",
    )

    # what a home administrator adds is theirs: it stays whatever the stack declares
    admin_taint = {"key": "example.com/maintenance", "effect": "NoSchedule"}
    edit_node(home, VIRTUAL_NODES["foreign-1"], lambda taints: [*taints, admin_taint], labels={"owner": "ops"})
    try:
        stack_up(installed, base)
        wait_until(
            lambda: (
                "tier" not in labels_of(home, "foreign-1")
                and dedicated not in taints_of(home, "foreign-1")
                and capacity_of(home, "foreign-1") == expected_capacity(foreign["foreign-1"], "foreign-1")
            ),
            30,
            "liqo-foreign-1 without the label, taint and fixed resource taken out, back to a 90% share",
        )
        assert labels_of(home, "foreign-1")["owner"] == "ops"
        assert ("example.com/maintenance", None, "NoSchedule") in taints_of(home, "foreign-1")
        assert (names.VIRTUAL_NODE_TAINT_KEY, "true", "NoExecute") in taints_of(home, "foreign-1")
        assert labels_of(home, "foreign-1")["region"] == "europe"
        # and, nothing changing, the virtual kubelet writes nothing (its Lease apart)
        version = node_of(home, "foreign-1").metadata.resourceVersion
        health_checks(runtime, "foreign-1", 3)
        assert node_of(home, "foreign-1").metadata.resourceVersion == version
    finally:
        key = admin_taint["key"]
        edit_node(
            home, VIRTUAL_NODES["foreign-1"], lambda ts: [t for t in ts if t["key"] != key], labels={"owner": None}
        )


def test_a_resource_that_leaves_the_advertisement_leaves_the_node(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    cluster = foreign["foreign-1"]
    gpu_node = fake_node_manifest("foreign-1", 7, NodeShape(cpu="8", memory="32Gi", gpus=4))
    gpu_name = cast(Any, gpu_node["metadata"])["name"]
    cluster.create(cast(Node, Node.from_dict(gpu_node)))
    try:
        wait_until(lambda: capacity_of(home, "foreign-1").get("nvidia.com/gpu") == "3", 30, "90% of 4 GPUs: 3")
    finally:
        cluster.delete(Node, gpu_name)
    wait_until(
        lambda: (
            capacity_of(home, "foreign-1") == expected_capacity(cluster, "foreign-1")
            and "nvidia.com/gpu" not in capacity_of(home, "foreign-1")
        ),
        30,
        "the GPUs gone with their node",
    )

    # every foreign node cordoned: nothing is offered, nothing can be scheduled there
    workers = [n.metadata.name for n in cluster.list(Node) if n.metadata and n.metadata.name]
    try:
        for name in workers:
            cluster.patch(Node, name, {"spec": {"unschedulable": True}})
        wait_until(lambda: capacity_of(home, "foreign-1") == {}, 30, "liqo-foreign-1 without any capacity")
    finally:
        for name in workers:
            cluster.patch(Node, name, {"spec": {"unschedulable": None}})
    wait_until(
        lambda: (c := capacity_of(home, "foreign-1")) and c == expected_capacity(cluster, "foreign-1"),
        30,
        "liqo-foreign-1 capacity back with its nodes",
    )


def test_remote_pods_consume_and_the_node_shrinks(offloaded: str, home: Client, foreign: dict[str, Client]) -> None:
    """docs/offloading.md: the foreign cluster's own pods take 4 cpu: the virtual node loses 90% of them."""
    cluster = foreign["foreign-1"]
    before = {r: parse_quantity(q) or Decimal(0) for r, q in capacity_of(home, "foreign-1").items()}
    namespace = "local-work"
    cluster.create(Namespace(metadata=ObjectMeta(name=namespace)))
    consumer = example_deployment("consumer", namespace, 1).to_dict()
    requests = {"cpu": "4", "memory": "8Gi"}
    consumer["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": requests}
    apply_deployment(cluster, cast(Deployment, Deployment.from_dict(consumer)))

    def shrunk_by(share: Decimal) -> bool:
        now = {r: parse_quantity(q) or Decimal(0) for r, q in capacity_of(home, "foreign-1").items()}
        consumed = {"cpu": Decimal(4), "memory": Decimal(8 * 2**30), "pods": Decimal(1)}
        return all(abs(before[r] - share * consumed[r] - now[r]) < 1 for r in consumed)

    try:
        wait_until(lambda: shrunk_by(Decimal("0.9")), 60, "liqo-foreign-1 smaller by 90% of the foreign pod's requests")
    finally:
        cluster.delete(Namespace, namespace)
    wait_until(lambda: shrunk_by(Decimal(0)), 60, "liqo-foreign-1 back to its size once the foreign pod is gone")


# -- an unreachable foreign cluster -------------------------------------------------------------
# what the node lifecycle controller puts on a NotReady node, and lifts once it is Ready again
NOT_READY_TAINTS = (NOT_READY_TAINT, UNREACHABLE_TAINT)


def tolerating(name: str, namespace: str, replicas: int, seconds: int) -> Deployment:
    manifest = example_deployment(name, namespace, replicas).to_dict()
    manifest["spec"]["template"]["spec"]["tolerations"] = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
        for key in NOT_READY_TAINTS
    ]
    return cast(Deployment, Deployment.from_dict(manifest))


def test_taint_based_eviction_after_not_ready_with_a_short_toleration(
    offloaded: str, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment
) -> None:
    """docs/offloading.md: a NotReady virtual node triggers the standard eviction by the pods' tolerations."""
    apply_deployment(home, tolerating("short-lived", offloaded, 4, 5))
    running: list[Any] = wait_until(lambda: all_running(home, offloaded, "short-lived", 4), 90, "4 pods Running")
    doomed = {p.metadata.name for p in running if p.spec.nodeName == VIRTUAL_NODES["foreign-2"]}
    assert doomed, "the scheduler spreads 4 pods over both virtual nodes"
    twin = f"{offloaded}-home"
    with dev_env.api_server_stopped("foreign-2"):
        stopped = time.monotonic()
        wait_until(lambda: not node_ready(home, VIRTUAL_NODES["foreign-2"]), NOT_READY_BOUND, "liqo-foreign-2 NotReady")
        assert ready_condition(home, "foreign-2").reason == "ForeignClusterUnreachable"

        def replaced() -> bool:
            pods = all_running(home, offloaded, "short-lived", 4)
            return pods is not None and all(p.spec.nodeName == VIRTUAL_NODES["foreign-1"] for p in pods)  # type: ignore[union-attr]

        wait_until(replaced, 90, "the pods of liqo-foreign-2 evicted and replaced on liqo-foreign-1")
        print(f"pods of liqo-foreign-2 replaced {time.monotonic() - stopped:.1f}s after its API server stopped")
        # As on a real unreachable node, an evicted pod is Terminating until its kubelet confirms:
        # its remote copy may still run (the ShadowPod keeps it), so it is never released blindly.
        leftovers = {p.metadata.name for p in home_pods(home, offloaded, "short-lived") if p.metadata.deletionTimestamp}  # type: ignore[union-attr]
        assert leftovers == doomed
    wait_until(lambda: node_ready(home, VIRTUAL_NODES["foreign-2"]), 30, "liqo-foreign-2 Ready again")

    def names_now() -> set[str]:
        return {cast(Any, p).metadata.name for p in home_pods(home, offloaded, "short-lived")}

    wait_until(lambda: not (names_now() & doomed), 60, "the evicted pods released once their cluster answers")
    wait_until(
        lambda: all(remote_pod(foreign["foreign-2"], twin, name) is None for name in doomed),
        60,
        "their remote pods deleted",
    )
    assert all_running(home, offloaded, "short-lived", 4) is not None


def lease_renewed_after(home: Client, cluster_id: str, moment: datetime.datetime) -> bool:
    lease = home.get(Lease, VIRTUAL_NODES[cluster_id], namespace="kube-node-lease")
    renewed = lease.spec.renewTime if lease.spec else None
    return renewed is not None and renewed > moment


def gone(home: Client, namespace: str, name: str) -> bool:
    try:
        home.get(Pod, name, namespace=namespace)
    except ApiError as err:
        return err.status.code == 404
    return False


def kubelet_acted_on_a_later_pod(home: Client, node_name: str, namespace: str) -> None:
    """A sentinel: a pod bound to the virtual node in a namespace not offloaded, until its virtual
    kubelet has marked it OffloadingBackOff. The kubelet's one watch of the pods on its node feeds
    one FIFO queue, and a reconcile's first await is its first write: once the sentinel is marked,
    every earlier pod event on the node has been decided. The namespace is deleted again."""
    create_namespace(home, namespace)
    try:
        body = {
            "metadata": {"name": "sentinel", "namespace": namespace},
            "spec": {
                "nodeName": node_name,
                "tolerations": [{"operator": "Exists"}],  # the node's NoExecute taints evict nothing
                "containers": [{"name": "c", "image": "busybox"}],
            },
        }
        home.create(cast(Pod, Pod.from_dict(body)))
        wait_until(
            lambda: cast(Any, home.get(Pod, "sentinel", namespace=namespace)).status.reason == BACKOFF_REASON,
            60,
            f"the sentinel pod on {node_name} marked {BACKOFF_REASON}",
        )
    finally:
        home.delete(Namespace, namespace)


def set_out_of_service(home: Client, node_name: str, on: bool) -> None:
    """What an administrator does to give up on a node (Kubernetes' non-graceful node shutdown)."""
    key = OUT_OF_SERVICE["key"]
    edit_node(home, node_name, lambda taints: [t for t in taints if t["key"] != key] + ([OUT_OF_SERVICE] if on else []))


OUT_OF_SERVICE = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}


def test_a_virtual_kubelet_started_while_its_foreign_cluster_is_down_turns_its_node_not_ready(
    offloaded: str, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment, runtime: ExternalRuntime
) -> None:
    running = deploy_running(home, offloaded, "steady", 4)
    on_foreign_2 = [p.metadata.name for p in running if p.spec.nodeName == VIRTUAL_NODES["foreign-2"]]
    assert on_foreign_2, "the scheduler spreads 4 pods over both virtual nodes"
    victim, node_name = on_foreign_2[0], VIRTUAL_NODES["foreign-2"]
    twin = f"{offloaded}-home"
    runtime.stop("kubelet-foreign-2")
    try:
        with dev_env.api_server_stopped("foreign-2"):
            started = datetime.datetime.now(datetime.UTC)
            runtime.start("kubelet-foreign-2")
            # Our health check, not the lease's expiry (200 s here): NotReady with our reason
            wait_until(lambda: not node_ready(home, node_name), NOT_READY_BOUND + 10, "NotReady")  # + process start
            condition = ready_condition(home, "foreign-2")
            assert (condition.status, condition.reason) == ("False", "ForeignClusterUnreachable")
            wait_until(lambda: lease_renewed_after(home, "foreign-2", started), 20, "the Lease renewed")

            # A pod deleted meanwhile is Terminating, as on any unreachable node: its remote copy may
            # still run. The administrator who gives up on the cluster marks the node out of service,
            # and the home cluster's pod garbage collector releases its pods.
            home.delete(Pod, victim, namespace=offloaded)
            kubelet_acted_on_a_later_pod(home, node_name, f"{offloaded[:50]}-sentinel")
            pod: Any = home.get(Pod, victim, namespace=offloaded)
            assert pod.metadata.deletionTimestamp, "Terminating while its cluster is away"
            set_out_of_service(home, node_name, True)
            try:
                wait_until(lambda: all(gone(home, offloaded, n) for n in on_foreign_2), 90, "pods released")
                assert OUT_OF_SERVICE["key"] in {t[0] for t in taints_of(home, "foreign-2")}, "the admin's taint stays"
            finally:
                set_out_of_service(home, node_name, False)
    finally:
        runtime.start("kubelet-foreign-2")
    wait_until(lambda: node_ready(home, node_name), 30, "liqo-foreign-2 Ready again")
    wait_until(
        lambda: all(remote_pod(foreign["foreign-2"], twin, n) is None for n in on_foreign_2),
        60,
        "the remote pods of the released home pods deleted once their cluster answers",
    )
    wait_until(lambda: all_running(home, offloaded, "steady", 4), 60, "the Deployment whole again")


def test_a_foreign_cluster_gone_for_good_is_abandoned_when_the_stack_says_so(
    offloaded: str,
    home: Client,
    foreign: dict[str, Client],
    installed: auto.Stack,
    declared_again: dict[str, Any],
    dev_env: DevEnvironment,
    runtime: ExternalRuntime,
) -> None:
    """`abandonUnreachableAfter: 0s` set with one `pulumi up`; then foreign-2's API server stops for
    good (as far as anyone can tell) and the next `up` removes it: the up completes, the VirtualNode
    is released without its twins, a PeeringAbandoned event says what stays there, and pulumi dropped
    foreign-2's objects from its state. When foreign-2 answers and is peered again, it serves again."""
    node_name = VIRTUAL_NODES["foreign-2"]
    running = deploy_running(home, offloaded, "abandoned", 4)
    assert any(p.spec.nodeName == node_name for p in running), "the scheduler spreads 4 pods over both nodes"
    marked = json.loads(json.dumps(declared_again))
    for cluster in marked["foreignClusters"]:
        if cluster["clusterId"] == "foreign-2":
            cluster["abandonUnreachableAfter"] = "0s"
    stack_up(installed, marked)
    without = json.loads(json.dumps(marked))
    without["foreignClusters"] = [c for c in without["foreignClusters"] if c["clusterId"] != "foreign-2"]
    with dev_env.api_server_stopped("foreign-2"):
        wait_until(lambda: not node_ready(home, node_name), NOT_READY_BOUND + 10, "liqo-foreign-2 NotReady")
        result = stack_up(installed, without, unoffloading=offloaded)
        assert result.summary.result == "succeeded"
        assert get_or_none(home, VirtualNodeResource, node_name, names.LIQO_NAMESPACE) is None
        assert get_or_none(home, Node, node_name) is None
        events = [
            e
            for e in home.list(CoreEvent, namespace=names.LIQO_NAMESPACE)
            if e.reason == "PeeringAbandoned" and e.involvedObject.name == node_name
        ]
        assert events, "the abandon is said on the VirtualNode"
        assert f"{names.ORIGIN_LABEL}=home,{names.DESTINATION_LABEL}=foreign-2" in (events[0].message or "")
        wait_until(lambda: all_running(home, offloaded, "abandoned", 4), 90, "the pods recreated on foreign-1")
        resources = (installed.export_stack().deployment or {}).get("resources") or []
        kept = [r["urn"] for r in resources if str(r.get("provider", "")).split("::")[-2:-1] == ["foreign-2"]]
        assert kept == [], "pulumi dropped what it could not delete in foreign-2 from its state"
    stack_up(installed, declared_again)
    wait_until(lambda: node_ready(home, node_name), 120, "liqo-foreign-2 served again and Ready")
    wait_phase(home, offloaded, "Ready", timeout=120)


# -- credentials revoked (docs/offloading.md: an answer is not enough) --------------------------------------
def test_revoked_rbac_turns_the_node_not_ready_with_a_reason_that_says_so(
    home: Client, foreign: dict[str, Client], runtime: ExternalRuntime
) -> None:
    """The home identity's RoleBinding in foreign-2's tenant namespace deleted: the API server
    answers 403, which is a failed check, not a live cluster. Put back: Ready again."""
    cluster, node_name = foreign["foreign-2"], VIRTUAL_NODES["foreign-2"]
    tenant, identity = names.tenant_namespace("home"), names.home_identity_name("home")
    wait_until(lambda: node_ready(home, node_name), 60, "liqo-foreign-2 Ready")
    binding = cluster.get(RoleBinding, identity, namespace=tenant).to_dict()
    meta = binding["metadata"]
    kept = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta}
    restored = cast(RoleBinding, RoleBinding.from_dict({**binding, "metadata": kept}))
    cluster.delete(RoleBinding, identity, namespace=tenant)
    try:
        wait_until(lambda: not node_ready(home, node_name), NOT_READY_BOUND, "liqo-foreign-2 NotReady")
        condition = ready_condition(home, "foreign-2")
        assert (condition.status, condition.reason) == ("False", "ForeignForbidden"), condition
        assert "403" in condition.message
    finally:
        cluster.create(restored)
    wait_until(lambda: node_ready(home, node_name), 30, "liqo-foreign-2 Ready again with its RBAC back")
    wait_until(
        lambda: not {key for key, _, _ in taints_of(home, "foreign-2")} & set(NOT_READY_TAINTS),
        30,
        "liqo-foreign-2 schedulable again: its not-ready taint lifted",
    )


# -- a peering removed ------------------------------------------------------------------------------
def test_a_removed_peering_drains_and_deletes_its_node_and_the_twins(
    offloaded: str,
    home: Client,
    foreign: dict[str, Client],
    installed: auto.Stack,
    declared_again: dict[str, Any],
    runtime: ExternalRuntime,
) -> None:
    """foreign-2 taken out of the stack config, then `pulumi up`: the pods with a controller are
    recreated on liqo-foreign-1, a bare pod ends Failed with reason VirtualNodeRemoved, no pod is
    left Terminating, the Node and the twin namespace (with what was reflected into it) are gone,
    once the `up` is told it may unoffload the module's namespace (refused before, touching nothing),
    and the peering ends in its virtual-kubelet process, which goes on. Put back, foreign-2 is served
    again by that same process: nobody restarts anything."""
    cluster, node_name, twin = foreign["foreign-2"], VIRTUAL_NODES["foreign-2"], f"{offloaded}-home"
    kubelet_pid, url = runtime.pid("kubelet-foreign-2"), cast(str, runtime.probes_url("kubelet-foreign-2"))

    def served() -> float | None:
        samples = metric_samples(url, "liqo_peering_served")
        return next((value for labels, value in samples.items() if dict(labels)["cluster"] == "foreign-2"), None)

    assert served() == 1
    running = deploy_running(home, offloaded, "movers", 4)
    assert any(p.spec.nodeName == node_name for p in running), "the scheduler spreads 4 pods over both nodes"
    bare = {
        "metadata": {"name": "bare", "namespace": offloaded},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node_name},
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    home.create(cast(Pod, Pod.from_dict(bare)))
    wait_until(
        lambda: (p := remote_pod(cluster, twin, "bare")) and p.status and p.status.phase == "Running",
        60,
        "bare pod running in foreign-2",
    )
    home.create(ConfigMap(metadata=ObjectMeta(name="settings", namespace=offloaded), data={"a": "1"}))
    wait_until(lambda: get_or_none(cluster, ConfigMap, "settings", twin), 30, "the ConfigMap reflected to foreign-2")

    without = json.loads(json.dumps(declared_again))
    without["foreignClusters"] = [c for c in without["foreignClusters"] if c["clusterId"] != "foreign-2"]
    # first refused: the module's namespace, offloaded by hand, has its twin there; nothing is touched
    with pytest.raises(auto.CommandError) as refused:
        stack_up(installed, without)
    assert "removing the peering with foreign-2 would unoffload" in str(refused.value)
    assert f"{offloaded} (twins in foreign-1, foreign-2)" in str(refused.value)
    assert get_or_none(home, VirtualNodeResource, node_name, names.LIQO_NAMESPACE) is not None
    assert remote_pod(cluster, twin, "bare") is not None and node_ready(home, node_name)
    failures: list[BaseException] = []

    def up() -> None:
        try:
            stack_up(installed, without, unoffloading=offloaded)
        except BaseException as err:  # reported by the test's thread
            failures.append(err)

    removing = threading.Thread(target=up)
    removing.start()
    try:
        # seen while it happens: once the Node is gone the pod garbage collector may delete the pod
        failed: Any = wait_until(
            lambda: (p := cast(Any, get_or_none(home, Pod, "bare", offloaded))) and p.status.phase == "Failed" and p,
            180,
            "the bare pod Failed",
        )
        assert failed.status.reason == REMOVED_REASON, failed.status
        assert "removed" in failed.status.message
    finally:
        removing.join()
    try:
        assert not failures, failures
        assert get_or_none(home, Node, node_name) is None, "the Node is deleted"
        found = get_or_none(home, VirtualNodeResource, node_name, names.LIQO_NAMESPACE)
        assert found is None, "pulumi waited for the VirtualNode to go"
        terminating = [
            p.metadata.name
            for p in home.list(Pod, namespace=offloaded, fields={"spec.nodeName": node_name})
            if p.metadata and p.metadata.deletionTimestamp
        ]
        assert terminating == [], "no pod left Terminating on the deleted Node"
        moved = wait_until(lambda: all_running(home, offloaded, "movers", 4), 60, "4 movers Running")
        assert {p.spec.nodeName for p in moved} == {VIRTUAL_NODES["foreign-1"]}
        assert get_or_none(cluster, Namespace, twin) is None, "the twin namespace and what was in it are gone"
        wait_until(lambda: served() == 0, 30, "the peering with foreign-2 ended")
        assert runtime.pid("kubelet-foreign-2") == kubelet_pid, "the process serving it goes on"
    finally:
        home.delete(Pod, "bare", namespace=offloaded, grace_period=0)
        stack_up(installed, declared_again)
    wait_until(lambda: node_ready(home, node_name), 90, "liqo-foreign-2 back and Ready")
    assert served() == 1 and runtime.pid("kubelet-foreign-2") == kubelet_pid, "served again by the same process"
    wait_until(lambda: get_or_none(cluster, ConfigMap, "settings", twin), 60, "the twin back, with the ConfigMap")
