"""What every test tier shares: waits on conditions, the runtime as local processes, offloadings."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import httpx2
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node, Pod, ServiceAccount

from liqo_stack.dev.ports import any_free, hand_out
from liqo_stack.dev.workloads import apply_deployment, example_deployment
from liqo_stack.kube import get_or_none as get_or_none  # re-exported: the tests import it from here
from runtime.api import names
from runtime.api.resources import NamespaceOffloadingResource

free_port = any_free  # a port nothing listens on, for a server the test starts


def listener_port() -> int:
    """A port for a server started later than at once (a runtime started after a `pulumi up`), or started
    again on it (a runtime's component killed and restarted): handed out below the kernel's ephemeral
    range and held ten minutes. A port the kernel picks may meanwhile become an outgoing connection's
    source port, or another server's that binds port 0 (a runtime's probes: CI's kubelet port of foreign-2
    answered plain HTTP after its virtual kubelet restarted)."""
    return hand_out(1)[0]


def _unanswered(error: Exception) -> bool:
    """An API server too busy to answer this time (a slow reply, 429, 5xx): asked again."""
    if isinstance(error, ApiError):
        return error.status.code == 429 or (error.status.code or 0) >= 500
    return isinstance(error, httpx2.TimeoutException)


def _attempt(condition: Callable[[], Any]) -> tuple[Any, Exception | None]:
    """The condition's value, or None and the error when the API server was too busy to answer."""
    try:
        return condition(), None
    except (ApiError, httpx2.TimeoutException) as error:
        if not _unanswered(error):
            raise
        return None, error


def _not_met(what: str | Callable[[], str], timeout: float, unanswered: Exception | None) -> TimeoutError:
    if callable(what):
        try:
            what = what()
        except Exception as error:  # the description is best effort: the timeout is the failure
            what = f"(not described: {error!r})"
    return TimeoutError(f"{what} not met after {timeout:.0f}s" + (f" (last: {unanswered!r})" if unanswered else ""))


def wait_until(condition: Callable[[], Any], timeout: float = 30, what: str | Callable[[], str] = "condition") -> Any:
    """The condition's first true value; else a TimeoutError naming `what` (a callable: asked then, to
    say how things stand at the end of the wait, not at its start)."""
    deadline = time.monotonic() + timeout
    unanswered: Exception | None = None
    while time.monotonic() < deadline:
        value, error = _attempt(condition)
        if value:
            return value
        unanswered = error or unanswered
        time.sleep(0.2)
    raise _not_met(what, timeout, unanswered)


async def wait_until_async(
    condition: Callable[[], Any], timeout: float = 30, what: str | Callable[[], str] = "condition"
) -> Any:
    """wait_until for a test whose runtime parts run in this event loop: it keeps running meanwhile (a
    callable `what` runs once, at the timeout, and blocks the loop while it does)."""
    deadline = time.monotonic() + timeout
    unanswered: Exception | None = None
    while time.monotonic() < deadline:
        value, error = _attempt(condition)
        if value:
            return value
        unanswered = error or unanswered
        await asyncio.sleep(0.1)
    raise _not_met(what, timeout, unanswered)


def create_namespace(client: Client, name: str, labels: dict[str, str] | None = None) -> None:
    """A namespace as the controller-manager completes it, which takes a while on a loaded machine:
    pods are refused until its `default` ServiceAccount exists, and their tokens' CA comes from its
    `kube-root-ca.crt`."""
    client.create(Namespace(metadata=ObjectMeta(name=name, labels=labels)))
    wait_until(
        lambda: (
            get_or_none(client, ServiceAccount, "default", name)
            and get_or_none(client, ConfigMap, "kube-root-ca.crt", name)
        ),
        60,
        f"ServiceAccount default and ConfigMap kube-root-ca.crt in {name}",
    )


def offload(home: Client, namespace: str, spec: dict[str, Any]) -> None:
    create_namespace(home, namespace)
    home.create(
        NamespaceOffloadingResource.from_dict(
            {"metadata": {"name": names.NAMESPACE_OFFLOADING_NAME, "namespace": namespace}, "spec": spec}
        )
    )


def status_of(home: Client, namespace: str) -> dict[str, Any]:
    found = home.get(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=namespace)
    return dict(found.get("status") or {})


def wait_phase(home: Client, namespace: str, phase: str, timeout: float = 40) -> dict[str, Any]:
    return dict(
        wait_until(
            lambda: (s := status_of(home, namespace)).get("offloadingPhase") == phase and s,
            timeout,
            lambda: f"{namespace} offloadingPhase {phase} (status at the end: {status_of(home, namespace)})",
        )
    )


def exists(client: Client, namespace: str) -> bool:
    try:
        found = client.get(Namespace, namespace)
    except ApiError as err:
        if err.status.code == 404:
            return False
        raise
    return found.metadata is None or found.metadata.deletionTimestamp is None


