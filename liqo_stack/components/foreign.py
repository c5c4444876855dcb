"""What a foreign cluster runs once, whoever peers with it: CRDs and the foreign agent."""

from __future__ import annotations

import pulumi

from liqo_stack import manifests
from liqo_stack.components.cluster import Cluster
from liqo_stack.config import RuntimeConfig, RuntimeMode
from liqo_stack.resources.kube_object import KubeObject
from runtime.api import foreign_crd_manifests, names


class ForeignAgent(pulumi.ComponentResource):
    namespace: KubeObject
    crds: list[KubeObject]
    agent: KubeObject

    def __init__(self, name: str, foreign: Cluster, runtime: RuntimeConfig, opts: pulumi.ResourceOptions | None = None):
        super().__init__("liqo-stack:index:ForeignAgent", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        component = "foreign-agent"
        ns = names.LIQO_NAMESPACE

        self.namespace = foreign.object("namespace", manifests.namespace(ns, "foreign-agent"), child)
        self.crds = [foreign.object(f"crd-{crd['metadata']['name']}", crd, child) for crd in foreign_crd_manifests()]
        # What the agent grants a home identity inside each twin namespace it creates.
        self.twin_namespace_role = foreign.object(
            "home-in-twin-namespace-role",
            manifests.cluster_role(
                manifests.HOME_IN_TWIN_NAMESPACE_ROLE, manifests.HOME_IN_TWIN_NAMESPACE_RULES, component
            ),
            child,
        )
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace])
        account = foreign.object("agent-sa", manifests.service_account(names.FOREIGN_AGENT, ns, component), in_ns)
        role = foreign.object(
            "agent-role", manifests.cluster_role(names.FOREIGN_AGENT, manifests.FOREIGN_AGENT_RULES, component), child
        )
        role_binding = foreign.object(
            "agent-binding",
            manifests.binding(
                "ClusterRole", names.FOREIGN_AGENT, names.FOREIGN_AGENT, names.FOREIGN_AGENT, ns, component
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[role, account]),
        )
        replicas = 1 if runtime.mode is RuntimeMode.CLUSTER else 0
        self.agent = foreign.object(
            "agent",
            manifests.deployment(
                names.FOREIGN_AGENT,
                ns,
                runtime.image,
                ["foreign-agent", f"--cluster-id={foreign.cluster_id}"],
                names.FOREIGN_AGENT,
                replicas,
                component,
            ),
            pulumi.ResourceOptions(
                parent=self, depends_on=[account, role_binding, self.twin_namespace_role, *self.crds]
            ),
        )
        self.register_outputs({})
