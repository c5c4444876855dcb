"""What a stack change will do to running workloads: `liqo-stack preview` and `liqo-stack promote`.

A resource diff says "NamespaceOffloading updated"; this says which twin namespace will be deleted with
how many pods and objects in it, which pods lose their virtual node or no longer fit a shrunk one (or
fit its sum but no single foreign node behind it), which
twins are new and which of those will fail on a name conflict, and, per namespace, what a changed
reflection policy or offloading patch does to the pods running remotely (their labels and annotations
there, the objects they use that stop or start following them; runtime.forging decides, as at run
time), and which custom objects a change of the custom resource types starts, stops or stops updating
the copies of. The new state comes from the stack config through the same plan functions the runtime uses
(liqo_stack/declaring/plan.py, runtime/api/plan.py); the current state is read from the live clusters
(`Snapshot.read`), so the computation itself is pure (`effects`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from decimal import Decimal
from typing import Any

from lightkube.utils.quantity import parse_quantity

from liqo_stack.declaring.config import (
    ClusterAccess,
    ForeignCluster,
    NamespaceOffloadingConfig,
    StackConfig,
    VirtualNodeConfig,
)
from liqo_stack.declaring.plan import virtual_node_spec
from liqo_stack.foreseeing.podpreview import references, selects
from liqo_stack.foreseeing.policy import is_not_found
from runtime.api import CustomResourceReflection, NamespaceMappingStrategy, VirtualNodeSpec, names
from runtime.api.advertisement import LARGEST_POD_LABELS, as_quantity, largest_pod_labels, pool_offer
from runtime.api.namespaceselector import is_system_namespace, label_selector_matches
from runtime.api.plan import selected_clusters, shared_resources, twin_namespace_name, virtual_node_labels
from runtime.forging.objects import ReflectionSettings, settings_from, why_not_reflected
from runtime.forging.pods import remote_pod_metadata, skip_lists

# Kinds counted in a twin namespace that is about to be deleted (besides its pods): what reflection put
# there and what the remote pods wrote; PersistentVolumeClaims are data.
COUNTED_KINDS = ("configmaps", "secrets", "services", "persistentvolumeclaims")


@dataclass(frozen=True)
class TwinState:
    """A twin namespace in a foreign cluster, as it is now."""

    exists: bool
    ours: bool  # carries our origin label for this home cluster
    pods: int = 0
    objects: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PodOnNode:
    namespace: str
    name: str
    requests: dict[str, str]
    # the pod (wire format: metadata and spec), for what reflection settings do to it
    manifest: dict[str, Any] = field(default_factory=dict, compare=False)
    node: str = ""  # the virtual node it is on (a cluster offered as node pools has several)


@dataclass
class Snapshot:
    """The live state the effects are computed against."""

    # namespace -> (managed by the stack, clusters it is offloaded to now, twin name)
    offloadings: dict[str, tuple[bool, list[str], str | None]] = field(default_factory=dict)
    # cluster id -> labels of its virtual Node at home that the stack did not declare (an admin's)
    extra_node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    # cluster id -> what it advertises (before the sharing percentage)
    offered: dict[str, dict[str, str]] = field(default_factory=dict)
    # cluster id -> its advertisement's spec (with the per-node figures, `nodes`)
    advertisements: dict[str, dict[str, Any]] = field(default_factory=dict)
    # cluster id -> pods at home on its virtual node (oldest first)
    pods_on_node: dict[str, list[PodOnNode]] = field(default_factory=dict)
    # (cluster id, namespace name) -> its state in that foreign cluster
    twins: dict[tuple[str, str], TwinState] = field(default_factory=dict)
    # cluster id -> its VirtualNode's spec as applied now
    node_specs: dict[str, VirtualNodeSpec] = field(default_factory=dict)
    # namespace with pods on a virtual node -> kind (configmap, secret, service) -> name -> object
    home_objects: dict[str, dict[str, dict[str, dict[str, Any]]]] = field(default_factory=dict)
    # home namespace -> its labels (what the stack's namespaceSelectors match)
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    # custom resource type (its CRD's name) -> offloaded namespace -> its objects at home (wire format)
    custom_objects: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    # foreign cluster id -> custom resource type -> why the CRDs keep it from there (only those that do)
    foreign_crd_problems: dict[str, dict[str, str]] = field(default_factory=dict)
    # home namespace -> the NamespaceOffloadingSelector that made its offloading
    selector_owned: dict[str, str] = field(default_factory=dict)
    # the NamespaceOffloadingSelectors the stack declared (the others, made with the CLI, are not its to remove)
    stack_selectors: set[str] = field(default_factory=set)

    @classmethod
    def read(cls, config: StackConfig, clients: dict[str, Any]) -> Snapshot:
        """From the live clusters (`clients`: cluster id -> lightkube Client; home included)."""
        return _read_snapshot(config, clients)


@dataclass
class Effects:
    twins_deleted: list[dict[str, Any]] = field(default_factory=list)
    pods_losing_node: list[dict[str, Any]] = field(default_factory=list)
    nodes_shrunk: list[dict[str, Any]] = field(default_factory=list)
    # pods on a virtual node that fit its sum but no single foreign node behind it (with the planned share)
    pods_no_foreign_node_fits: list[dict[str, Any]] = field(default_factory=list)
    twins_created: list[dict[str, Any]] = field(default_factory=list)
    naming_conflicts: list[dict[str, Any]] = field(default_factory=list)
    policy_violations: list[dict[str, str]] = field(default_factory=list)
    # per namespace and cluster: running pods whose remote labels or objects a reflection change touches
    running_pods_reflection: list[dict[str, Any]] = field(default_factory=list)
    # custom objects in twinned namespaces whose copy a change of liqo:reflection.customResources makes,
    # freezes or deletes
    custom_objects_reflection: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def any(self) -> bool:
        return any(
            (
                self.twins_deleted,
                self.pods_losing_node,
                self.nodes_shrunk,
                self.pods_no_foreign_node_fits,
                self.twins_created,
                self.naming_conflicts,
                self.policy_violations,
                self.running_pods_reflection,
                self.custom_objects_reflection,
            )
        )

    def needs_approval(self) -> bool:
        """Effects a human should see before `up`: anything destructive, failing or denied (a copy that
        running pods use deleted from their twin is)."""
        copies_deleted = any(o["after"] == DELETED for e in self.running_pods_reflection for o in e["objects"]) or any(
            o["after"] == DELETED for o in self.custom_objects_reflection
        )
        return bool(
            self.twins_deleted or self.pods_losing_node or self.nodes_shrunk or self.naming_conflicts or copies_deleted
        ) or any(v.get("enforcement") == "mandatory" for v in self.policy_violations)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


NOT_SELECTED = "cluster no longer selected"


def twin_deleted(namespace: str, cluster_id: str, twin: str | None, state: TwinState, why: str) -> dict[str, Any]:
    """One entry of `Effects.twins_deleted`: the twin with what is in it (pods and COUNTED_KINDS)."""
    return {
        "namespace": namespace,
        "cluster": cluster_id,
        "twin": twin,
        "pods": state.pods,
        "objects": dict(state.objects),
        "dataAtRisk": state.pods > 0 or sum(state.objects.values()) > 0,
        "why": why,
    }


def pods_losing_node(namespace: str, cluster_id: str, pods: list[PodOnNode]) -> list[dict[str, Any]]:
    """Entries of `Effects.pods_losing_node`: the pods of `namespace` on the virtual node of a twin deleted."""
    return [
        {"pod": f"{pod.namespace}/{pod.name}", "node": names.virtual_node_name(cluster_id), "why": "twin deleted"}
        for pod in pods
        if pod.namespace == namespace
    ]


def count_twin(client: Any, twin: str) -> tuple[int, dict[str, int]]:
    """Pods, and objects of COUNTED_KINDS (not those every namespace has), in a twin namespace.

    Needs only list rights in the twin: the home identity's credentials (`liqo-stack offload`) do."""
    from lightkube.resources.core_v1 import ConfigMap, PersistentVolumeClaim, Pod, Secret, Service

    pods = len(list(client.list(Pod, namespace=twin)))
    kinds: list[tuple[str, Any]] = [
        ("configmaps", ConfigMap),
        ("secrets", Secret),
        ("services", Service),
        ("persistentvolumeclaims", PersistentVolumeClaim),
    ]
    objects = {}
    for kind_name, kind in kinds:
        listed = [o for o in client.list(kind, namespace=twin) if not _built_in(kind_name, o)]
        if listed:
            objects[kind_name] = len(listed)
    return pods, objects


