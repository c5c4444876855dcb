"""`liqo-stack preview pod`: reads the pod (or a manifest's) and what decides its fate from the home
cluster, then shows it as each foreign cluster would run it (liqo_stack/foreseeing/podpreview.py), and asks each
foreign cluster whether it admits the pod's ShadowPod: a dry run as the home identity (the credentials
its virtual kubelet uses), so its own admission policy answers, as it would for the real one
(docs/security.md). Nothing is stored there."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import click
import httpx2
import yaml
from lightkube import ApiError, Client, KubeConfig
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Node, PersistentVolumeClaim, Pod, Secret, Service

from liqo_stack import kube
from liqo_stack.foreseeing.podpreview import (
    WORKLOAD_KINDS,
    Cluster,
    PodContext,
    PodPreview,
    PreviewError,
    pod_of_manifest,
    preview_pod,
    render,
)
from liqo_stack.kube import get_or_none
from liqo_stack.operating.cli.offload import home_client, read_peers, with_cluster
from runtime.api import NamespaceMappingStrategy, VirtualNodeSpec, names, twin_namespace_name
from runtime.api.resources import NamespaceOffloadingResource, ShadowPodResource, VirtualNodeResource

HOME_ID_ARG = "--home-cluster-id="
OBJECT_KINDS: list[tuple[str, Any]] = [
    ("configmap", ConfigMap),
    ("secret", Secret),
    ("persistentvolumeclaim", PersistentVolumeClaim),
    ("service", Service),
]


def discover_home_cluster_id(client: Client) -> str:
    """The home cluster's id, as the stack gave it to the controller-manager (its `--home-cluster-id`)."""
    manager = get_or_none(client, Deployment, names.CONTROLLER_MANAGER, names.LIQO_NAMESPACE)
    containers = manager.spec.template.spec.containers if manager is not None and manager.spec else []
    for container in containers:
        for arg in container.args or []:
            if arg.startswith(HOME_ID_ARG):
                return str(arg.removeprefix(HOME_ID_ARG))
    raise click.UsageError(
        f"no Deployment {names.LIQO_NAMESPACE}/{names.CONTROLLER_MANAGER} tells the home cluster's id: is the "
        "stack applied to this cluster (pulumi up)? Else pass --home-cluster-id",
    )


def as_scheduled(virtual_nodes: list[Node]) -> dict[str, dict[str, Any]]:
    """The virtual Nodes' labels and taints by name: what the home scheduler matches a pod's own
    constraints against."""
    return {
        str(n.metadata.name): {
            "labels": dict(n.metadata.labels or {}),
            "taints": [t.to_dict() for t in (n.spec.taints if n.spec else None) or []],
        }
        for n in virtual_nodes
        if n.metadata is not None
    }


def read_context(client: Client, namespace: str, home_id: str) -> PodContext:
    nodes: dict[str, dict[str, VirtualNodeSpec]] = {}  # cluster id -> its virtual nodes' specs by name
    for found_node in client.list(VirtualNodeResource, namespace=names.LIQO_NAMESPACE):
        declared = VirtualNodeSpec.model_validate(found_node["spec"])
        nodes.setdefault(declared.cluster_id, {})[str(found_node["metadata"]["name"])] = declared
    virtual_nodes = list(client.list(Node, labels={names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE}))
    live = as_scheduled(virtual_nodes)
    clusters = []
    for peer in read_peers(client, virtual_nodes):
        own = nodes.get(peer.cluster_id) or {}
        whole = own.get(names.virtual_node_name(peer.cluster_id))
        live_nodes = {name: live[name] for name in own if name in live}
        if whole is not None and len(own) == 1:
            clusters.append(Cluster(peer.cluster_id, whole, peer.labels, live_nodes=live_nodes))
        elif own:  # node pools (and, while the stack replaces it, the whole cluster's node)
            # the cluster's settings are its primary node's, as its virtual kubelet takes them
            # (runtime/virtualkubelet/kubelet.py, served_nodes): the whole cluster's, else the first pool
            primary = whole if whole is not None else own[min(own)]
            clusters.append(Cluster(peer.cluster_id, primary, peer.labels, pools=own, live_nodes=live_nodes))
    found = get_or_none(client, NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace)
    offloading: dict[str, Any] | None = found.to_dict() if found is not None else None
    twin = None
    if offloading is not None:
        spec = offloading.get("spec") or {}
        twin = (offloading.get("status") or {}).get("remoteNamespaceName") or twin_namespace_name(
            namespace,
            NamespaceMappingStrategy(spec.get("namespaceMappingStrategy") or NamespaceMappingStrategy.DEFAULT_NAME),
            home_id,
            spec.get("remoteNamespaceName"),
        )
    objects = {
        kind: {str(o.metadata.name): o.to_dict() for o in client.list(resource, namespace=namespace)}
        for kind, resource in OBJECT_KINDS
    }
    return PodContext(home_id, clusters, offloading, twin, objects)


