"""What a foreign cluster runs once, whoever peers with it: CRDs, the foreign agent, and the admission
policies that hold every home identity's ShadowPods and NamespaceMaps to what the cluster allows
(docs/security.md)."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi

from liqo_stack.declaring import manifests
from liqo_stack.declaring.components._controller import deploy_controller
from liqo_stack.declaring.components.cluster import Cluster
from liqo_stack.declaring.config import RuntimeConfig
from runtime.api import CustomResourceReflection, foreign_crd_manifests, names


class ForeignAgent(pulumi.ComponentResource):
    namespace: pulumi.CustomResource
    crds: list[pulumi.CustomResource]
    agent: pulumi.CustomResource

    def __init__(
        self,
        name: str,
        foreign: Cluster,
        runtime: RuntimeConfig,
        opts: pulumi.ResourceOptions | None = None,
        *,
        custom_resources: Sequence[CustomResourceReflection] = (),
    ):
        super().__init__("liqo-stack:index:ForeignAgent", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        component = "foreign-agent"
        self.namespace = foreign.object("namespace", manifests.runtime_namespace(component), child)
        foreign.object("metrics-reader-role", manifests.metrics_reader_role(component), child)
        self.crds = [foreign.object(f"crd-{crd['metadata']['name']}", crd, child) for crd in foreign_crd_manifests()]
        # What the agent grants a home identity inside each twin namespace it creates (custom
        # resources included: the agent binds this role, which needs no right of its own over them).
        self.twin_namespace_role = foreign.object(
            "home-in-twin-namespace-role",
            manifests.cluster_role(
                manifests.HOME_IN_TWIN_NAMESPACE_ROLE,
                manifests.home_in_twin_namespace_rules(custom_resources),
                component,
            ),
            child,
        )
        # Every ShadowPod and NamespaceMap a home identity writes is checked by this cluster's API server itself.
        self.guards: list[pulumi.Resource] = []
        for resource_name, manifest in (
            ("shadowpod-policy", manifests.shadowpod_policy()),
            ("namespacemap-policy", manifests.namespacemap_policy()),
        ):
            policy = foreign.object(resource_name, manifest, child)
            binding = foreign.object(
                f"{resource_name}-binding",
                manifests.policy_binding(manifest["metadata"]["name"]),
                pulumi.ResourceOptions(parent=self, depends_on=[policy, *self.crds]),
            )
            self.guards += [policy, binding]
        # and to the nodes each home may use there: bound per home, with its Quota (tenant.py)
        self.nodes_policy = foreign.object(
            "shadowpod-nodes-policy", manifests.shadowpod_nodes_policy(), pulumi.ResourceOptions(parent=self)
        )
        self.guards.append(self.nodes_policy)
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