def planned_selection(config: StackConfig, snapshot: Snapshot) -> dict[str, tuple[list[str], str]]:
    """Per namespace declared in the stack: the clusters it will be offloaded to, and the twin name."""
    labels = {
        f.cluster_id: {
            **snapshot.extra_node_labels.get(f.cluster_id, {}),
            **virtual_node_labels(f.cluster_id, f.labels),
        }
        for f in config.foreign_clusters
    }
    plan = {}
    for ns in config.namespaces:
        twin = twin_namespace_name(
            ns.name, ns.namespace_mapping_strategy, config.home.cluster_id, ns.remote_namespace_name
        )
        plan[ns.name] = (selected_clusters(ns.selector(), labels), twin)
    # the namespaces the stack's selectors match now, as the controller-manager picks their owner (first by
    # name); one offloaded by hand or by a selector the CLI made stays as it is
    for namespace, namespace_labels in sorted(snapshot.namespace_labels.items()):
        now = snapshot.offloadings.get(namespace)
        owner = snapshot.selector_owned.get(namespace)
        if namespace in plan or is_system_namespace(namespace) or (now and owner not in snapshot.stack_selectors):
            continue
        for declared in sorted(config.namespace_selectors, key=lambda s: s.name):
            spec = declared.spec()
            if label_selector_matches(spec.namespace_selector, namespace_labels):
                strategy = NamespaceMappingStrategy(spec.namespace_mapping_strategy)
                twin = (now[2] if now else None) or twin_namespace_name(namespace, strategy, config.home.cluster_id)
                plan[namespace] = (selected_clusters(spec.cluster_selector, labels), twin)
                break
    return plan


