"""The home control plane: liqo namespace, CRDs, RuntimeClass `liqo`, controller-manager + RBAC."""

from __future__ import annotations

import pulumi

from liqo_stack import manifests
from liqo_stack.components.cluster import Cluster
from liqo_stack.config import RuntimeConfig, RuntimeMode
from liqo_stack.resources.kube_object import KubeObject
from runtime.api import home_crd_manifests, names


class HomeControlPlane(pulumi.ComponentResource):
    namespace: KubeObject
    crds: list[KubeObject]
    controller_manager: KubeObject

    def __init__(self, name: str, home: Cluster, runtime: RuntimeConfig, opts: pulumi.ResourceOptions | None = None):
        super().__init__("liqo-stack:index:HomeControlPlane", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        component = "controller-manager"
        ns = names.LIQO_NAMESPACE

        self.namespace = home.object("namespace", manifests.namespace(ns, "control-plane"), child)
        self.crds = [home.object(f"crd-{crd['metadata']['name']}", crd, child) for crd in home_crd_manifests()]
        self.runtime_class = home.object("runtimeclass", manifests.runtime_class(), child)

        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace])
        account = home.object(
            "controller-manager-sa", manifests.service_account(names.CONTROLLER_MANAGER, ns, component), in_ns
        )
        role = home.object(
            "controller-manager-role",
            manifests.cluster_role(names.CONTROLLER_MANAGER, manifests.CONTROLLER_MANAGER_RULES, component),
            child,
        )
        role_binding = home.object(
            "controller-manager-binding",
            manifests.binding(
                "ClusterRole",
                names.CONTROLLER_MANAGER,
                names.CONTROLLER_MANAGER,
                names.CONTROLLER_MANAGER,
                ns,
                component,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[role, account]),
        )
        replicas = 1 if runtime.mode is RuntimeMode.CLUSTER else 0
        self.controller_manager = home.object(
            "controller-manager",
            manifests.deployment(
                names.CONTROLLER_MANAGER,
                ns,
                runtime.image,
                ["controller-manager", f"--home-cluster-id={home.cluster_id}"],
                names.CONTROLLER_MANAGER,
                replicas,
                component,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[account, role_binding, *self.crds]),
        )
        self.register_outputs({})
