"""One peering: the home cluster's identity in a foreign cluster, and its virtual node at home."""

from __future__ import annotations

from typing import cast

import pulumi
import pulumi_kubernetes as k8s

from liqo_stack import manifests
from liqo_stack.components._controller import deploy_controller
from liqo_stack.components.cluster import TIMEOUT_SECONDS, WAIT_FOR, Cluster, annotated
from liqo_stack.components.credentials import home_identity_kubeconfig
from liqo_stack.components.foreign import ForeignAgent
from liqo_stack.components.home import HomeControlPlane
from liqo_stack.config import ForeignCluster, StackConfig, VirtualNodeConfig
from liqo_stack.plan import virtual_node_spec
from runtime.api import names

TOKEN_WAIT_SECONDS = 60  # for the token controller of a foreign cluster to fill the identity's Secret


class Peering(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        *,
        config: StackConfig,
        foreign_config: ForeignCluster,
        home: Cluster,
        foreign: Cluster,
        home_plane: HomeControlPlane,
        agent: ForeignAgent,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("liqo-stack:index:Peering", name, None, opts)
        home_id, foreign_id = home.cluster_id, foreign.cluster_id
        tenant = names.tenant_namespace(home_id)
        identity = names.home_identity_name(home_id)
        component = "peering"

        # -- foreign side: a tenant namespace and the home cluster's identity, confined to it ----
        # Its Pod Security labels are the floor the agent gives each twin of this home (docs/security.md).
        floor = dict.fromkeys(names.POD_SECURITY_LABELS, foreign_config.pod_security)
        self.tenant_namespace = foreign.object(
            "tenant-namespace",
            manifests.namespace(tenant, component, {names.TENANT_HOME_LABEL: home_id, **floor}),
            pulumi.ResourceOptions(parent=self),
        )
        in_tenant = pulumi.ResourceOptions(parent=self, depends_on=[self.tenant_namespace])
        self.quota = foreign.object(
            "quota",
            manifests.quota(home_id, foreign_config.grant.quota(), component),
            pulumi.ResourceOptions(parent=self, depends_on=[self.tenant_namespace, *agent.crds]),
        )
        account = foreign.object("home-identity", manifests.service_account(identity, tenant, component), in_tenant)
        # The cluster's token controller fills the Secret. pulumi-kubernetes' own wait for it gives up
        # after 5 s, too short for a busy cluster: wait for the token itself, up to a minute.
        token = foreign.object(
            "home-identity-token",
            annotated(
                manifests.service_account_token(identity, tenant, component),
                {WAIT_FOR: "jsonpath={.data.token}", TIMEOUT_SECONDS: str(TOKEN_WAIT_SECONDS)},
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[account]),
        )
        role = foreign.object(
            "home-identity-role",
            manifests.role(identity, tenant, manifests.HOME_IDENTITY_TENANT_RULES, component),
            in_tenant,
        )
        binding = foreign.object(
            "home-identity-binding",
            manifests.binding("Role", identity, identity, identity, tenant, component, ns=tenant),
            pulumi.ResourceOptions(parent=self, depends_on=[role, account, *agent.crds]),
        )
        # the opted-in custom resources' CRDs, read by name: reflection starts when one appears here
        crd_rules = manifests.custom_resource_definition_rules(config.reflection.custom_reflection())
        crd_access: list[pulumi.Resource] = []
        if crd_rules:
            reader = names.home_identity_crd_reader(home_id)
            crd_role = foreign.object(
                "home-identity-crd-reader", manifests.cluster_role(reader, crd_rules, component), in_tenant
            )
            crd_access = [
                crd_role,
                foreign.object(
                    "home-identity-crd-reader-binding",
                    manifests.binding("ClusterRole", reader, reader, identity, tenant, component),
                    pulumi.ResourceOptions(parent=self, depends_on=[crd_role, account]),
                ),
            ]
        kubeconfig = home_identity_kubeconfig(foreign_config, foreign, identity, cast(k8s.core.v1.Secret, token).data)

        # -- home side: credentials, the VirtualNode, and its virtual kubelet --------------------
        ns = names.LIQO_NAMESPACE
        in_liqo = pulumi.ResourceOptions(parent=self, depends_on=[home_plane.namespace])
        secret = home.object(
            f"credentials-{foreign_id}",
            manifests.secret(names.credentials_secret_name(foreign_id), ns, {}, component),
            in_liqo,
            string_data=kubeconfig.apply(lambda text: {"kubeconfig": text}),
        )
        self.virtual_kubelet = deploy_controller(
            home,
            self,
            resource_name=f"virtual-kubelet-{foreign_id}",
            name=names.virtual_kubelet_name(foreign_id),
            component="virtual-kubelet",
            rules=manifests.virtual_kubelet_rules(
                foreign_id,
                [pool.name for pool in foreign_config.virtual_nodes],
                config.reflection.custom_reflection(),
            ),
            args=[
                "virtual-kubelet",
                f"--foreign-cluster-id={foreign_id}",
                f"--home-cluster-id={home_id}",
                "--node-address=$(POD_IP)",  # seed 002: the pods' hostIP is the virtual kubelet pod's IP
                # one process serves every pool of the cluster (they share its twin namespaces)
                *(f"--pool={pool.name}" for pool in foreign_config.virtual_nodes),
            ],
            runtime=config.runtime,
            replicas=config.runtime.replicas.virtual_kubelet,
            depends_on=[home_plane.namespace, secret],
            env=[{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        )
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
                ),
                pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[
                        *home_plane.crds,
                        home_plane.controller_manager,
                        self.virtual_kubelet,
                        secret,
                        token,
                        binding,
                        role,
                        *crd_access,
                        account,
                        self.tenant_namespace,
                        self.quota,
                        *agent.guards,
                        agent.agent,
                    ],
                ),
            )
            for pool in pools
        ]
        self.register_outputs({})