def _amount(quantity: str) -> Decimal:
    return parse_quantity(quantity) or Decimal(0)


def effects(config: StackConfig, snapshot: Snapshot) -> Effects:
    found = Effects()
    plan = planned_selection(config, snapshot)
    peered = {f.cluster_id for f in config.foreign_clusters}

    # -- twins that go: a cluster no longer selected, a namespace no longer declared, a peering removed
    for namespace, (managed, clusters, twin) in sorted(snapshot.offloadings.items()):
        by_stack_selector = snapshot.selector_owned.get(namespace) in snapshot.stack_selectors
        managed = managed or by_stack_selector
        if namespace in plan:
            kept = set(plan[namespace][0])
        elif managed:
            kept = set()  # the stack deletes its NamespaceOffloading: unoffloaded everywhere
        else:
            kept = set(clusters) & peered  # offloaded by hand: only a removed peering takes it away
        for cluster_id in clusters:
            if cluster_id in kept:
                continue
            state = snapshot.twins.get((cluster_id, twin or ""), TwinState(exists=False, ours=True))
            why = (
                "peering removed"
                if cluster_id not in peered
                else (
                    (
                        "no namespace selector of the stack matches it any more"
                        if by_stack_selector
                        else "namespace no longer offloaded by the stack"
                    )
                    if namespace not in plan
                    else NOT_SELECTED
                )
            )
            found.twins_deleted.append(twin_deleted(namespace, cluster_id, twin, state, why))
            found.pods_losing_node += pods_losing_node(namespace, cluster_id, snapshot.pods_on_node.get(cluster_id, []))

    # -- a peering removed: every pod on its virtual node loses it
    for cluster_id, pods in sorted(snapshot.pods_on_node.items()):
        if cluster_id in peered:
            continue
        listed = {p["pod"] for p in found.pods_losing_node}
        for pod in pods:
            if f"{pod.namespace}/{pod.name}" not in listed:
                found.pods_losing_node.append(
                    {
                        "pod": f"{pod.namespace}/{pod.name}",
                        "node": names.virtual_node_name(cluster_id),
                        "why": "peering removed",
                    }
                )

    # -- virtual nodes that shrink below what their pods request
    for foreign in config.foreign_clusters:
        offered = snapshot.offered.get(foreign.cluster_id)
        pods = snapshot.pods_on_node.get(foreign.cluster_id, [])
        if not offered or not pods:
            continue
        capacity = shared_resources(offered, config.sharing_of(foreign), foreign.fixed_resources).capacity
        requested: dict[str, Decimal] = defaultdict(Decimal)
        for pod in pods:
            for resource, quantity in pod.requests.items():
                requested[resource] += _amount(quantity)
        short = {
            r: {"requested": str(requested[r].normalize()), "newCapacity": capacity[r]}
            for r in sorted(requested)
            if r in capacity and requested[r] > _amount(capacity[r])
        }
        if not short:
            continue
        # the pods beyond the new capacity, oldest kept first (as a scheduler filling the node would)
        used: dict[str, Decimal] = defaultdict(Decimal)
        not_fitting = []
        for pod in pods:
            fits = True
            for resource, quantity in pod.requests.items():
                if resource in short and used[resource] + _amount(quantity) > _amount(capacity[resource]):
                    fits = False
            if fits:
                for resource, quantity in pod.requests.items():
                    used[resource] += _amount(quantity)
            else:
                not_fitting.append(f"{pod.namespace}/{pod.name}")
        found.nodes_shrunk.append(
            {
                "cluster": foreign.cluster_id,
                "node": names.virtual_node_name(foreign.cluster_id),
                "sharingPercentage": config.sharing_of(foreign),
                "resources": short,
                "podsNotFitting": not_fitting,
            }
        )

    found.pods_no_foreign_node_fits = pods_no_foreign_node_fits(config, snapshot)

    # -- new twins, and those whose name is taken in the foreign cluster by a namespace not ours
    for namespace, (clusters, twin) in sorted(plan.items()):
        now = snapshot.offloadings.get(namespace)
        current = set(now[1]) if now else set()
        for cluster_id in clusters:
            if cluster_id in current:
                continue
            existing = snapshot.twins.get((cluster_id, twin))
            if existing is not None and existing.exists and not existing.ours:
                found.naming_conflicts.append(
                    {
                        "namespace": namespace,
                        "cluster": cluster_id,
                        "twin": twin,
                        "why": f"namespace {twin} exists in {cluster_id} and was not created by liqo-stack for this "
                        f"home cluster: the offloading will fail there (change the namespaceMappingStrategy)",
                    }
                )
            else:
                found.twins_created.append({"namespace": namespace, "cluster": cluster_id, "twin": twin})

    # -- running pods under new reflection settings (policies, workers, labels/annotations not reflected)
    for foreign in config.foreign_clusters:
        old = snapshot.node_specs.get(foreign.cluster_id)
        if old is None:
            continue  # a new peering: nothing runs there yet
        new = virtual_node_spec(config, foreign)  # the VirtualNode the stack will apply
        if (old.reflection, old.offloading_patch) == (new.reflection, new.offloading_patch):
            continue
        by_namespace: dict[str, list[PodOnNode]] = defaultdict(list)
        for pod in snapshot.pods_on_node.get(foreign.cluster_id, []):
            by_namespace[pod.namespace].append(pod)
        for namespace, running in sorted(by_namespace.items()):
            entry = reflection_change(
                config.home.cluster_id, foreign.cluster_id, running, snapshot.home_objects.get(namespace, {}), old, new
            )
            if entry is not None:
                found.running_pods_reflection.append({"namespace": namespace, **entry})

    # -- custom objects under new liqo:reflection.customResources (every object of a type is reflected
    # into each twin of its namespace, whether or not a pod uses it)
    going = {(t["namespace"], t["cluster"]) for t in found.twins_deleted}
    for foreign in config.foreign_clusters:
        old = snapshot.node_specs.get(foreign.cluster_id)
        if old is None:
            continue
        new = virtual_node_spec(config, foreign)
        if old.custom_resources == new.custom_resources:
            continue
        twinned = [
            namespace
            for namespace, (_, clusters, _) in sorted(snapshot.offloadings.items())
            if foreign.cluster_id in clusters and (namespace, foreign.cluster_id) not in going
        ]
        found.custom_objects_reflection += custom_reflection_change(
            foreign.cluster_id,
            twinned,
            snapshot.custom_objects,
            old,
            new,
            snapshot.foreign_crd_problems.get(foreign.cluster_id, {}),
        )
    return found


