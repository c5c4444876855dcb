"""What a foreign cluster runs once, whoever peers with it: CRDs and the foreign agent."""

from __future__ import annotations

import pulumi

from liqo_stack import manifests
from liqo_stack.components._controller import deploy_controller
from liqo_stack.components.cluster import Cluster
from liqo_stack.config import RuntimeConfig
from runtime.api import foreign_crd_manifests, names


class ForeignAgent(pulumi.ComponentResource):
    namespace: pulumi.CustomResource
    crds: list[pulumi.CustomResource]
    agent: pulumi.CustomResource

    def __init__(self, name: str, foreign: Cluster, runtime: RuntimeConfig, opts: pulumi.ResourceOptions | None = None):
        super().__init__("liqo-stack:index:ForeignAgent", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        component = "foreign-agent"
        self.namespace = foreign.object("namespace", manifests.runtime_namespace(component), child)
        foreign.object("metrics-reader-role", manifests.metrics_reader_role(component), child)
        self.crds = [foreign.object(f"crd-{crd['metadata']['name']}", crd, child) for crd in foreign_crd_manifests()]
        # What the agent grants a home identity inside each twin namespace it creates.
        self.twin_namespace_role = foreign.object(
            "home-in-twin-namespace-role",
            manifests.cluster_role(
                manifests.HOME_IN_TWIN_NAMESPACE_ROLE, manifests.HOME_IN_TWIN_NAMESPACE_RULES, component
            ),
            child,
        )
        self.agent = deploy_controller(
            foreign,
            self,
            resource_name="agent",
            name=names.FOREIGN_AGENT,
            component=component,
            rules=manifests.FOREIGN_AGENT_RULES,
            args=["foreign-agent", f"--cluster-id={foreign.cluster_id}"],
            runtime=runtime,
            replicas=runtime.replicas.foreign_agent,
            depends_on=[self.namespace, self.twin_namespace_role, *self.crds],
        )
        self.register_outputs({})
