"""The home control plane: liqo namespace, CRDs, RuntimeClass `liqo`, controller-manager + RBAC."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import pulumi

from liqo_stack.declaring import manifests
from liqo_stack.declaring.components._controller import deploy_controller
from liqo_stack.declaring.components.cluster import Cluster
from liqo_stack.declaring.config import RuntimeConfig, RuntimeMode
from runtime.api import home_crd_manifests, names


class HomePlane(Protocol):
    """What a peering is made after and removed before: the home control plane, or its resources by URN
    (a `Peering` component declared beside a `Home`: HomePlaneDependencies)."""

    @property
    def namespace(self) -> pulumi.Resource: ...
    @property
    def crds(self) -> Sequence[pulumi.Resource]: ...
    @property
    def controller_manager(self) -> pulumi.Resource: ...


@dataclass(frozen=True)
class HomePlaneDependencies:
    namespace: pulumi.Resource
    crds: Sequence[pulumi.Resource]
    controller_manager: pulumi.Resource


class HomeControlPlane(pulumi.ComponentResource):
    namespace: pulumi.CustomResource
    crds: list[pulumi.CustomResource]
    controller_manager: pulumi.CustomResource
    webhooks: list[pulumi.CustomResource]

    def __init__(
        self,
        name: str,
        home: Cluster,
        runtime: RuntimeConfig,
        on_demand_args: list[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`on_demand_args`: the controller-manager's on-demand offloading defaults (OnDemandConfig.args)."""
        super().__init__("liqo-stack:index:HomeControlPlane", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.namespace = home.object("namespace", manifests.runtime_namespace("control-plane"), child)
        self.crds = [home.object(f"crd-{crd['metadata']['name']}", crd, child) for crd in home_crd_manifests()]
        self.runtime_class = home.object("runtimeclass", manifests.runtime_class(), child)
        home.object("metrics-reader-role", manifests.metrics_reader_role("control-plane"), child)
        self.storage_class = home.object("storageclass", manifests.storage_class(), child)

        # In the liqo namespace only: the first replica creates the webhook CA Secret the others read.
        in_liqo = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace])
        ns, manager = names.LIQO_NAMESPACE, names.CONTROLLER_MANAGER
        ca_role = home.object(
            "controller-manager-webhook-ca-role",
            manifests.role(manager, ns, manifests.CONTROLLER_MANAGER_NAMESPACE_RULES, "controller-manager"),
            in_liqo,
        )
        ca_binding = home.object(
            "controller-manager-webhook-ca-binding",
            manifests.binding("Role", manager, manager, manager, ns, "controller-manager", ns=ns),
            pulumi.ResourceOptions(parent=self, depends_on=[ca_role]),
        )
        self.controller_manager = deploy_controller(
            home,
            self,
            resource_name="controller-manager",
            name=names.CONTROLLER_MANAGER,
            component="controller-manager",
            rules=manifests.CONTROLLER_MANAGER_RULES,
            args=[
                "controller-manager",
                f"--home-cluster-id={home.cluster_id}",
                "--webhook-address=0.0.0.0",
                f"--webhook-port={manifests.WEBHOOK_CONTAINER_PORT}",
                *(on_demand_args or []),
            ],
            runtime=runtime,
            replicas=runtime.replicas.controller_manager,
            depends_on=[self.namespace, ca_binding, *self.crds],
        )
        after_manager = pulumi.ResourceOptions(parent=self, depends_on=[self.controller_manager])
        url_port = runtime.webhook_port if runtime.mode is RuntimeMode.EXTERNAL else None
        self.webhooks = [
            home.object("pod-mutating-webhook", manifests.pod_mutating_webhook(url_port), after_manager),
            home.object(
                "offloading-validating-webhook", manifests.offloading_validating_webhook(url_port), after_manager
            ),
        ]
        if runtime.mode is RuntimeMode.CLUSTER:
            home.object("webhook-service", manifests.webhook_service(names.CONTROLLER_MANAGER), after_manager)
        self.register_outputs({})