def pods_no_foreign_node_fits(config: StackConfig, snapshot: Snapshot) -> list[dict[str, Any]]:
    """Pods on a virtual node that no single foreign node behind it can run, with the planned share:
    what the node's largest-pod labels will say (runtime.api.advertisement.largest_pod_labels) against
    each pod's requests. Such a pod stays Pending there (or is moved, with the namespace's policy on)."""
    found: list[dict[str, Any]] = []
    for foreign in config.foreign_clusters:
        advertisement = snapshot.advertisements.get(foreign.cluster_id)
        pods = snapshot.pods_on_node.get(foreign.cluster_id, [])
        if not advertisement or not advertisement.get("nodes") or not pods:
            continue
        pools: list[VirtualNodeConfig | None] = [*foreign.virtual_nodes] or [None]
        for pool in pools:
            # as virtual_node_spec plans the pool's VirtualNode (its share and selector)
            share = pool.sharing_percentage if pool and pool.sharing_percentage is not None else None
            share = share or config.sharing_of(foreign)
            selector = dict(pool.node_selector) if pool else None
            node = names.virtual_node_name(foreign.cluster_id, pool.name if pool else None)
            capacity = shared_resources(pool_offer(advertisement, selector), share, foreign.fixed_resources).capacity
            largest = largest_pod_labels(advertisement, selector, share, capacity)
            for pod in pods:
                if pod.node and pod.node != node:
                    continue
                short = {
                    resource: {"requested": pod.requests[resource], "largestOnOneNode": as_quantity(amount)}
                    for resource, (label, unit) in LARGEST_POD_LABELS.items()
                    if resource in pod.requests
                    and _amount(pod.requests[resource]) > (amount := Decimal(largest[label]) / unit)
                }
                if short:
                    found.append({"pod": f"{pod.namespace}/{pod.name}", "node": node, "resources": short})
    return found


