"""One peering: the home cluster's identity in a foreign cluster, and its virtual node at home."""

from __future__ import annotations

import pulumi

from liqo_stack.declaring import manifests
from liqo_stack.declaring.components.cluster import Cluster
from liqo_stack.declaring.components.foreign import ForeignAgent
from liqo_stack.declaring.components.home import HomePlane
from liqo_stack.declaring.components.shard import VirtualKubeletShard, deploy_virtual_kubelet
from liqo_stack.declaring.components.tenant import TenantSide, declare_tenant
from liqo_stack.declaring.config import ForeignCluster, StackConfig, VirtualNodeConfig
from liqo_stack.declaring.plan import virtual_node_spec
from runtime.api import names


class Peering(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        *,
        config: StackConfig,
        foreign_config: ForeignCluster,
        home: Cluster,
        foreign: Cluster | None,
        home_plane: HomePlane,
        agent: ForeignAgent | None,
        shard: VirtualKubeletShard | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`foreign` and `agent`: that cluster's side, declared by this stack; None when it peers through
        the identity that cluster's own stack issued (foreign_config.identityKubeconfig). `shard`: the
        shard of virtual-kubelet processes that serves it (liqo:runtime.peeringsPerProcess); None: a
        virtual-kubelet Deployment of its own."""
        super().__init__("liqo-stack:index:Peering", name, None, opts)
        home_id, foreign_id = home.cluster_id, foreign_config.cluster_id
        component = "peering"

        # -- foreign side: declared here (one-stack form), or by that cluster's own stack ----------
        if foreign is not None and agent is not None:
            self.tenant: TenantSide | None = declare_tenant(
                self,
                foreign,
                home_id=home_id,
                pod_security=foreign_config.pod_security,
                grant=foreign_config.grant,
                twin_names=foreign_config.twin_names,
                nodes=foreign_config.nodes,
                custom_resources=config.reflection.custom_reflection(),
                agent=agent,
                api_server_address=foreign_config.api_server_address,
            )
            kubeconfig = self.tenant.kubeconfig
            foreign_side: list[pulumi.Resource] = [*self.tenant.resources(), *agent.guards, agent.agent]
        else:
            # the identity the foreign side's stack issued (docs/security.md): nothing declared there
            self.tenant = None
            kubeconfig = pulumi.Output.secret(foreign_config.identity_kubeconfig_text())
            foreign_side = []

        # -- home side: credentials, the VirtualNode, and its virtual kubelet --------------------
        ns = names.LIQO_NAMESPACE
        in_liqo = pulumi.ResourceOptions(parent=self, depends_on=[home_plane.namespace])
        secret = home.object(
            f"credentials-{foreign_id}",
            manifests.secret(names.credentials_secret_name(foreign_id), ns, {}, component),
            in_liqo,
            string_data=kubeconfig.apply(lambda text: {"kubeconfig": text}),
        )
        rules = manifests.virtual_kubelet_rules(
            foreign_id, [pool.name for pool in foreign_config.virtual_nodes], config.reflection.custom_reflection()
        )
        if shard is None:
            self.virtual_kubelet = deploy_virtual_kubelet(
                home,
                self,
                resource_name=f"virtual-kubelet-{foreign_id}",
                name=names.virtual_kubelet_name(foreign_id),
                rules=rules,
                serves=f"--foreign-cluster-id={foreign_id}",
                pools=[pool.name for pool in foreign_config.virtual_nodes],
                config=config,
                depends_on=[home_plane.namespace, secret],
            )
            serving: list[pulumi.Resource] = [self.virtual_kubelet]
        else:
            # this peering's rights, given to the shard's identity: they go with the peering, after its
            # VirtualNode (which depends on them) is released
            name = names.virtual_kubelet_name(foreign_id)
            role = home.object(
                f"virtual-kubelet-{foreign_id}-role",
                manifests.cluster_role(name, rules, "virtual-kubelet"),
                pulumi.ResourceOptions(parent=self),
            )
            binding = home.object(
                f"virtual-kubelet-{foreign_id}-binding",
                manifests.binding("ClusterRole", name, name, shard.name, ns, "virtual-kubelet"),
                pulumi.ResourceOptions(parent=self, depends_on=[role, shard.deployment]),
            )
            self.virtual_kubelet = shard.deployment
            serving = [shard.deployment, binding]
        # The VirtualNode is deleted first: its virtual kubelet holds it (finalizer) until the Node is
        # drained and deleted and the twins are gone, which needs the virtual kubelet, the
        # controller-manager, the foreign agent, the credentials and the home identity's token and
        # RBAC in the foreign cluster all still there (pulumi deletes dependents first).
        # One VirtualNode, or one per node pool (the default keeps its resource name: no replace).
        pools: list[VirtualNodeConfig | None] = [*foreign_config.virtual_nodes] or [None]
        self.virtual_nodes = [
            home.object(
                f"virtualnode-{foreign_id}" if pool is None else f"virtualnode-{foreign_id}-{pool.name}",
                manifests.virtual_node(
                    virtual_node_spec(config, foreign_config, pool),
                    names.virtual_node_name(foreign_id, pool.name if pool else None),
                    move_unfit_pods_after=config.virtual_kubelet.move_unfit_pods_after_seconds,
                    shard=shard.shard if shard is not None else None,
                    abandon_unreachable_after=foreign_config.abandon_unreachable_after,
                ),
                pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[
                        *home_plane.crds,
                        home_plane.controller_manager,
                        *serving,
                        secret,
                        *foreign_side,
                    ],
                ),
            )
            for pool in pools
        ]
        self.register_outputs({})
