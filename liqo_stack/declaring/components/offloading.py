"""The namespace offloadings declared in the stack config: one NamespaceOffloading per namespace, one
NamespaceOffloadingSelector per namespace selector (the controller-manager offloads what it matches)."""

from __future__ import annotations

import pulumi

from liqo_stack.declaring import manifests
from liqo_stack.declaring.components.cluster import Cluster
from liqo_stack.declaring.components.destroy_guard import stack_identity
from liqo_stack.declaring.components.home import HomeControlPlane
from liqo_stack.declaring.config import NamespaceOffloadingConfig, NamespaceSelectorConfig
from runtime.api import NamespaceOffloadingSpec


def offloading_spec(declared: NamespaceOffloadingConfig) -> NamespaceOffloadingSpec:
    return NamespaceOffloadingSpec(
        namespace_mapping_strategy=declared.namespace_mapping_strategy,
        remote_namespace_name=declared.remote_namespace_name,
        pod_offloading_strategy=declared.pod_offloading_strategy,
        cluster_selector=declared.selector(),
    )


class NamespaceOffloadings(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        home: Cluster,
        declared: list[NamespaceOffloadingConfig],
        home_plane: HomeControlPlane,
        handlers: list[pulumi.Resource],
        selectors: list[NamespaceSelectorConfig] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("liqo-stack:index:NamespaceOffloadings", name, None, opts)
        # by namespace: a program's own objects in an offloaded namespace depend on its offloading
        self.offloadings: dict[str, pulumi.CustomResource] = {}
        for ns in declared:
            # The namespace is the application team's: ensured, never deleted by the stack.
            namespace = home.object(
                f"namespace-{ns.name}",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns.name}},
                pulumi.ResourceOptions(parent=self, retain_on_delete=True),
            )
            # Deleted before the controllers that remove its finalizer (they are its dependencies).
            self.offloadings[ns.name] = home.object(
                f"offloading-{ns.name}",
                manifests.namespace_offloading(ns.name, offloading_spec(ns), stack_identity()),
                pulumi.ResourceOptions(
                    parent=self, depends_on=[namespace, *home_plane.crds, *home_plane.webhooks, *handlers]
                ),
            )
        for declared_selector in selectors or []:
            # Deleted before the controller-manager, which releases its finalizer once the offloadings it
            # made are gone: `pulumi up` without it (and `destroy`) waits for their twins to be deleted.
            home.object(
                f"offloading-selector-{declared_selector.name}",
                manifests.namespace_offloading_selector(
                    declared_selector.name, declared_selector.spec(), stack_identity()
                ),
                pulumi.ResourceOptions(parent=self, depends_on=[*home_plane.crds, *home_plane.webhooks, *handlers]),
            )
        self.register_outputs({})