def manifest_pod(path: Path, name: str | None, namespace: str | None) -> dict[str, Any]:
    """The pod of the manifest's document named `name` (or its only one that makes pods)."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    except (OSError, yaml.YAMLError) as err:
        raise click.BadParameter(f"{path}: {err}", param_hint="--file") from err
    makers = [d for d in docs if d.get("kind") in ("Pod", "CronJob", *WORKLOAD_KINDS)]
    chosen = [d for d in makers if not name or (d.get("metadata") or {}).get("name") == name]
    if len(chosen) != 1:
        listed = ", ".join(f"{d.get('kind')} {(d.get('metadata') or {}).get('name')}" for d in makers) or "none"
        what = f"named {name!r}" if name else "(give NAME to choose one)"
        raise click.BadParameter(
            f"{path}: {len(chosen)} documents that make pods {what}; it has: {listed}", param_hint="--file"
        )
    try:
        pod = pod_of_manifest(chosen[0])
    except PreviewError as err:
        raise click.BadParameter(f"{path}: {err}", param_hint="--file") from err
    meta = pod["metadata"]
    if namespace and meta.get("namespace") and meta["namespace"] != namespace:
        raise click.BadParameter(
            f"the manifest says namespace {meta['namespace']}, -n says {namespace}", param_hint="--namespace"
        )
    meta["namespace"] = namespace or meta.get("namespace") or "default"
    return pod


def admitted(client: Client, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the home API server would store it (its defaults, the ServiceAccount token volume,
    the offloading webhook's constraints): a dry-run create, which stores nothing."""
    namespace = pod["metadata"]["namespace"]
    try:
        created = client.create(Pod.from_dict(pod), namespace=namespace, dry_run=True)  # type: ignore[call-overload]
    except ApiError as err:
        raise click.ClickException(
            f"the home API server refused the manifest's pod (a dry run, nothing was created): {err.status.message}"
        ) from err
    return dict(created.to_dict())


# answers of the foreign API server that are its admission's verdict on the ShadowPod (a 409: the name
# is taken, which storage says only after admission let it through)
REFUSED = (400, 403, 422)


def ask_foreign_admission(client: Client, preview: PodPreview) -> None:
    """Each cluster's answer to a dry-run create of the pod's ShadowPod, as the home identity."""
    identities: dict[str, Client | str] = {}
    for cluster in preview.clusters:
        if cluster.shadow is None or cluster.unplaced or cluster.refused:
            continue
        if cluster.cluster not in identities:
            identities[cluster.cluster] = _identity(client, cluster.cluster)
        identity = identities[cluster.cluster]
        if isinstance(identity, str):
            cluster.admission = identity
            continue
        shadow = {**cluster.shadow, "metadata": dict(cluster.shadow.get("metadata") or {})}
        shadow["metadata"]["name"] = shadow["metadata"].get("name") or "preview"
        try:
            identity.create(ShadowPodResource.from_dict(shadow), dry_run=True)
        except ApiError as err:
            if err.status.code == 409:
                cluster.admitted = True
            elif err.status.code == 404:
                cluster.admission = f"its twin namespace {cluster.twin} does not exist there yet"
            elif err.status.code in REFUSED:
                cluster.admitted, cluster.admission = False, str(err.status.message)
            else:
                cluster.admission = f"{cluster.cluster} answered {err.status.code}: {err.status.message}"
            continue
        except (httpx2.HTTPError, OSError) as err:
            cluster.admission = f"{cluster.cluster} did not answer: {err}"
            continue
        cluster.admitted = True


