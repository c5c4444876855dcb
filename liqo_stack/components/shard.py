"""A shard of virtual-kubelet processes (cluster mode, `liqo:runtime.peeringsPerProcess`): one Deployment
serving the peerings whose VirtualNodes carry its label (runtime/virtualkubelet/peerings.py).

Each peering of the shard brings its own rights (its ClusterRole, bound to the shard's identity by a
binding of its own, docs/identities.md), declared with the peering: a peering removed keeps them
until its VirtualNode is released, and a peering added starts in the running process (its label
selects it), so adding or removing one rolls no Deployment."""

from __future__ import annotations

import pulumi

from liqo_stack import manifests
from liqo_stack.components._controller import deploy_controller
from liqo_stack.components.cluster import Cluster
from liqo_stack.components.home import HomeControlPlane
from liqo_stack.config import StackConfig
from runtime.api import names


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
        self.deployment = deploy_controller(
            home,
            self,
            resource_name=f"virtual-kubelets-{shard}",
            name=self.name,
            component="virtual-kubelet",
            rules=manifests.VIRTUAL_KUBELET_RULES,
            args=[
                "virtual-kubelet",
                f"--shard={shard}",
                f"--home-cluster-id={home.cluster_id}",
                "--node-address=$(POD_IP)",  # docs/reflection.md: the pods' hostIP is the virtual kubelet pod's IP
            ],
            runtime=config.runtime,
            replicas=config.runtime.replicas.virtual_kubelet,
            depends_on=[home_plane.namespace],
            env=[{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        )
        self.register_outputs({})
