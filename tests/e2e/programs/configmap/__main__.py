"""A tiny program: one ConfigMap, in the cluster whose kubeconfig file the stack config names."""

from pathlib import Path

import pulumi

from liqo_stack.resources.kube_object import KubeObject

config = pulumi.Config()
greeting = KubeObject(
    "greeting",
    cluster_id=config.require("clusterId"),
    kubeconfig=Path(config.require("kubeconfigPath")).read_text(),
    manifest={
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": config.require("name"), "namespace": "default"},
        "data": {"hello": config.get("greeting") or "world"},
    },
)
pulumi.export("uid", greeting.uid)