def _identity(client: Client, cluster_id: str) -> Client | str:
    """A client as the home identity in that cluster, or why there is none."""
    name = names.credentials_secret_name(cluster_id)
    try:
        secret: Any = client.get(Secret, name, namespace=names.LIQO_NAMESPACE)
        text = base64.b64decode(secret.data["kubeconfig"]).decode()
        return kube.client(KubeConfig.from_dict(yaml.safe_load(text)))
    except ApiError as err:
        return f"the home identity's credentials ({names.LIQO_NAMESPACE}/{name}) cannot be read: {err.status.message}"
    except (KeyError, TypeError, ValueError, yaml.YAMLError) as err:
        return f"the home identity's credentials ({names.LIQO_NAMESPACE}/{name}) are not a kubeconfig: {err}"


@click.command("pod")
@click.argument("name", required=False)
@click.option("--namespace", "-n", help="the pod's namespace [with --file: the manifest's, else default]")
@click.option(
    "--file",
    "-f",
    "manifest",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="a manifest not yet applied: a Pod, or a Deployment, StatefulSet, Job, CronJob... (its pod template); "
    "NAME picks one of its documents",
)
@click.option(
    "--output", "-o", type=click.Choice(["text", "yaml", "json"]), default="text", show_default=True, help="format"
)
@click.option("--home-cluster-id", help="[default: the one the stack gave the controller-manager]")
@with_cluster
def preview_pod_command(
    name: str | None,
    namespace: str | None,
    manifest: Path | None,
    output: str,
    home_cluster_id: str | None,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Show the pod as each foreign cluster it may go to would run it.

    For every cluster the namespace's cluster selector matches: the remote pod the virtual kubelet
    would create (forged by the runtime's own functions), what changed and why (scheduling
    constraints and host namespaces dropped, the anti-affinity preset, the RuntimeClass, the
    ServiceAccount token and the home API server), and the ConfigMaps, Secrets, claims, token and
    Services that follow it, or why each one stays home (reflection policy, liqo.io/skip-reflection,
    workers 0...).

    \b
    liqo-stack preview pod -n apps web-5d8f7-abcde
    liqo-stack preview pod -f deployment.yaml -n apps -o yaml
    """
    if manifest is None and not name:
        raise click.UsageError("give the pod's NAME (with -n NAMESPACE), or --file MANIFEST")
    if manifest is None and not namespace:
        raise click.BadParameter("the pod's namespace is required with NAME", param_hint="--namespace")
    from_file = manifest_pod(manifest, name, namespace) if manifest is not None else None
    client = home_client(kubeconfig, context)
    if manifest is not None and from_file is not None:
        pod = admitted(client, from_file)
        source = str(manifest)
    else:
        found = get_or_none(client, Pod, str(name), namespace)
        if found is None:
            raise click.ClickException(
                f"pod {namespace}/{name} not found in the home cluster: list them with `kubectl get pods -n "
                f"{namespace}`, or preview a manifest not yet applied with --file PATH"
            )
        pod = dict(found.to_dict())
        source = "home cluster"
    home_id = home_cluster_id or discover_home_cluster_id(client)
    context_read = read_context(client, pod["metadata"]["namespace"], home_id)
    try:
        preview = preview_pod(pod, context_read, source)
    except PreviewError as err:
        raise click.ClickException(str(err)) from err
    ask_foreign_admission(client, preview)
    click.echo(render(preview, output), nl=False)
    sys.exit(0)