REFLECTED, DELETED, FROZEN = "now reflected", "copy deleted", "copy kept, no longer updated"
NOT_YET = "not reflected until its CRD can take it"  # what the runtime's Reflected=False condition says
NOT_OPTED_IN = "no longer in liqo:reflection.customResources"


def reflection_change(
    home_id: str,
    cluster_id: str,
    running: list[PodOnNode],
    objects: dict[str, dict[str, dict[str, Any]]],
    old: VirtualNodeSpec,
    new: VirtualNodeSpec,
) -> dict[str, Any] | None:
    """What new reflection settings of one VirtualNode do to the pods of one namespace running there:
    the pods whose remote labels or annotations change (the runtime carries them to the remote pods at
    once), and each object they use (or Service selecting them) that starts or stops being reflected."""
    relabelled = []
    for pod in running:
        ids = {"home_cluster_id": home_id, "foreign_cluster_id": cluster_id}
        if remote_pod_metadata(pod.manifest, **ids, **skip_lists(old)) != remote_pod_metadata(
            pod.manifest, **ids, **skip_lists(new)
        ):
            relabelled.append(pod.name)
    used: dict[tuple[str, str], list[str]] = defaultdict(list)
    for pod in running:
        spec = pod.manifest.get("spec") or {}
        for kind, wanted in references(spec).items():
            for name in wanted:
                used[(kind, name)].append(pod.name)
        labels = (pod.manifest.get("metadata") or {}).get("labels") or {}
        for name, service in objects.get("service", {}).items():
            if selects(service, labels):
                used[("service", name)].append(pod.name)
    changed = []
    for (kind, name), pods in sorted(used.items()):
        obj = objects.get(kind, {}).get(name)
        if obj is None or kind not in ("configmap", "secret", "service"):
            continue  # missing at home, or a claim (not configurable: docs/reflection.md)
        outcome = copy_outcome(kind, obj, settings_from(old, kind), settings_from(new, kind))
        if outcome is not None:
            after, why = outcome
            changed.append({"kind": kind, "name": name, "after": after, "why": why, "usedBy": sorted(pods)})
    if not relabelled and not changed:
        return None
    return {"cluster": cluster_id, "pods": len(running), "relabelled": sorted(relabelled), "objects": changed}


