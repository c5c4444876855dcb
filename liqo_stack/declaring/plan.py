"""The resolved plan of a stack, shown as stack outputs by `pulumi preview` and `pulumi up`, and the
VirtualNodes it declares (`virtual_node_spec`): pure, so the CLI's previews need no Pulumi provider.

Computed from the stack config with the same pure functions the runtime uses (runtime.api.plan),
so what a preview shows is what the controllers will do.
"""

from __future__ import annotations

from typing import Any

from liqo_stack.declaring.config import ForeignCluster, StackConfig, VirtualNodeConfig
from runtime.api import ReflectorSettings, VirtualNodeSpec, names, twinnames
from runtime.api.plan import selected_clusters, twin_namespace_name, virtual_node_labels, virtual_node_taints
from runtime.api.virtualnode import HealthCheck, OffloadingPatch, RangeRemapping, SecretReference, StorageType


def virtual_node_spec(
    config: StackConfig, foreign: ForeignCluster, pool: VirtualNodeConfig | None = None
) -> VirtualNodeSpec:
    """The VirtualNode a foreign cluster gets, or one of its node pools, from the stack config alone
    (also shown in the plan): a pool's labels, taints and share over the cluster's, and its selector."""
    vk = config.virtual_kubelet
    return VirtualNodeSpec(
        cluster_id=foreign.cluster_id,
        kubeconfig_secret_ref=SecretReference(name=names.credentials_secret_name(foreign.cluster_id)),
        labels={**foreign.labels, **(pool.labels if pool else {})},
        taints=[*foreign.taints, *(pool.taints if pool else [])],
        sharing_percentage=(
            pool.sharing_percentage if pool and pool.sharing_percentage is not None else config.sharing_of(foreign)
        ),
        fixed_resources=dict(foreign.fixed_resources),
        offloading_patch=OffloadingPatch(
            labels_not_reflected=config.reflection.skip_labels or None,
            annotations_not_reflected=config.reflection.skip_annotations or None,
            node_selector=dict(pool.node_selector) if pool else None,
        ),
        reflection={
            name: ReflectorSettings(type=s.type, workers=s.workers) for name, s in config.reflection.settings().items()
        },
        custom_resources=config.reflection.custom_reflection(),
        health_check=HealthCheck(
            interval_seconds=vk.health_check_interval_seconds, failure_threshold=vk.failure_threshold
        ),
        api_server_token_support=vk.api_server_token_support,
        home_api_server=config.home_api_server(),
        pod_cidr=foreign.pod_cidr,
        remapped_pod_cidr=config.remapped_pod_cidrs()[foreign.cluster_id],
        endpoint_remappings=[
            RangeRemapping(seen_at_home=home_range, seen_there=there)
            for home_range, there in config.ranges_seen_by(foreign.cluster_id).values()
            if home_range != there
        ],
        storage_classes=[
            StorageType(storage_class_name=s.storage_class_name, default=s.default) for s in foreign.storage_classes
        ],
    )


def virtual_nodes_plan(config: StackConfig) -> dict[str, Any]:
    plan: dict[str, Any] = {}
    for foreign in config.foreign_clusters:
        spec = virtual_node_spec(config, foreign)
        plan[foreign.cluster_id] = {
            "virtualNode": names.virtual_node_name(foreign.cluster_id),
            "labels": virtual_node_labels(foreign.cluster_id, spec.labels),
            "taints": [t.to_wire() for t in virtual_node_taints(spec.taints)],
            "capacity": {
                "sharingPercentage": spec.sharing_percentage,
                "of": "allocatable of the foreign cluster's nodes minus requests of pods it runs for others",
                "fixed": spec.fixed_resources,
            },
            **({"nodePools": pools_plan(config, foreign)} if foreign.virtual_nodes else {}),
            "podNetwork": {
                "podCIDR": spec.pod_cidr or "not declared (podCIDR): pod IPs shown as they are",
                "seenAtHomeAs": spec.remapped_pod_cidr or spec.pod_cidr or "unchanged",
                "remapped": spec.remapped_pod_cidr is not None,
                # where this cluster reaches the others' pods (its reflected EndpointSlices' addresses)
                "reachesOthersIn": {
                    cluster_id: there for cluster_id, (_, there) in config.ranges_seen_by(foreign.cluster_id).items()
                },
            },
        }
    return plan


