"""Resource reflection end to end (docs/reflection.md): ConfigMaps, Secrets, Services and Ingresses of an
offloaded namespace follow it into the twins, home is the truth, and foreign objects that are not
ours are never touched."""

from __future__ import annotations

import base64
import ipaddress
import json
import subprocess
from functools import partial
from pathlib import Path
from typing import Any, cast

import pytest
from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Event, Secret, Service
from lightkube.resources.networking_v1 import Ingress
from pulumi import automation as auto

from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from runtime.api import names
from tests.support.kube import get_or_none, metric_samples, queue_drained, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]


def twin_of(namespace: str) -> str:
    return f"{namespace}-home"


find = get_or_none


def reflected(client: Client, kind: Any, name: str, namespace: str, timeout: float = 30) -> Any:
    return wait_until(
        lambda: find(client, kind, name, twin_of(namespace)), timeout, f"{kind.__name__} {name} reflected"
    )


def gone(client: Client, kind: Any, name: str, namespace: str, timeout: float = 30) -> None:
    wait_until(lambda: find(client, kind, name, twin_of(namespace)) is None, timeout, f"{kind.__name__} {name} removed")


def create(client: Client, kind: Any, manifest: dict[str, Any]) -> None:
    obj: Any = kind.from_dict(manifest)
    client.create(obj)


def labels_of(client: Client, kind: Any, name: str, namespace: str) -> dict[str, str]:
    found: Any = client.get(kind, name, namespace=namespace)
    return dict(found.metadata.labels or {})


def config_map(name: str, namespace: str, data: dict[str, str], **meta: Any) -> Any:
    return ConfigMap(metadata=ObjectMeta(name=name, namespace=namespace, **meta), data=data)


def marker_reflected(home: Client, client: Client, namespace: str, name: str) -> None:
    """A ConfigMap created at home now, until reflected by `client`'s cluster: a sentinel that its
    reflector has handled every earlier ConfigMap change in `namespace`. One home watch per namespace
    feeds one FIFO queue per kind, so each earlier key was dequeued before the marker; a reconcile that
    leaves a copy alone (a conflict already reported, an object not ours) ends without awaiting,
    and one that writes has counted and begun its write before it awaits anything else."""
    home.create(config_map(name, namespace, {"marker": "yes"}))
    reflected(client, ConfigMap, name, namespace)


def test_config_maps_and_secrets_are_reflected_verbatim_with_ownership_labels(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    home.create(config_map("settings", offloaded, {"level": "debug"}, labels={"app": "shop"}))
    home.create(Secret(metadata=ObjectMeta(name="creds", namespace=offloaded), stringData={"password": "s3cret"}))
    for cluster_id, client in foreign.items():
        copy = reflected(client, ConfigMap, "settings", offloaded)
        assert copy.data == {"level": "debug"}
        assert copy.metadata.labels == {"app": "shop", names.ORIGIN_LABEL: "home", names.DESTINATION_LABEL: cluster_id}
        secret = reflected(client, Secret, "creds", offloaded)
        assert secret.data == home.get(Secret, "creds", namespace=offloaded).data and secret.type == "Opaque"
        # each namespace's root CA is its own cluster's
        twin_root_ca = wait_until(
            partial(find, client, ConfigMap, "kube-root-ca.crt", twin_of(offloaded)), 60, "the twin's kube-root-ca.crt"
        )
        assert names.ORIGIN_LABEL not in (twin_root_ca.metadata.labels or {})


def test_service_account_tokens_never_leave_home(offloaded: str, home: Client, foreign: dict[str, Client]) -> None:
    from lightkube.resources.core_v1 import ServiceAccount

    home.create(ServiceAccount(metadata=ObjectMeta(name="robot", namespace=offloaded)))
    home.create(
        Secret(
            metadata=ObjectMeta(
                name="robot-token", namespace=offloaded, annotations={"kubernetes.io/service-account.name": "robot"}
            ),
            type="kubernetes.io/service-account-token",
        )
    )
    home.create(config_map("marker", offloaded, {"after": "token"}))
    reflected(foreign["foreign-1"], ConfigMap, "marker", offloaded)  # reflection has caught up
    assert find(foreign["foreign-1"], Secret, "robot-token", twin_of(offloaded)) is None


def test_services_leave_allocated_fields_to_the_foreign_cluster(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    ports = [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080}]
    create(home, Service, {
        "metadata": {"name": "web", "namespace": offloaded},
        "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": ports},
    })  # fmt: skip
    create(home, Service, {
        "metadata": {"name": "pinned", "namespace": offloaded,
                     "annotations": {names.FORCE_REMOTE_NODE_PORT_ANNOTATION: "true"}},
        "spec": {"type": "NodePort", "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "nodePort": 30081}]},
    })  # fmt: skip
    create(home, Service, {
        "metadata": {"name": "peers", "namespace": offloaded},
        "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 5432}]},
    })  # fmt: skip
    at_home: Any = home.get(Service, "web", namespace=offloaded)
    client = foreign["foreign-1"]
    web = reflected(client, Service, "web", offloaded)
    assert web.spec.selector == {"app": "web"} and web.spec.type == "NodePort"
    assert web.spec.clusterIP and web.spec.clusterIP != at_home.spec.clusterIP  # the foreign cluster's own
    assert web.spec.ports[0].nodePort  # allocated there: the copy never asked for one
    ours = next(m for m in web.metadata.managedFields if m.manager == "liqo-reflection-service")
    assert "f:nodePort" not in json.dumps(ours.fieldsV1) and "f:clusterIP" not in json.dumps(ours.fieldsV1)
    assert reflected(client, Service, "pinned", offloaded).spec.ports[0].nodePort == 30081
    assert reflected(client, Service, "peers", offloaded).spec.clusterIP == "None"


def test_ingresses_leave_the_class_to_the_foreign_cluster(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    create(home, Ingress, {
        "metadata": {"name": "front", "namespace": offloaded,
                     "annotations": {"kubernetes.io/ingress.class": "home-nginx"}},
        "spec": {"ingressClassName": "home-nginx", "rules": [{"host": "shop.example", "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}},
        ]}}]},
    })  # fmt: skip
    copy = reflected(foreign["foreign-2"], Ingress, "front", offloaded)
    assert copy.spec.ingressClassName is None and copy.spec.rules[0].host == "shop.example"
    assert "kubernetes.io/ingress.class" not in (copy.metadata.annotations or {}), "nor the legacy annotation"


