"""A runtime controller as the stack installs it: ServiceAccount, ClusterRole, binding, Deployment."""

from __future__ import annotations

import pulumi

from liqo_stack.declaring import manifests
from liqo_stack.declaring.components.cluster import SKIP_AWAIT, Cluster, annotated
from liqo_stack.declaring.config import RuntimeConfig, RuntimeMode
from runtime.api import names


def deploy_controller(
    cluster: Cluster,
    parent: pulumi.Resource,
    *,
    resource_name: str,
    name: str,
    component: str,
    rules: list[manifests.Manifest],
    args: list[str],
    runtime: RuntimeConfig,
    depends_on: list[pulumi.Resource],
    replicas: int = 1,
    env: list[manifests.Manifest] | None = None,
) -> pulumi.CustomResource:
    """Returns the Deployment; in external mode it has no replicas (the runtime runs locally with this identity).

    `replicas` (cluster mode) elect a leader on the component's Lease; with more than one, a
    PodDisruptionBudget keeps one running through node drains and anti-affinity puts them on
    different nodes."""
    ns = names.LIQO_NAMESPACE
    account = cluster.object(
        f"{resource_name}-sa",
        manifests.service_account(name, ns, component),
        pulumi.ResourceOptions(parent=parent, depends_on=depends_on),
    )
    role = cluster.object(
        f"{resource_name}-role", manifests.cluster_role(name, rules, component), pulumi.ResourceOptions(parent=parent)
    )
    binding = cluster.object(
        f"{resource_name}-binding",
        manifests.binding("ClusterRole", name, name, name, ns, component),
        pulumi.ResourceOptions(parent=parent, depends_on=[role, account]),
    )
    running = replicas if runtime.mode is RuntimeMode.CLUSTER else 0
    args = [*args, *runtime.leader_election.args()]
    manifest = manifests.deployment(name, ns, runtime.pinned_image, args, name, running, component, env)
    if not running:
        # pulumi-kubernetes waits for a Deployment's rollout; scaled to zero there is none, and it would
        # warn "Replicas scaled to 0" on every up (cluster mode waits: the runtime must come up)
        manifest = annotated(manifest, {SKIP_AWAIT: "true"})
    deployment = cluster.object(
        resource_name, manifest, pulumi.ResourceOptions(parent=parent, depends_on=[account, binding, *depends_on])
    )
    if replicas > 1:
        cluster.object(
            f"{resource_name}-pdb",
            manifests.pod_disruption_budget(name, ns, component),
            pulumi.ResourceOptions(parent=parent, depends_on=[deployment]),
        )
    return deployment
