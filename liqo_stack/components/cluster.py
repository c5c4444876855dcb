"""`Cluster`: where an object goes. Plays the part of an explicit provider per cluster.

Objects are keyed by the stable cluster id of the stack config; the kubeconfig (a Pulumi secret)
only says how to reach the cluster, so a new kubeconfig never replaces an object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from liqo_stack.resources.kube_object import KubeObject


@dataclass(frozen=True)
class Cluster:
    cluster_id: str
    kubeconfig: pulumi.Output[str]

    def object(
        self, resource_name: str, manifest: dict[str, Any] | pulumi.Output[dict[str, Any]], opts: pulumi.ResourceOptions
    ) -> KubeObject:
        return KubeObject(
            f"{self.cluster_id}:{resource_name}",
            cluster_id=self.cluster_id,
            kubeconfig=self.kubeconfig,
            manifest=manifest,
            opts=opts,
        )
