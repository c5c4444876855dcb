"""A shard of virtual-kubelet processes (cluster mode, `liqo:runtime.peeringsPerProcess`): one Deployment
serving the peerings whose VirtualNodes carry its label (runtime/virtualkubelet/peerings.py).

Each peering of the shard brings its own rights (its ClusterRole, bound to the shard's identity by a
binding of its own, docs/identities.md), declared with the peering: a peering removed keeps them
until its VirtualNode is released, and a peering added starts in the running process (its label
selects it), so adding or removing one rolls no Deployment."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi

from liqo_stack.declaring import manifests
from liqo_stack.declaring.components._controller import deploy_controller
from liqo_stack.declaring.components.cluster import Cluster
from liqo_stack.declaring.components.home import HomeControlPlane
from liqo_stack.declaring.config import StackConfig
from runtime.api import names


def deploy_virtual_kubelet(
    home: Cluster,
    parent: pulumi.Resource,
    *,
    resource_name: str,
    name: str,
    rules: list[manifests.Manifest],
    serves: str,
    config: StackConfig,
    depends_on: list[pulumi.Resource],
    pools: Sequence[str] = (),
) -> pulumi.CustomResource:
    """A virtual-kubelet Deployment (one peering's, or a shard's): it `serves` (`--foreign-cluster-id=...`
    or `--shard=...`), with its Nodes at the pod's IP (docs/reflection.md: the offloaded pods' hostIP
    is the virtual kubelet's) and, for one cluster, its node pools (they share its twin namespaces).
    The flags keep the order they always had: a Deployment made before is not rolled for nothing."""
    return deploy_controller(
        home,
        parent,
        resource_name=resource_name,
        name=name,
        component="virtual-kubelet",
        rules=rules,
        args=[
            "virtual-kubelet",
            serves,
            f"--home-cluster-id={home.cluster_id}",
            "--node-address=$(POD_IP)",
            *(f"--pool={pool}" for pool in pools),
        ],
        runtime=config.runtime,
        replicas=config.runtime.replicas.virtual_kubelet,
        depends_on=depends_on,
        env=[{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
    )


class VirtualKubeletShard(pulumi.ComponentResource):
    def __init__(
        self,
        shard: str,
        *,
        config: StackConfig,
        home: Cluster,
        home_plane: HomeControlPlane,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("liqo-stack:index:VirtualKubeletShard", f"virtual-kubelets-{shard}", None, opts)
        self.shard = shard
        self.name = names.virtual_kubelet_shard_name(shard)  # its Deployment, identity and Lease
        self.deployment = deploy_virtual_kubelet(
            home,
            self,
            resource_name=f"virtual-kubelets-{shard}",
            name=self.name,
            rules=manifests.VIRTUAL_KUBELET_RULES,
            serves=f"--shard={shard}",
            config=config,
            depends_on=[home_plane.namespace],
        )
        self.register_outputs({})