def pools_plan(config: StackConfig, foreign: ForeignCluster) -> dict[str, Any]:
    """The virtual nodes of a cluster offered as node pools, by pool name (they replace `virtualNode`)."""
    plan: dict[str, Any] = {}
    for pool in foreign.virtual_nodes:
        spec = virtual_node_spec(config, foreign, pool)
        plan[pool.name] = {
            "virtualNode": names.virtual_node_name(foreign.cluster_id, pool.name),
            "nodeSelector": spec.offloading_patch.node_selector,
            "labels": virtual_node_labels(foreign.cluster_id, spec.labels),
            "capacity": {
                "sharingPercentage": spec.sharing_percentage,
                "of": "allocatable of the foreign nodes nodeSelector picks minus requests of pods they run for others",
            },
        }
    return plan


# Selection at run time reads the virtual Nodes' labels (docs/offloading.md), which administrators may extend.
SELECTION_NOTE = (
    "selected from the labels declared in liqo:foreignClusters[].labels; labels added to the virtual "
    "nodes at home (kubectl label node liqo-<cluster id> ...) count too and can change the selection"
)


def namespaces_plan(config: StackConfig) -> dict[str, Any]:
    labels = {f.cluster_id: virtual_node_labels(f.cluster_id, f.labels) for f in config.foreign_clusters}
    plan: dict[str, Any] = {}
    for ns in config.namespaces:
        twin = twin_namespace_name(
            ns.name, ns.namespace_mapping_strategy, config.home.cluster_id, ns.remote_namespace_name
        )
        clusters = selected_clusters(ns.selector(), labels)
        plan[ns.name] = {
            "podOffloadingStrategy": ns.pod_offloading_strategy.value,
            "namespaceMappingStrategy": ns.namespace_mapping_strategy.value,
            "clusters": {cluster_id: {"twinNamespace": twin} for cluster_id in clusters},
            "clusterSelection": SELECTION_NOTE,
        }
    return plan


def refused_twin_names(config: StackConfig) -> list[str]:
    """Each declared offloading whose twin name a foreign cluster it selects would refuse, as that cluster's
    side is declared here (its twinNames: runtime/api/twinnames.py), and what to change. A cluster peered
    through an identity its own stack issued decides there, unseen from here."""
    labels = {f.cluster_id: virtual_node_labels(f.cluster_id, f.labels) for f in config.foreign_clusters}
    home, found = config.home.cluster_id, []
    for index, ns in enumerate(config.namespaces):
        twin = twin_namespace_name(ns.name, ns.namespace_mapping_strategy, home, ns.remote_namespace_name)
        for cluster_id in selected_clusters(ns.selector(), labels):
            at, foreign = next((i, f) for i, f in enumerate(config.foreign_clusters) if f.cluster_id == cluster_id)
            if foreign.peers_through_issued_identity:
                continue
            refused = twinnames.refusal(home, ns.name, twin, foreign.twin_names, [home])
            if refused is not None:
                found.append(
                    f"liqo:namespaces[{index}]: {cluster_id} will refuse twin namespace {twin}: {refused}. Allow it "
                    f"there (liqo:foreignClusters[{at}].twinNames) or use namespaceMappingStrategy DefaultName"
                )
    return found


def stack_plan(config: StackConfig) -> dict[str, Any]:
    return {
        "homeClusterId": config.home.cluster_id,
        "runtimeMode": config.runtime.mode.value,
        "foreignClusters": virtual_nodes_plan(config),
        "namespaces": namespaces_plan(config),
    }


def virtual_kubelet_shards(config: StackConfig) -> dict[str, str]:
    """Foreign cluster id -> the shard of virtual-kubelet Deployments that serves it (cluster mode,
    liqo:runtime.peeringsPerProcess): shards of N in the order of liqo:foreignClusters, named `0`, `1`, ...;
    none (one Deployment per foreign cluster) with 1. A cluster removed from the list moves the ones
    after it to earlier shards: each moved peering is handed over between processes, its pods untouched."""
    per_process = config.runtime.peerings_per_process
    ids = [foreign.cluster_id for foreign in config.foreign_clusters]
    if per_process == 1:
        return {}
    size = len(ids) if per_process == "all" else per_process
    return {cluster_id: str(index // max(1, size)) for index, cluster_id in enumerate(ids)}
