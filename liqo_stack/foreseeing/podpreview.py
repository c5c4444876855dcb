"""`liqo-stack preview pod`: what the runtime will make of one pod in each foreign cluster it may go to.

Pure: the caller reads the home cluster (`PodContext`); the remote pod is forged by the functions
the virtual kubelet and the foreign agent use (runtime.forging: `shadow_pod`, then `pod_of_shadow`),
and whether each object the pod uses follows it by the reflectors' own settings and policy
(runtime.forging.objects), so the preview and the runtime cannot drift. What this module adds is
only the telling: which fields changed and why (docs/reflection.md), and why an object stays home.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import pydantic
import yaml

from runtime.api import NodeSelector, PodOffloadingStrategy, VirtualNodeSpec, names
from runtime.api.namespaceoffloading import effective_strategy
from runtime.api.scheduling import affinity_mismatch, untolerated_taint
from runtime.api.selectors import selector_matches
from runtime.forging.objects import settings_from, why_not_reflected
from runtime.forging.pods import (
    HOME_SCHEDULING_FIELDS,
    TranslationError,
    pod_of_shadow,
    shadow_pod,
)
from runtime.forging.tokens import HOME_API_ENV, service_account_of, token_projections

# Kinds that make pods from `spec.template` (a CronJob's is in its jobTemplate).
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job", "ReplicationController")
HOST_NAMESPACES = ("hostNetwork", "hostIPC", "hostPID")


class PreviewError(ValueError):
    """The input cannot be previewed (a manifest of no pod, a pod the runtime refuses); says why."""


@dataclass(frozen=True)
class Cluster:
    """A foreign cluster as the home cluster sees it: its VirtualNode's spec (with pools, its primary
    one's: the cluster's settings) and its virtual node's labels (what a cluster selector matches).
    `pools`: a cluster offered as node pools has a virtual node per pool, by name, each with its
    VirtualNode's spec (its nodeSelector picks the foreign nodes the pool's pods run on); empty: the
    cluster is one virtual node, `spec`."""

    cluster_id: str
    spec: VirtualNodeSpec
    labels: dict[str, str]
    pools: dict[str, VirtualNodeSpec] = field(default_factory=dict)
    # its virtual Nodes at home by name, as the home scheduler sees them: {"labels": ..., "taints": [...]}
    # (wire format); a node missing here is not checked against the pod's own constraints
    live_nodes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def virtual_nodes(self) -> dict[str, VirtualNodeSpec]:
        """Its virtual nodes by name, each with its VirtualNode's spec."""
        return self.pools or {names.virtual_node_name(self.cluster_id): self.spec}


@dataclass
class PodContext:
    """What the preview of one pod reads from the home cluster."""

    home_cluster_id: str
    clusters: list[Cluster]
    # the namespace's NamespaceOffloading (wire format); None: the namespace is not offloaded
    offloading: dict[str, Any] | None
    twin: str | None  # its twin namespace's name
    # home objects of the pod's namespace by kind ("configmap", "secret", "persistentvolumeclaim",
    # "service"), keyed by name
    objects: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)


@dataclass
class Follower:
    """An object the pod uses (or a Service selecting it), and whether it follows the pod there."""

    kind: str
    name: str
    reflected: bool
    why: str


@dataclass
class ClusterPreview:
    cluster: str
    twin: str
    node: str = ""  # the virtual node (a node pool's, when the cluster has pools)
    changes: list[str] = field(default_factory=list)
    remote_pod: dict[str, Any] | None = None
    refused: str | None = None  # the runtime would not offload the pod (OffloadingBackOff): why
    unplaced: str | None = None  # the home scheduler never binds the pod to this virtual node: why
    objects: list[Follower] = field(default_factory=list)
    shadow: dict[str, Any] | None = None  # the ShadowPod the virtual kubelet would create there
    # the foreign cluster's own answer to that ShadowPod (a dry run as the home identity: its admission
    # policy); None: not asked. `admitted` False: `admission` is its refusal; True: it would store it.
    admitted: bool | None = None
    admission: str | None = None


@dataclass
class PodPreview:
    namespace: str
    name: str
    source: str  # "home cluster" or the manifest's path
    strategy: str | None
    stays_home: str | None  # why the pod never goes to a foreign cluster, if it never does
    clusters: list[ClusterPreview] = field(default_factory=list)
    running_in: str | None = None  # the foreign cluster whose virtual node the live pod is bound to

    def as_dict(self) -> dict[str, Any]:
        return {
            "pod": {
                "namespace": self.namespace,
                "name": self.name,
                "source": self.source,
                "runningIn": self.running_in,
            },
            "podOffloadingStrategy": self.strategy,
            "staysHome": self.stays_home,
            "clusters": [
                {
                    "cluster": c.cluster,
                    "node": c.node,
                    "twin": c.twin,
                    "changes": c.changes,
                    "refused": c.refused,
                    "unplaced": c.unplaced,
                    "foreignAdmission": None
                    if c.admitted is None and c.admission is None
                    else {"admitted": c.admitted, "message": c.admission},
                    "remotePod": c.remote_pod,
                    "objects": [asdict(o) for o in c.objects],
                }
                for c in self.clusters
            ],
        }