def twin_gone(client: Client, namespace: str) -> Callable[[], bool]:
    return lambda: not exists(client, namespace)


def unoffload(home: Client, namespace: str) -> None:
    home.delete(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=namespace)
    wait_until(
        lambda: (
            not any(
                o.metadata.name == names.NAMESPACE_OFFLOADING_NAME
                for o in home.list(NamespaceOffloadingResource, namespace=namespace)
            )
        ),
        60,
        f"{namespace} unoffloaded",
    )


# -- virtual nodes and offloaded pods (the `installed` stack peers foreign-1 and foreign-2) --
VIRTUAL_NODES = {"foreign-1": "liqo-foreign-1", "foreign-2": "liqo-foreign-2"}


def node_ready(home: Client, name: str) -> bool:
    try:
        node = home.get(Node, name)
    except ApiError:
        return False
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def kubelet_port_of(home: Client, name: str) -> int | None:
    """The kubelet port the Node names (its daemonEndpoints); None without one, or without the Node."""
    node: Any = get_or_none(home, Node, name)
    endpoint = node and node.status and node.status.daemonEndpoints and node.status.daemonEndpoints.kubeletEndpoint
    return int(endpoint.Port) if endpoint else None


def served_on(home: Client, name: str, port: int) -> bool:
    """The Node is Ready and names `port`: served by the kubelet listening there (a Node outlives a virtual
    kubelet that stopped, Ready with its old port for a while)."""
    return kubelet_port_of(home, name) == port and node_ready(home, name)


def home_pods(home: Client, namespace: str, app: str) -> list[Pod]:
    return list(home.list(Pod, namespace=namespace, labels={"app": app}))


def all_running(home: Client, namespace: str, app: str, count: int) -> list[Pod] | None:
    pods = home_pods(home, namespace, app)
    running = [p for p in pods if p.status and p.status.phase == "Running" and not p.metadata.deletionTimestamp]  # type: ignore[union-attr]
    return running if len(running) == count else None


def deploy_running(home: Client, namespace: str, app: str, replicas: int, timeout: float = 90) -> list[Any]:
    """The example Deployment `app` applied in `namespace`; its pods once all are Running at home
    (typed Any: a Running pod has the metadata, spec and status the models leave optional)."""
    apply_deployment(home, example_deployment(app, namespace, replicas))
    pods: list[Any] = wait_until(
        lambda: all_running(home, namespace, app, replicas), timeout, f"{replicas} {app} pods Running at home"
    )
    return pods


def remote_pod(foreign: Client, twin: str, name: str) -> Pod | None:
    found: Pod | None = get_or_none(foreign, Pod, name, twin)
    return found


def home_view(home: Client, cluster_id: str, remote_ip: str) -> str:
    """The address a remote pod IP of `cluster_id` shows at home: remapped as its VirtualNode says."""
    from runtime.api import VirtualNodeSpec
    from runtime.api.resources import VirtualNodeResource
    from runtime.forging.pods import pod_cidr_mapping

    found = home.get(VirtualNodeResource, names.virtual_node_name(cluster_id), namespace=names.LIQO_NAMESPACE)
    mapping = pod_cidr_mapping(VirtualNodeSpec.model_validate(found["spec"]))
    return mapping.translate(remote_ip) if mapping else remote_ip


def restarts(pod: Pod) -> int:
    statuses = (pod.status.containerStatuses if pod.status else None) or []
    return sum(s.restartCount for s in statuses)


def metric_samples(url: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """One metric's samples from a component's /metrics, keyed by their sorted labels."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def queue_drained(url: str, queue: str) -> bool:
    """No key waits in the work queue `queue` of the component serving /metrics at `url`: each one
    added so far has been handed to a worker (its reconcile has begun)."""
    depth = metric_samples(url, "liqo_queue_depth")
    return all(value == 0 for labels, value in depth.items() if dict(labels)["queue"] == queue)


def pod_on_each_virtual_node(
    home: Client, namespace: str, prefix: str, container: str, annotations: dict[str, dict[str, str]] | None = None
) -> dict[str, str]:
    """One busybox pod pinned to each virtual node, Running at home: foreign cluster id -> pod name
    (the same in the twin). `annotations`: per cluster id, for the pod."""
    created = {}
    for cluster_id, node in VIRTUAL_NODES.items():
        name = f"{prefix}-{cluster_id}"
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        if annotations and cluster_id in annotations:
            metadata["annotations"] = annotations[cluster_id]
        body = {
            "metadata": metadata,
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [{"name": container, "image": "busybox:1.37"}],
            },
        }
        home.create(Pod.from_dict(body))  # type: ignore[call-overload]
        created[cluster_id] = name

    def running() -> bool:
        found = [home.get(Pod, name, namespace=namespace) for name in created.values()]
        return all(p.status is not None and p.status.phase == "Running" for p in found)

    wait_until(running, 90, "the pods Running at home")
    return created