def test_deny_list_annotations_and_deletes_at_home(offloaded: str, home: Client, foreign: dict[str, Client]) -> None:
    client = foreign["foreign-1"]
    skip = {names.SKIP_REFLECTION_ANNOTATION: "true"}
    home.create(config_map("private", offloaded, {"a": "b"}, annotations=skip))
    home.create(config_map("public", offloaded, {"a": "b"}, annotations={names.SKIP_REFLECTION_ANNOTATION: "false"}))
    reflected(client, ConfigMap, "public", offloaded)
    assert find(client, ConfigMap, "private", twin_of(offloaded)) is None
    home.patch(ConfigMap, "public", {"metadata": {"annotations": skip}}, namespace=offloaded)
    gone(client, ConfigMap, "public", offloaded)  # made skip: removed there
    home.create(config_map("doomed", offloaded, {"a": "b"}))
    reflected(client, ConfigMap, "doomed", offloaded)
    home.delete(ConfigMap, "doomed", namespace=offloaded)
    for each in foreign.values():
        gone(each, ConfigMap, "doomed", offloaded)


def test_home_is_the_truth_copies_edited_or_deleted_by_hand_come_back(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    client = foreign["foreign-2"]
    home.create(config_map("truth", offloaded, {"value": "home"}))
    copy = reflected(client, ConfigMap, "truth", offloaded)
    client.patch(ConfigMap, "truth", {"data": {"value": "edited"}}, namespace=twin_of(offloaded))
    wait_until(
        lambda: client.get(ConfigMap, "truth", namespace=twin_of(offloaded)).data == {"value": "home"}, 30, "restored"
    )
    client.delete(ConfigMap, "truth", namespace=twin_of(offloaded))
    back = wait_until(
        lambda: (
            (found := find(client, ConfigMap, "truth", twin_of(offloaded)))
            and found.metadata.uid != copy.metadata.uid
            and found
        ),
        30,
        "recreated",
    )
    assert back.data == {"value": "home"}
    home.patch(ConfigMap, "truth", {"data": {"value": "changed at home"}}, namespace=offloaded)
    wait_until(
        lambda: client.get(ConfigMap, "truth", namespace=twin_of(offloaded)).data == {"value": "changed at home"},
        30,
        "home change reflected",
    )


def test_a_foreign_object_that_is_not_ours_is_left_alone_and_reported(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    client = foreign["foreign-1"]
    client.create(config_map("theirs", twin_of(offloaded), {"owner": "foreign team"}))
    home.create(config_map("theirs", offloaded, {"owner": "home"}))
    reflected(foreign["foreign-2"], ConfigMap, "theirs", offloaded)  # foreign-2 has no conflict

    def warning() -> Any:
        events = home.list(Event, namespace=offloaded, fields={"involvedObject.name": "theirs"})
        return next((e for e in events if e.reason == "ReflectionConflict"), None)

    event = wait_until(warning, 30, "a ReflectionConflict event at home")
    assert event.type == "Warning" and "foreign-1 already holds a ConfigMap" in event.message
    marker_reflected(home, client, offloaded, "after-conflict")
    untouched = client.get(ConfigMap, "theirs", namespace=twin_of(offloaded))
    assert untouched.data == {"owner": "foreign team"}
    assert names.ORIGIN_LABEL not in labels_of(client, ConfigMap, "theirs", twin_of(offloaded))
    home.delete(ConfigMap, "theirs", namespace=offloaded)
    gone(foreign["foreign-2"], ConfigMap, "theirs", offloaded)
    marker_reflected(home, client, offloaded, "after-delete")
    assert find(client, ConfigMap, "theirs", twin_of(offloaded)) is not None, "never deleted: not ours"


def test_settings_patched_on_the_virtual_node_apply_live(
    offloaded: str, home: Client, foreign: dict[str, Client], runtime: ExternalRuntime, virtual_node_patched: Any
) -> None:
    client = foreign["foreign-1"]
    home.create(config_map("labelled", offloaded, {"a": "b"}, labels={"team": "ml", "app": "x"}))
    assert reflected(client, ConfigMap, "labelled", offloaded).metadata.labels["team"] == "ml"

    virtual_node_patched({"offloadingPatch": {"labelsNotReflected": ["team"]}})
    wait_until(
        lambda: "team" not in labels_of(client, ConfigMap, "labelled", twin_of(offloaded)),
        30,
        "skipped label removed from the copy",
    )

    allowed = {names.ALLOW_REFLECTION_ANNOTATION: "true"}
    home.create(config_map("allowed", offloaded, {"a": "b"}, annotations=allowed))
    virtual_node_patched({"reflection": {"configmap": {"type": "AllowList", "workers": 3}, "secret": {"workers": 0}}})
    gone(client, ConfigMap, "labelled", offloaded)  # AllowList: not annotated, not reflected
    assert reflected(client, ConfigMap, "allowed", offloaded)
    url = cast(str, runtime.probes_url("kubelet-foreign-1"))

    def secret_reconciles() -> float:
        samples = metric_samples(url, "liqo_reconcile_seconds_count")
        return sum(
            value
            for labels, value in samples.items()
            if dict(labels)["queue"] == "reflection-secret" and dict(labels)["cluster"] == "foreign-1"
        )

    wait_until(lambda: queue_drained(url, "reflection-secret"), 30, "foreign-1's Secret reflector idle")
    before = secret_reconciles()
    home.create(Secret(metadata=ObjectMeta(name="held-back", namespace=offloaded), stringData={"k": "v"}))
    reflected(foreign["foreign-2"], Secret, "held-back", offloaded)  # foreign-2 keeps its settings
    # with 0 workers foreign-1's Secret reflector writes and reports nothing: what shows it decided is
    # one more reconcile counted on its queue (at the end of each one), and none waiting
    wait_until(
        lambda: secret_reconciles() > before and queue_drained(url, "reflection-secret"),
        30,
        "foreign-1's Secret reflector past held-back",
    )
    assert find(client, Secret, "held-back", twin_of(offloaded)) is None, "workers 0 disables secrets"


def test_an_offloaded_pod_runs_remotely_without_the_skipped_labels_and_annotations(
    offloaded: str, home: Client, foreign: dict[str, Client], virtual_node_patched: Any
) -> None:
    """docs/reflection.md's labelsNotReflected / annotationsNotReflected hold for offloaded pods too (never for the
    ownership labels), and a change of the lists reaches the running remote pod."""
    from lightkube.resources.core_v1 import Pod

    from tests.support.kube import remote_pod

    virtual_node_patched(
        {"offloadingPatch": {"labelsNotReflected": ["team"], "annotationsNotReflected": ["cloud.example/id"]}}
    )
    client = foreign["foreign-1"]
    pod: Any = Pod.from_dict({
        "metadata": {"name": "skipped", "namespace": offloaded, "labels": {"app": "skipped", "team": "ml"},
                     "annotations": {"cloud.example/id": "i-123", "note": "kept"}},
        "spec": {"nodeSelector": {names.REMOTE_CLUSTER_ID_LABEL: "foreign-1"},
                 "containers": [{"name": "web", "image": "nginx:1.27"}]},
    })  # fmt: skip
    home.create(pod)

    def running_remotely() -> Any:
        found: Any = remote_pod(client, twin_of(offloaded), "skipped")
        return found if found is not None and found.status and found.status.phase == "Running" else None

    remote = wait_until(running_remotely, 60, "the pod Running in foreign-1")
    assert remote.metadata.labels["app"] == "skipped" and "team" not in remote.metadata.labels
    assert remote.metadata.labels[names.ORIGIN_LABEL] == "home"
    assert remote.metadata.annotations.get("note") == "kept" and "cloud.example/id" not in remote.metadata.annotations
    virtual_node_patched({"offloadingPatch": {"labelsNotReflected": None, "annotationsNotReflected": None}})

    def remote_labels() -> dict[str, str]:
        found: Any = remote_pod(client, twin_of(offloaded), "skipped")
        return dict(found.metadata.labels or {}) if found is not None else {}

    wait_until(
        lambda: remote_labels().get("team") == "ml",
        30,
        "the label back on the remote pod once no longer skipped",
    )
    home.delete(Pod, "skipped", namespace=offloaded, grace_period=0)


def test_an_endpoint_slice_follows_its_service_unless_annotated_itself(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    """docs/reflection.md: a slice is reflected if its Service is, unless the slice carries liqo.io/allow-reflection
    or liqo.io/skip-reflection itself. Slices made by hand (a managed-by of their own, so the home
    endpoint-slice controller leaves them alone), so their annotations stay as written."""
    from lightkube.resources.discovery_v1 import EndpointSlice

    client = foreign["foreign-1"]
    skip, allow = {names.SKIP_REFLECTION_ANNOTATION: "true"}, {names.ALLOW_REFLECTION_ANNOTATION: "true"}
    for service_name, policy in (("hidden", skip), ("shown", {})):
        create(home, Service, {
            "metadata": {"name": service_name, "namespace": offloaded, "annotations": policy},
            "spec": {"ports": [{"port": 80}]},  # no selector: its slices are the ones made here
        })  # fmt: skip
    reflected(client, Service, "shown", offloaded)  # the slices' decisions read the Services as known here
    slices = [("hidden-follows", "hidden", {}), ("hidden-own", "hidden", allow),
              ("shown-own", "shown", skip), ("shown-follows", "shown", {}), ("sentinel", "shown", {})]  # fmt: skip
    for name, service_name, policy in slices:
        create(home, EndpointSlice, {
            "metadata": {"name": name, "namespace": offloaded, "annotations": policy,
                         "labels": {"kubernetes.io/service-name": service_name,
                                    "endpointslice.kubernetes.io/managed-by": "e2e.liqo.io"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.100.9.9"]}],
            "ports": [{"port": 80}],
        })  # fmt: skip
    # the slices' queue is FIFO and a reconcile that decides not to reflect awaits nothing, so once the
    # last one created is there, every earlier one was decided
    reflected(client, EndpointSlice, "sentinel", offloaded)
    listed: list[Any] = list(client.list(EndpointSlice, namespace=twin_of(offloaded)))
    there = {s.metadata.name for s in listed}
    assert {"hidden-own", "shown-follows"} <= there, "reflected: its own allow, or its Service's policy"
    assert not {"hidden-follows", "shown-own"} & there, "not reflected: its Service's skip, or its own"


REFLECTED_KINDS = ("configmap", "secret", "service", "endpointslice", "ingress", "event")


def test_worker_counts_on_the_virtual_node_apply_live_to_every_kind(
    offloaded: str, home: Client, foreign: dict[str, Client], runtime: ExternalRuntime, virtual_node_patched: Any
) -> None:
    """docs/reflection.md's `reflection.<kind>.workers`, changed 3 -> 8 -> 0 -> 3 while objects are reflected:
    each kind's queue (events included) runs that many workers from then on; 0 turns the kind off
    (one worker still sees its keys through) and what was held back is reflected once it is back."""
    client = foreign["foreign-1"]
    url = cast(str, runtime.probes_url("kubelet-foreign-1"))

    def workers() -> dict[str, float]:
        samples = metric_samples(url, "liqo_queue_workers")  # the process serves foreign-2 too
        return {dict(labels)["queue"]: value for labels, value in samples.items() if ("cluster", "foreign-1") in labels}

    for step, count in enumerate((3, 8, 0, 3)):
        virtual_node_patched({"reflection": {kind: {"workers": count} for kind in REFLECTED_KINDS}})
        wanted = {f"reflection-{kind}": float(max(1, count)) for kind in REFLECTED_KINDS}
        wait_until(
            lambda wanted=wanted: {queue: workers().get(queue) for queue in wanted} == wanted,  # type: ignore[misc]
            30,
            f"{count} workers for every kind",
        )
        home.create(config_map(f"workers-{step}", offloaded, {"step": str(step)}))
        if count:
            for earlier in range(step + 1):  # what was reflected before stays, what was held back comes
                reflected(client, ConfigMap, f"workers-{earlier}", offloaded)


def test_a_restarted_virtual_kubelet_rewrites_and_recreates_nothing(
    offloaded: str, home: Client, foreign: dict[str, Client], runtime: ExternalRuntime
) -> None:
    """docs/offloading.md's fault tolerance, at the issue's scale: 1,000 reflected objects, a restart, zero UIDs
    changed and no write sent but the one for the object created afterwards."""
    count = 1000
    client = foreign["foreign-1"]

    def steady() -> dict[str, Any]:
        copies: list[Any] = list(client.list(ConfigMap, namespace=twin_of(offloaded)))
        return {
            c.metadata.name: (c.metadata.uid, c.metadata.resourceVersion)
            for c in copies
            if c.metadata.name.startswith("steady-")
        }

    for index in range(count):
        home.create(config_map(f"steady-{index}", offloaded, {"index": str(index)}))
    wait_until(lambda: len(steady()) == count, 180, f"{count} ConfigMaps reflected")
    before = steady()

    component = "kubelet-foreign-1"
    old_url = runtime.probes_url(component)
    runtime.kill(component)
    runtime.start(component)
    url = wait_until(lambda: (found := runtime.probes_url(component)) != old_url and found, 30, "restarted")
    home.create(config_map("after-restart", offloaded, {"a": "b"}))
    reflected(client, ConfigMap, "after-restart", offloaded, timeout=60)  # the restarted one is at work

    def settled() -> bool:
        depth = metric_samples(url, "liqo_queue_depth")
        return all(value == 0 for labels, value in depth.items() if dict(labels)["queue"].startswith("reflection-"))

    # every reconcile counts its write before it awaits anything (reflector.py): with the queues
    # drained, each steady key's reconcile since the restart has begun and so counted what it sent
    wait_until(settled, 60, "reflection queues drained after the restart")
    writes = {
        (dict(labels)["kind"], dict(labels)["verb"]): value
        for labels, value in metric_samples(url, "liqo_reflection_writes_total").items()
        if value and dict(labels)["cluster"] == "foreign-1"
    }
    assert writes == {("configmap", "apply"): 1.0}, "only the object created after the restart was written"
    assert steady() == before, "no copy rewritten or recreated"
    # the gauge counts the copies in the restarted process's foreign store, which the echo of the
    # after-restart apply reaches a moment after the queues drain
    wait_until(
        lambda: (
            metric_samples(url, "liqo_reflected_objects").get((("cluster", "foreign-1"), ("kind", "configmap")), 0)
            >= count + 1
        ),
        30,
        f"foreign-1's reflector counting at least {count + 1} ConfigMap copies",
    )


def test_the_home_identity_reflects_only_inside_twin_namespaces(
    offloaded: str, home: Client, dev_env: DevEnvironment, tmp_path: Path
) -> None:
    """Least privilege: what reflection writes, the home identity may write in twin namespaces and
    nowhere else; nothing cluster-wide."""
    secret: Any = home.get(Secret, "liqo-credentials-foreign-1", namespace=names.LIQO_NAMESPACE)
    kubeconfig = tmp_path / "identity.yaml"
    kubeconfig.write_bytes(base64.b64decode(secret.data["kubeconfig"]))

    def can_i(*args: str) -> str:
        command = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), "auth", "can-i", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.strip()

    reflected_kinds = [
        "configmaps",
        "secrets",
        "services",
        "endpointslices.discovery.k8s.io",
        "ingresses.networking.k8s.io",
    ]
    for kind in reflected_kinds:
        for verb in ("create", "patch", "delete", "watch"):
            assert can_i(verb, kind, "-n", twin_of(offloaded)) == "yes", f"{verb} {kind} in the twin"
        assert can_i("create", kind, "-n", "default") == "no", f"create {kind} in default"
        assert can_i("list", kind, "--all-namespaces") == "no", f"list {kind} cluster-wide"
    assert can_i("get", "secrets", "-n", "kube-system") == "no"
    assert can_i("create", "persistentvolumes") == "no"
    assert can_i("create", "namespaces") == "no"


def test_endpoint_slices_let_every_cluster_reach_every_replica(
    runtime: ExternalRuntime,
    installed: auto.Stack,
    session_layout: ClusterLayout,
    home: Client,
    foreign: dict[str, Client],
) -> None:
    """docs/reflection.md: a Service whose pods run at home, in foreign-1 and in foreign-2 has, in each foreign
    cluster, endpoints for all three: its own from its control plane, the others reflected, at the
    addresses that cluster reaches them at. foreign-1 and foreign-2 use the same pod range, so
    foreign-2 gets foreign-1's replica moved out of its own range (the plan's reachesOthersIn)."""
    from lightkube.resources.apps_v1 import Deployment
    from lightkube.resources.core_v1 import Pod
    from lightkube.resources.discovery_v1 import EndpointSlice

    from liqo_stack.dev.workloads import example_deployment
    from tests.support.kube import offload, wait_phase

    namespace = "spread"
    offload(home, namespace, {"podOffloadingStrategy": "LocalAndRemote"})
    wait_phase(home, namespace, "Ready")
    placements = {"at-home": {"type": "kwok"}}
    placements |= {f"in-{c}": {names.REMOTE_CLUSTER_ID_LABEL: c} for c in foreign}
    for name, node_selector in placements.items():
        manifest = example_deployment(name, namespace, 1).to_dict()
        manifest["spec"]["template"]["metadata"]["labels"]["service"] = "multi"
        manifest["spec"]["template"]["spec"]["nodeSelector"] = node_selector
        deployment: Any = Deployment.from_dict(manifest)
        home.create(deployment)
    create(home, Service, {
        "metadata": {"name": "multi", "namespace": namespace},
        "spec": {"selector": {"service": "multi"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    })  # fmt: skip

    def ready_pods() -> dict[str, Any] | None:
        pods: list[Any] = list(home.list(Pod, namespace=namespace, labels={"service": "multi"}))
        ready = {
            p.metadata.labels["app"]: p
            for p in pods
            if p.status
            and p.status.podIP
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        }
        return ready if len(ready) == 3 else None

    pods = wait_until(ready_pods, 120, "3 replicas Ready at home, one per cluster")
    home_view = {name: pod.status.podIP for name, pod in pods.items()}  # remote pods: as home knows them
    plan: dict[str, Any] = installed.outputs()["foreignClusters"].value
    shown_at_home = {"home": session_layout.pod_cidr("home")}
    shown_at_home |= {c: plan[c]["podNetwork"]["seenAtHomeAs"] for c in foreign}

    def reached_from(cluster_id: str, replica: str, ip: str) -> str:
        """The address `cluster_id` reaches a replica at: the same offset in its view of that range."""
        source = replica.removeprefix("in-") if replica != "at-home" else "home"
        at_home = ipaddress.ip_network(shown_at_home[source])
        there = ipaddress.ip_network(plan[cluster_id]["podNetwork"]["reachesOthersIn"][source])
        return str(there.network_address + (int(ipaddress.ip_address(ip)) - int(at_home.network_address)))

    assert plan["foreign-2"]["podNetwork"]["reachesOthersIn"]["foreign-1"] != shown_at_home["foreign-1"]
    for cluster_id, client in foreign.items():
        own: Any = client.get(Pod, pods[f"in-{cluster_id}"].metadata.name, namespace=twin_of(namespace))
        expected = {own.status.podIP} | {
            reached_from(cluster_id, name, ip) for name, ip in home_view.items() if name != f"in-{cluster_id}"
        }
        own_range = ipaddress.ip_network(session_layout.pod_cidr(cluster_id))
        assert [ip for ip in expected - {own.status.podIP} if ipaddress.ip_address(ip) in own_range] == []

        def sees_all(client: Client = client, expected: set[str] = expected) -> bool:
            selector: dict[str, Any] = {"kubernetes.io/service-name": "multi"}
            slices: list[Any] = list(client.list(EndpointSlice, namespace=twin_of(namespace), labels=selector))
            return {a for s in slices for e in s.endpoints or [] for a in e.addresses} == expected

        wait_until(sees_all, 60, f"{cluster_id} sees every replica ({expected})")