# -- a manifest's pod -------------------------------------------------------------------------------


def pod_of_manifest(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The pod a manifest makes: a Pod itself, a workload's pod template (a CronJob's job's), labelled
    and annotated as the template says; its name is the workload's, made unique by the API server."""
    kind = doc.get("kind")
    meta = doc.get("metadata") or {}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": dict(meta), "spec": dict(doc.get("spec") or {})}
    spec = doc.get("spec") or {}
    if kind == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    elif kind not in WORKLOAD_KINDS:
        raise PreviewError(f"kind {kind!r} makes no pod: give a Pod, a CronJob or one of {', '.join(WORKLOAD_KINDS)}")
    template = spec.get("template")
    if not isinstance(template, Mapping) or not (template.get("spec") or {}).get("containers"):
        raise PreviewError(f"{kind} {meta.get('name')}: spec.template has no pod spec with containers")
    pod_meta = dict(template.get("metadata") or {})
    pod_meta.pop("name", None)
    pod_meta["generateName"] = f"{meta.get('name') or 'pod'}-"
    if meta.get("namespace"):
        pod_meta["namespace"] = meta["namespace"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": dict(template["spec"])}


# -- where the pod may go -----------------------------------------------------------------------------


def selected(context: PodContext) -> list[Cluster]:
    """The clusters the namespace's cluster selector matches, by their virtual nodes' labels."""
    spec = (context.offloading or {}).get("spec") or {}
    selector = NodeSelector.model_validate(spec.get("clusterSelector") or {})
    return [c for c in context.clusters if selector_matches(selector, c.labels)]


def preview_pod(pod: dict[str, Any], context: PodContext, source: str) -> PodPreview:
    meta = pod.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    preview = PodPreview(namespace, name, source, None, None)
    bound = str((pod.get("spec") or {}).get("nodeName") or "")
    preview.running_in = next((c.cluster_id for c in context.clusters if bound in c.virtual_nodes()), None)
    if context.offloading is None or context.twin is None:
        preview.stays_home = (
            f"namespace {namespace} is not offloaded: `liqo-stack offload namespace {namespace}` offloads it"
        )
        return preview
    declared = PodOffloadingStrategy(
        ((context.offloading.get("spec") or {}).get("podOffloadingStrategy")) or PodOffloadingStrategy.LOCAL_AND_REMOTE
    )
    strategy = effective_strategy(pod, declared)
    preview.strategy = strategy.value
    if strategy is PodOffloadingStrategy.LOCAL:
        preview.stays_home = (
            f"namespace {namespace} offloads with podOffloadingStrategy Local: its pods run at home "
            f"(runtimeClassName {names.RUNTIME_CLASS_NAME} would send this one to a foreign cluster)"
        )
        return preview
    clusters = selected(context)
    if not clusters:
        preview.stays_home = f"the cluster selector of namespace {namespace} matches no virtual node"
    for cluster in clusters:
        nodes = cluster.virtual_nodes()
        # a pod bound to a pool's virtual node runs on that pool's nodes there; one not yet bound may
        # go to any pool the home scheduler picks, as its own constraints allow: each is shown
        for node_name in [bound] if bound in nodes else sorted(nodes):
            live = cluster.live_nodes.get(node_name)
            why = None if bound in nodes or live is None else unplaced_on(pod.get("spec") or {}, node_name, live)
            if why is not None:
                preview.clusters.append(ClusterPreview(cluster.cluster_id, context.twin or "", node_name, unplaced=why))
            else:
                preview.clusters.append(preview_in(pod, cluster, context, node_name))
    return preview


def unplaced_on(spec: Mapping[str, Any], node_name: str, live: Mapping[str, Any]) -> str | None:
    """Why the home scheduler never binds a pod of this spec to the virtual node (its nodeSelector, its
    required node affinity, a taint it does not tolerate); None: it may."""
    try:
        why = affinity_mismatch(spec, node_name, live.get("labels") or {})
    except pydantic.ValidationError as err:
        raise PreviewError(f"spec.affinity.nodeAffinity: a node selector term the API server refuses: {err}") from None
    if why is not None:
        return why
    taint = untolerated_taint(spec.get("tolerations") or [], live.get("taints") or [])
    if taint is not None:
        shown = f"{taint.get('key')}={taint.get('value') or ''}:{taint.get('effect')}"
        return f"it does not tolerate the taint {shown} of {node_name}"
    return None


def preview_in(pod: dict[str, Any], cluster: Cluster, context: PodContext, node_name: str) -> ClusterPreview:
    """The pod on virtual node `node_name` of `cluster`, forged as its virtual kubelet forges it: with the
    cluster's settings (its primary VirtualNode's) and the node's pool selector (runtime/virtualkubelet/pods.py)."""
    twin = context.twin or ""
    result = ClusterPreview(cluster.cluster_id, twin, node_name)
    try:
        shadow = shadow_pod(
            pod,
            twin=twin,
            home_cluster_id=context.home_cluster_id,
            foreign_cluster_id=cluster.cluster_id,
            node=cluster.spec,
            node_selector=cluster.virtual_nodes()[node_name].offloading_patch.node_selector,
        )
    except TranslationError as err:
        result.refused = f"stays Pending at home (reason OffloadingBackOff): {err}"
        return result
    remote = pod_of_shadow(shadow)
    result.shadow = shadow
    result.remote_pod = remote
    result.changes = changes(pod, remote, cluster.spec)
    result.objects = followers(pod, remote, cluster, context)
    return result


# -- what changed, and why ----------------------------------------------------------------------------


def _labels_text(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _anti_affinity_text(affinity: Mapping[str, Any]) -> str:
    """`required on app=web per kubernetes.io/hostname`, one per term."""
    anti = affinity.get("podAntiAffinity") or {}
    required = anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []
    preferred = [
        t.get("podAffinityTerm") or {} for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    ]
    shown = []
    for how, term in [("required", t) for t in required] + [("preferred", t) for t in preferred]:
        labels = (term.get("labelSelector") or {}).get("matchLabels")
        shown.append(f"{how} on {_labels_text(labels) if labels else 'its own selector'} per {term.get('topologyKey')}")
    return "; ".join(shown)


def changes(home_pod: Mapping[str, Any], remote: Mapping[str, Any], node: VirtualNodeSpec) -> list[str]:
    """Each difference between the home pod's spec and the remote one, with docs/reflection.md's reason."""
    home = home_pod.get("spec") or {}
    there = remote.get("spec") or {}
    annotations = (home_pod.get("metadata") or {}).get("annotations") or {}
    told: list[str] = []
    preset = annotations.get(names.ANTI_AFFINITY_PRESET_ANNOTATION)
    for key in HOME_SCHEDULING_FIELDS:
        if key == "affinity" and there.get("affinity"):
            told.append(
                f"affinity: replaced by the anti-affinity preset {preset} "
                f"({names.ANTI_AFFINITY_PRESET_ANNOTATION}): pod anti-affinity {_anti_affinity_text(there['affinity'])}"
            )
        elif key in home:
            told.append(f"{key}: dropped (a scheduling constraint of the home cluster)")
    for key in HOST_NAMESPACES:
        if home.get(key):
            told.append(f"{key}: true -> false (host namespaces are disabled for offloaded pods)")
    runtime_class = home.get("runtimeClassName")
    if runtime_class == names.RUNTIME_CLASS_NAME:
        told.append(
            f"runtimeClassName: {names.RUNTIME_CLASS_NAME} dropped (it only sends the pod to a virtual node): "
            "the foreign cluster's default runtime runs it"
        )
    elif runtime_class:
        told.append(f"runtimeClassName: {runtime_class} kept: the foreign cluster must have that RuntimeClass")
    else:
        told.append("runtimeClassName: none, the foreign cluster's default runtime runs it")
    dropped = [t for t in home.get("tolerations") or [] if t not in (there.get("tolerations") or [])]
    if dropped:
        told.append(
            f"tolerations: {', '.join(str(t.get('key')) for t in dropped)} dropped (it would let the pod onto "
            "a virtual node of the foreign cluster)"
        )
    told += _token_changes(home_pod, home, there, node)
    return told


def _token_changes(
    home_pod: Mapping[str, Any], home: Mapping[str, Any], there: Mapping[str, Any], node: VirtualNodeSpec
) -> list[str]:
    told = []
    account = service_account_of(home_pod)
    if token_projections(home_pod):
        if node.api_server_token_support:
            secret = names.token_secret_name(str((home_pod.get("metadata") or {}).get("name") or "<pod name>"))
            changed = [
                v["name"]
                for v in there.get("volumes") or []
                if any("secret" in s for s in (v.get("projected") or {}).get("sources") or [])
                and v not in (home.get("volumes") or [])
            ]
            told.append(
                f"volumes {', '.join(changed)}: the token(s), CA and namespace come from Secret {secret}, tokens of "
                f"ServiceAccount {account} issued by the HOME API server (renewed at 80% of their life)"
            )
            if node.home_api_server is not None:
                address = f"{node.home_api_server.host}:{node.home_api_server.port}"
                told.append(
                    f"env {', '.join(HOME_API_ENV)}: the home API server, {address} (values set by the pod stay)"
                )
            else:
                told.append(
                    "env: no home API server address is declared on the VirtualNode: containers reach the foreign "
                    "API server with the home token"
                )
        else:
            gone = [v["name"] for v in home.get("volumes") or [] if v not in (there.get("volumes") or [])]
            told.append(
                f"volumes {', '.join(gone) or '(token)'}: dropped with their mounts (apiServerTokenSupport is off "
                "on the VirtualNode: the remote pod mounts no token)"
            )
    if home.get("serviceAccountName") or home.get("serviceAccount"):
        told.append(
            f"serviceAccountName: {account} dropped, automountServiceAccountToken false (the foreign cluster "
            "mounts no token of its own)"
        )
    return told


# -- the objects that follow the pod --------------------------------------------------------------------


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield from spec.get("initContainers") or []
    yield from spec.get("containers") or []


def references(spec: Mapping[str, Any]) -> dict[str, list[str]]:
    """The ConfigMaps, Secrets and claims a pod spec names (volumes, env, envFrom, image pull
    Secrets), each once, in the order the spec names them."""
    found: dict[str, list[str]] = {"configmap": [], "secret": [], "persistentvolumeclaim": []}

    def add(kind: str, name: Any) -> None:
        if name and name not in found[kind]:
            found[kind].append(str(name))

    for volume in spec.get("volumes") or []:
        add("configmap", (volume.get("configMap") or {}).get("name"))
        add("secret", (volume.get("secret") or {}).get("secretName"))
        add("persistentvolumeclaim", (volume.get("persistentVolumeClaim") or {}).get("claimName"))
        for source in (volume.get("projected") or {}).get("sources") or []:
            add("configmap", (source.get("configMap") or {}).get("name"))
            add("secret", (source.get("secret") or {}).get("name"))
    for container in _containers(spec):
        for env in container.get("env") or []:
            ref = env.get("valueFrom") or {}
            add("configmap", (ref.get("configMapKeyRef") or {}).get("name"))
            add("secret", (ref.get("secretKeyRef") or {}).get("name"))
        for source in container.get("envFrom") or []:
            add("configmap", (source.get("configMapRef") or {}).get("name"))
            add("secret", (source.get("secretRef") or {}).get("name"))
    for pull in spec.get("imagePullSecrets") or []:
        add("secret", pull.get("name"))
    return found


KIND_NAMES = {
    "configmap": "ConfigMap",
    "secret": "Secret",
    "persistentvolumeclaim": "PersistentVolumeClaim",
    "service": "Service",
}


def followers(
    home_pod: Mapping[str, Any], remote: Mapping[str, Any], cluster: Cluster, context: PodContext
) -> list[Follower]:
    """What the REMOTE pod names (so the token Secret replaces the home token volume's sources), and
    the Services selecting the pod: each reflected to the twin, or why not."""
    twin = context.twin or ""
    token_secret = names.token_secret_name(str((home_pod.get("metadata") or {}).get("name") or ""))
    found: list[Follower] = []
    for kind, wanted in references(remote.get("spec") or {}).items():
        for name in wanted:
            if kind == "secret" and name == token_secret and token_projections(home_pod):
                account = service_account_of(home_pod)
                found.append(
                    Follower(
                        "ServiceAccount token",
                        name,
                        True,
                        f"written to {twin}/{name} by the token reflector: tokens of ServiceAccount {account} "
                        "from the home API server",
                    )
                )
                continue
            obj = context.objects.get(kind, {}).get(name)
            if obj is None:
                found.append(
                    Follower(
                        KIND_NAMES[kind],
                        name,
                        False,
                        "not found at home: the remote pod waits for it as a local one would",
                    )
                )
            elif kind == "persistentvolumeclaim":
                found.append(_claim(obj, cluster, twin))
            else:
                why = why_not_reflected(kind, obj, settings_from(cluster.spec, kind))
                found.append(Follower(KIND_NAMES[kind], name, why is None, why or f"reflected to {twin}/{name}"))
    if token_projections(home_pod) and not cluster.spec.api_server_token_support:
        found.append(
            Follower(
                "ServiceAccount token",
                service_account_of(home_pod),
                False,
                "apiServerTokenSupport is off on the VirtualNode: no token of the home API server goes there",
            )
        )
    labels = (home_pod.get("metadata") or {}).get("labels") or {}
    for name, service in sorted(context.objects.get("service", {}).items()):
        if not selects(service, labels):
            continue
        why = why_not_reflected("service", service, settings_from(cluster.spec, "service"))
        found.append(
            Follower(
                "Service",
                name,
                why is None,
                why or f"reflected to {twin}/{name} (selects the pod; its EndpointSlices follow it)",
            )
        )
    return found


def selects(service: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """The Service's selector picks a pod with these labels (a Service without one selects none)."""
    selector = (service.get("spec") or {}).get("selector") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _claim(claim: Mapping[str, Any], cluster: Cluster, twin: str) -> Follower:
    """docs/reflection.md's storage fabric: only claims of class `liqo` follow their (first) pod."""
    meta = claim.get("metadata") or {}
    spec = claim.get("spec") or {}
    name = str(meta.get("name"))
    if spec.get("storageClassName") != names.STORAGE_CLASS_NAME:
        return Follower(
            "PersistentVolumeClaim",
            name,
            False,
            f"class {spec.get('storageClassName') or '(default)'}: only claims of StorageClass "
            f"{names.STORAGE_CLASS_NAME} follow their pod to a foreign cluster",
        )
    node = (meta.get("annotations") or {}).get(names.SELECTED_NODE_ANNOTATION)
    if node and node not in cluster.virtual_nodes():
        return Follower("PersistentVolumeClaim", name, False, f"provisioned for node {node}: pods mounting it go there")
    remote_class = cluster.spec.remote_storage_class() or "the foreign cluster's default"
    return Follower(
        "PersistentVolumeClaim",
        name,
        True,
        f"created in {twin}/{name} with StorageClass {remote_class} when its first pod goes there",
    )


# -- output ---------------------------------------------------------------------------------------------


def render(preview: PodPreview, output: str) -> str:
    """`text` for people; `yaml` and `json` carry the same content, the remote pods whole."""
    if output == "json":
        return json.dumps(preview.as_dict(), indent=2) + "\n"
    if output == "yaml":
        return str(yaml.safe_dump(preview.as_dict(), sort_keys=False))
    lines = [f"pod {preview.namespace}/{preview.name or '(name given at creation)'} ({preview.source})"]
    if preview.stays_home:
        lines.append(f"stays in the home cluster: {preview.stays_home}")
    elif preview.strategy:
        placed = ", ".join(dict.fromkeys(c.cluster for c in preview.clusters if c.unplaced is None))
        lines.append(
            f"podOffloadingStrategy {preview.strategy}: may run in "
            + (placed or "no foreign cluster (its own constraints leave out every virtual node)")
            + (" or at home" if preview.strategy == PodOffloadingStrategy.LOCAL_AND_REMOTE.value else "")
        )
    for cluster in preview.clusters:
        here = " (the pod runs here now)" if cluster.cluster == preview.running_in else ""
        pool = f", virtual node {cluster.node}" if cluster.node != names.virtual_node_name(cluster.cluster) else ""
        lines += ["", f"== {cluster.cluster} (twin namespace {cluster.twin}{pool}){here} =="]
        if cluster.unplaced:
            lines.append(f"not placed here by the home scheduler: {cluster.unplaced}")
            continue
        if cluster.refused:
            lines.append(f"not offloaded: {cluster.refused}")
            continue
        if cluster.admitted is False:
            lines.append(f"refused by {cluster.cluster} (its admission, asked with a dry run): {cluster.admission}")
            lines.append("  the pod would stay Pending at home (reason FailedOffloading) with this message")
            continue
        if cluster.admission:
            lines.append(f"{cluster.cluster}'s admission not asked: {cluster.admission}")
        elif cluster.admitted:
            lines.append(f"{cluster.cluster} admits its ShadowPod (a dry run as the home identity)")
        lines.append("What changes:")
        lines += [f"  {change}" for change in cluster.changes]
        lines.append("Objects that follow the pod:")
        lines += [
            f"  {o.kind} {o.name}: {'reflected' if o.reflected else 'skipped'}: {o.why}" for o in cluster.objects
        ] or ["  none"]
        lines.append("Remote pod (the ShadowPod's, created by the foreign agent):")
        body = yaml.safe_dump(cluster.remote_pod, sort_keys=False).rstrip().splitlines()
        lines += [f"  {line}" for line in body]
    return "\n".join(lines) + "\n"