def custom_reflection_change(
    cluster_id: str,
    namespaces: list[str],
    objects: dict[str, dict[str, list[dict[str, Any]]]],
    old: VirtualNodeSpec,
    new: VirtualNodeSpec,
    crd_problems: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The custom objects of `namespaces` whose copy in `cluster_id` new custom resource settings make,
    freeze or delete. A type opted out, or turned off (workers 0), leaves its copies as they are
    (runtime/reflection/custom.py); a policy that no longer allows an object deletes its copy.
    `crd_problems`: type -> why its CRDs keep it from `cluster_id` (runtime.api.crds.reflection_problem):
    until they allow it the runtime makes, freezes and deletes no copy of that type there."""
    changed = []
    for crd_name in sorted({c.crd_name for c in old.custom_resources} | {c.crd_name for c in new.custom_resources}):
        before = settings_from(old, crd_name) if old.custom_resource(crd_name) else None
        after = settings_from(new, crd_name) if new.custom_resource(crd_name) else None
        for namespace in namespaces:
            for obj in objects.get(crd_name, {}).get(namespace, []):
                outcome = copy_outcome(crd_name, obj, before, after)
                problem = (crd_problems or {}).get(crd_name)
                if outcome is not None and problem is not None:
                    outcome = (NOT_YET, problem) if outcome[0] == REFLECTED else None
                if outcome is not None:
                    name = str((obj.get("metadata") or {}).get("name") or "")
                    entry = {"namespace": namespace, "cluster": cluster_id, "kind": crd_name, "name": name}
                    changed.append({**entry, "after": outcome[0], "why": outcome[1]})
    return changed


def copy_outcome(
    kind: str, obj: dict[str, Any], old: ReflectionSettings | None, new: ReflectionSettings | None
) -> tuple[str, str] | None:
    """What new settings do to the copy of one home object: None when nothing changes, else (what
    happens, why). None settings: the kind is not reflected at all (a custom type opted out leaves its
    copies as they are). A kind turned off (workers 0) left the copies it had made: one the new
    settings no longer allow is deleted once it is turned on again."""
    was = old is not None and why_not_reflected(kind, obj, old) is None
    left_frozen = old is not None and old.workers == 0 and why_not_reflected(kind, obj, replace(old, workers=1)) is None
    why = NOT_OPTED_IN if new is None else why_not_reflected(kind, obj, new)
    if why is None:
        return None if was else (REFLECTED, "")  # a frozen copy is updated again
    if new is None or new.workers == 0:  # a disabled kind removes no copy (runtime/reflection)
        return (FROZEN, why) if was else None
    return (DELETED, why) if was or left_frozen else None


# -- reading the live clusters ----------------------------------------------------------------------


def _read_snapshot(config: StackConfig, clients: dict[str, Any]) -> Snapshot:
    from lightkube import ApiError
    from lightkube.resources.core_v1 import ConfigMap, Namespace, Node, Pod, Secret, Service

    from runtime.api.advertisement import pod_requests
    from runtime.api.resources import (
        NamespaceOffloadingResource,
        NamespaceOffloadingSelectorResource,
        ResourceAdvertisementResource,
        VirtualNodeResource,
    )

    home_id = config.home.cluster_id
    home = clients[home_id]
    snapshot = Snapshot()
    for offloading in _listed(home, NamespaceOffloadingResource, namespace="*"):
        status = offloading.get("status") or {}
        managed = (offloading.metadata.labels or {}).get(names.MANAGED_BY_LABEL) == names.MANAGED_BY
        # a cluster the selector leaves out has a condition too (OffloadingRequired False, NotSelected)
        clusters = sorted(
            cluster_id
            for cluster_id, conditions in (status.get("remoteNamespacesConditions") or {}).items()
            if any(c.get("type") == "OffloadingRequired" and c.get("status") == "True" for c in conditions or [])
        )
        snapshot.offloadings[offloading.metadata.namespace] = (managed, clusters, status.get("remoteNamespaceName"))
        owner = (offloading.metadata.labels or {}).get(names.OFFLOADING_SELECTOR_LABEL)
        if owner:
            snapshot.selector_owned[offloading.metadata.namespace] = owner
    snapshot.stack_selectors = {
        str(selector.metadata.name)
        for selector in _listed(home, NamespaceOffloadingSelectorResource, namespace=None)
        if (selector.metadata.labels or {}).get(names.MANAGED_BY_LABEL) == names.MANAGED_BY
    }
    if config.namespace_selectors or snapshot.selector_owned:
        snapshot.namespace_labels = {
            str(ns.metadata.name): dict(ns.metadata.labels or {})
            for ns in home.list(Namespace)
            if ns.metadata and not ns.metadata.deletionTimestamp
        }

    declared: dict[str, dict[str, str]] = {}
    for vn in _listed(home, VirtualNodeResource, namespace=names.LIQO_NAMESPACE):
        spec = vn.get("spec") or {}
        declared[str(spec.get("clusterID"))] = dict(spec.get("labels") or {})
        snapshot.node_specs[str(spec.get("clusterID"))] = VirtualNodeSpec.model_validate(spec)
    cluster_of_node: dict[str, str] = {}  # a cluster offered as node pools has several
    for node in home.list(Node, labels={names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE}):
        cluster_id = (node.metadata.labels or {}).get(names.REMOTE_CLUSTER_ID_LABEL)
        if not cluster_id:
            continue
        cluster_of_node[str(node.metadata.name)] = cluster_id
        own = set(declared.get(cluster_id, {})) | {names.TYPE_LABEL, names.REMOTE_CLUSTER_ID_LABEL}
        snapshot.extra_node_labels[cluster_id] = {
            k: v
            for k, v in (node.metadata.labels or {}).items()
            if k not in own and not k.startswith(("kubernetes.io/", "node.kubernetes.io/", "beta.kubernetes.io/"))
        }
    for pod in sorted(
        home.list(Pod, namespace="*"), key=lambda p: (p.metadata.creationTimestamp or 0, p.metadata.name)
    ):
        node_name = pod.spec.nodeName if pod.spec else None
        phase = pod.status.phase if pod.status else None
        if not node_name or not node_name.startswith("liqo-") or phase in ("Succeeded", "Failed"):
            continue
        cluster_id = cluster_of_node.get(node_name) or node_name.removeprefix("liqo-")
        requests = {r: str(a.normalize()) for r, a in pod_requests(pod).items() if r != "pods"}
        wire = pod.to_dict()
        manifest = {"metadata": wire.get("metadata") or {}, "spec": wire.get("spec") or {}}
        snapshot.pods_on_node.setdefault(cluster_id, []).append(
            PodOnNode(pod.metadata.namespace or "", pod.metadata.name or "", requests, manifest, node_name)
        )
    for namespace in sorted({p.namespace for pods in snapshot.pods_on_node.values() for p in pods}):
        snapshot.home_objects[namespace] = {
            kind: {str(o.metadata.name): o.to_dict() for o in home.list(resource, namespace=namespace)}
            for kind, resource in (("configmap", ConfigMap), ("secret", Secret), ("service", Service))
        }

    custom_types = _custom_types(config, snapshot)
    home_crds = {crd_name: _crd_in(home, crd_name) for crd_name in custom_types}
    snapshot.custom_objects = _custom_objects(home, custom_types, home_crds, snapshot)
    foreign_clients = {cluster_id: client for cluster_id, client in clients.items() if cluster_id != home_id}
    snapshot.foreign_crd_problems = _foreign_crd_problems(foreign_clients, custom_types, home_crds)

    wanted = {twin for clusters_twin in planned_selection(config, snapshot).values() for twin in [clusters_twin[1]]}
    wanted |= {twin for _, _, twin in snapshot.offloadings.values() if twin}
    for cluster_id, client in clients.items():
        if cluster_id == home_id:
            continue
        try:
            published = client.get(ResourceAdvertisementResource, cluster_id, namespace=names.tenant_namespace(home_id))
            snapshot.offered[cluster_id] = dict((published.get("spec") or {}).get("resources") or {})
            snapshot.advertisements[cluster_id] = dict(published.get("spec") or {})
        except Exception as err:
            if not is_not_found(err):
                raise
        for twin in wanted:
            try:
                ns = client.get(Namespace, twin)
            except ApiError as err:
                if err.status.code == 404:
                    continue
                if err.status.code != 403:
                    raise
                # read as the home identity (a foreign side's own stack issued it), which may not read
                # namespaces: what it may read in one is its own twin's, else there is none of ours
                try:
                    pods, objects = count_twin(client, twin)
                except ApiError as inner:
                    if inner.status.code in (403, 404):
                        continue
                    raise
                snapshot.twins[(cluster_id, twin)] = TwinState(exists=True, ours=True, pods=pods, objects=objects)
                continue
            ours = (ns.metadata.labels or {}).get(names.ORIGIN_LABEL) == home_id
            pods, objects = count_twin(client, twin)
            snapshot.twins[(cluster_id, twin)] = TwinState(exists=True, ours=ours, pods=pods, objects=objects)
    return snapshot


def _custom_types(config: StackConfig, snapshot: Snapshot) -> dict[str, CustomResourceReflection]:
    """Every custom resource type reflected now or by the new config: its CRD's name -> its settings."""
    types = {c.crd_name: c for spec in snapshot.node_specs.values() for c in spec.custom_resources}
    return types | {c.crd_name: c for c in config.reflection.custom_reflection()}  # the version to come wins


def _crd_in(client: Any, crd_name: str) -> dict[str, Any] | None:
    """The CRD of that name in the client's cluster, or None."""
    from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

    try:
        found: dict[str, Any] = client.get(CustomResourceDefinition, crd_name).to_dict()
    except Exception as err:
        if is_not_found(err):
            return None
        raise
    return found


def _foreign_crd_problems(
    clients: dict[str, Any], types: dict[str, CustomResourceReflection], home_crds: dict[str, dict[str, Any] | None]
) -> dict[str, dict[str, str]]:
    """Per foreign cluster, the custom types its CRD or the home one keep from it, and why: the rule
    the runtime follows (runtime.api.crds.reflection_problem)."""
    from runtime.api.crds import reflection_problem

    found: dict[str, dict[str, str]] = {}
    for crd_name, custom in sorted(types.items()):
        for cluster_id, client in sorted(clients.items()):
            problem = reflection_problem(home_crds.get(crd_name), _crd_in(client, crd_name), custom.version)
            if problem is not None:
                side, why = problem
                found.setdefault(cluster_id, {})[crd_name] = why if side == "foreign" else f"home: {why}"
    return found


def _custom_objects(
    home: Any,
    types: dict[str, CustomResourceReflection],
    home_crds: dict[str, dict[str, Any] | None],
    snapshot: Snapshot,
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """The objects at home, in the namespaces offloaded now, of every custom resource type reflected now or
    by the new config (a type whose CRD the home cluster lacks has none)."""
    from lightkube.generic_resource import create_namespaced_resource

    from runtime.api.crds import crd_kind

    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for crd_name, custom in sorted(types.items()):
        crd = home_crds.get(crd_name)
        if crd is None:
            continue
        resource = create_namespaced_resource(custom.group, custom.version, crd_kind(crd), custom.resource)
        for obj in _listed(home, resource, namespace="*"):
            namespace = str(obj.metadata.namespace or "")
            if namespace in snapshot.offloadings:
                found.setdefault(crd_name, {}).setdefault(namespace, []).append(obj.to_dict())
    return found


def _built_in(kind: str, obj: Any) -> bool:
    """Objects every namespace has (the root CA ConfigMap, service-account tokens): not user data."""
    name = obj.metadata.name or ""
    return (kind == "configmaps" and name == "kube-root-ca.crt") or (
        kind == "secrets" and getattr(obj, "type", "") == "kubernetes.io/service-account-token"
    )


def _listed(client: Any, kind: Any, namespace: str | None) -> list[Any]:
    """Objects of a custom kind; none before the stack's first `up` installed its CRD."""
    try:
        return list(client.list(kind, namespace=namespace))
    except Exception as err:
        if is_not_found(err):
            return []
        raise


def offloaded_namespaces_effects(
    home_cluster_id: str,
    home_kubeconfig: str,
    home: Any,
    declared: list[NamespaceOffloadingConfig],
    removed: list[str],
) -> Effects:
    """The effects of an application team's stack, which holds only the package's OffloadedNamespaces
    (docs/package.md): the twins its namespaces get, keep or lose and the pods that lose their virtual node,
    read from the home cluster alone (`home`: a client as the team's kubeconfig). The clusters on offer are
    the home's VirtualNodes; the pods in a twin are counted at home, on that cluster's virtual node (the
    team reads no foreign cluster). `declared`: the namespaces the program declares now; `removed`: those it
    declared and no longer does (their offloading goes). No other namespace of the home is looked at."""
    from runtime.api.resources import VirtualNodeResource

    offered: dict[str, dict[str, str]] = {}
    for vn in _listed(home, VirtualNodeResource, namespace=names.LIQO_NAMESPACE):
        spec = vn.get("spec") or {}
        offered.setdefault(str(spec.get("clusterID")), {}).update(spec.get("labels") or {})
    if not offered:
        found = Effects()
        found.notes.append(
            f"home cluster {home_cluster_id} peers no cluster yet (no VirtualNode): nothing is offloaded"
        )
        return found
    config = StackConfig(
        home=ClusterAccess(cluster_id=home_cluster_id, kubeconfig=home_kubeconfig),
        foreign_clusters=[ForeignCluster(cluster_id=cid, labels=labels) for cid, labels in sorted(offered.items())],
        namespaces=declared,
    )
    snapshot = _read_snapshot(config, {home_cluster_id: home})
    ours = {ns.name for ns in declared} | set(removed)
    snapshot.offloadings = {ns: state for ns, state in snapshot.offloadings.items() if ns in ours}
    snapshot.selector_owned, snapshot.stack_selectors = {}, set()
    snapshot.node_specs = {}  # the VirtualNodes are the platform's: this stack does not change them
    found = effects(config, snapshot)
    found.nodes_shrunk = []
    for deleted in found.twins_deleted:  # the pods of that twin, as the home sees them on the virtual node
        pods = snapshot.pods_on_node.get(deleted["cluster"], [])
        deleted["pods"] = sum(1 for pod in pods if pod.namespace == deleted["namespace"])
        deleted["dataAtRisk"] = deleted["pods"] > 0
    found.notes.append(
        "an application stack's preview: read from the home cluster only; a twin's pods are counted on its virtual "
        "node at home, its other objects are not"
    )
    return found
