"""A foreign cluster's side of one home: its tenant namespace (with the pod-security floor of its twins),
the identity issued to the home and its RBAC, and its grant (Quota, with the nodes it may use, which the
admission policy's binding for this home reads).

Declared by the one-stack form's Peering (a team that owns both sides), or by the foreign cluster's own
stack (`ForeignTenant`, liqo:foreignSide), which hands the identity's kubeconfig to the home's stack as
an output: the home stack then holds no admin credentials of that cluster (docs/security.md).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi

from liqo_stack.declaring import manifests
from liqo_stack.declaring.components.cluster import TIMEOUT_SECONDS, WAIT_FOR, Cluster, annotated
from liqo_stack.declaring.components.credentials import home_identity_kubeconfig
from liqo_stack.declaring.components.foreign import ForeignAgent
from liqo_stack.declaring.config import GrantConfig, HomeServed, NodesConfig
from runtime.api import CustomResourceReflection, names, twinnames

TOKEN_WAIT_SECONDS = 60  # for the token controller of a foreign cluster to fill the identity's Secret


@dataclass(frozen=True)
class TenantSide:
    namespace: pulumi.CustomResource
    quota: pulumi.CustomResource
    nodes_binding: pulumi.CustomResource
    account: pulumi.CustomResource
    token: pulumi.CustomResource
    role: pulumi.CustomResource
    binding: pulumi.CustomResource
    crd_access: list[pulumi.Resource]
    kubeconfig: pulumi.Output[str]  # the home identity's, a secret

    def resources(self) -> list[pulumi.Resource]:
        """What the home's virtual node needs in place (and needs to outlive it: deleted after it)."""
        return [
            self.token,
            self.binding,
            self.role,
            *self.crd_access,
            self.account,
            self.namespace,
            self.quota,
            self.nodes_binding,
        ]


def declare_tenant(
    parent: pulumi.Resource,
    foreign: Cluster,
    *,
    home_id: str,
    pod_security: str,
    grant: GrantConfig,
    twin_names: Sequence[str],
    nodes: NodesConfig,
    custom_resources: Sequence[CustomResourceReflection],
    agent: ForeignAgent,
    api_server_address: str | None,
    prefix: str = "",
) -> TenantSide:
    """`twin_names`: the names beyond DefaultName its twins may take (twinNames), which the admission
    policy and the agent read off the tenant namespace; `prefix`: before each resource name (a foreign
    side's stack serves several homes; the one-stack form keeps its names without one, so an existing
    stack replaces nothing)."""
    tenant = names.tenant_namespace(home_id)
    identity = names.home_identity_name(home_id)
    component = "peering"
    # Its Pod Security labels are the floor the agent gives each twin of this home (docs/security.md).
    floor = dict.fromkeys(names.POD_SECURITY_LABELS, pod_security)
    namespace = foreign.object(
        f"{prefix}tenant-namespace",
        manifests.namespace(
            tenant,
            component,
            {names.TENANT_HOME_LABEL: home_id, **floor},
            {names.TWIN_NAMES_ANNOTATION: twinnames.format_allowed(twin_names)},
        ),
        pulumi.ResourceOptions(parent=parent),
    )
    in_tenant = pulumi.ResourceOptions(parent=parent, depends_on=[namespace])
    quota = foreign.object(
        f"{prefix}quota",
        manifests.quota(home_id, grant.quota(nodes), component),
        pulumi.ResourceOptions(parent=parent, depends_on=[namespace, *agent.crds]),
    )
    # the home's ShadowPods held to the nodes its Quota lets it use (the agent holds its pods to them too)
    nodes_binding = foreign.object(
        f"{prefix}shadowpod-nodes-binding",
        manifests.shadowpod_nodes_binding(home_id, component),
        pulumi.ResourceOptions(parent=parent, depends_on=[quota, agent.nodes_policy]),
    )
    account = foreign.object(
        f"{prefix}home-identity", manifests.service_account(identity, tenant, component), in_tenant
    )
    # The cluster's token controller fills the Secret. pulumi-kubernetes' own wait for it gives up
    # after 5 s, too short for a busy cluster: wait for the token itself, up to a minute.
    # Each Secret issued gets a name of its own, drawn when it is created and kept from then on
    # (ignore_changes: an update sends the name it has, as does a stack that made it with a fixed
    # name), so a token revoked by deleting its Secret is never issued again by `pulumi up --refresh`.
    token_name = f"{names.home_identity_token_prefix(home_id)}-{secrets.token_hex(4)}"
    token = foreign.object(
        f"{prefix}home-identity-token",
        annotated(
            manifests.service_account_token(
                identity, tenant, component, token_name, {names.HOME_IDENTITY_TOKEN_LABEL: home_id}
            ),
            {WAIT_FOR: "jsonpath={.data.token}", TIMEOUT_SECONDS: str(TOKEN_WAIT_SECONDS)},
        ),
        pulumi.ResourceOptions(parent=parent, depends_on=[account], ignore_changes=["metadata.name"]),
    )
    role = foreign.object(
        f"{prefix}home-identity-role",
        manifests.role(identity, tenant, manifests.HOME_IDENTITY_TENANT_RULES, component),
        in_tenant,
    )
    binding = foreign.object(
        f"{prefix}home-identity-binding",
        manifests.binding("Role", identity, identity, identity, tenant, component, ns=tenant),
        pulumi.ResourceOptions(parent=parent, depends_on=[role, account, *agent.crds]),
    )
    # the opted-in custom resources' CRDs, read by name: reflection starts when one appears here
    crd_rules = manifests.custom_resource_definition_rules(custom_resources)
    crd_access: list[pulumi.Resource] = []
    if crd_rules:
        reader = names.home_identity_crd_reader(home_id)
        crd_role = foreign.object(
            f"{prefix}home-identity-crd-reader", manifests.cluster_role(reader, crd_rules, component), in_tenant
        )
        crd_access = [
            crd_role,
            foreign.object(
                f"{prefix}home-identity-crd-reader-binding",
                manifests.binding("ClusterRole", reader, reader, identity, tenant, component),
                pulumi.ResourceOptions(parent=parent, depends_on=[crd_role, account]),
            ),
        ]
    kubeconfig = home_identity_kubeconfig(api_server_address, foreign, identity, tenant, token.output("data"))
    return TenantSide(namespace, quota, nodes_binding, account, token, role, binding, crd_access, kubeconfig)


class ForeignTenant(pulumi.ComponentResource):
    """One home served by a foreign side's own stack: its tenant side, and the identity it hands over."""

    def __init__(
        self,
        name: str,
        foreign: Cluster,
        home: HomeServed,
        agent: ForeignAgent,
        api_server_address: str | None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("liqo-stack:index:ForeignTenant", name, None, opts)
        self.side = declare_tenant(
            self,
            foreign,
            home_id=home.cluster_id,
            pod_security=home.pod_security,
            grant=home.grant,
            twin_names=home.twin_names,
            nodes=home.nodes,
            custom_resources=[CustomResourceReflection.model_validate(c.model_dump()) for c in home.custom_resources],
            agent=agent,
            api_server_address=api_server_address,
            prefix=f"{home.cluster_id}-",
        )
        self.register_outputs({"identityKubeconfig": self.side.kubeconfig})
