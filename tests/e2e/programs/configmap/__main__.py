"""A tiny program as an infra team writes one: one ConfigMap through pulumi-kubernetes, in the cluster
whose kubeconfig file the stack config names (an explicit provider, SSA, ConfigMaps mutable)."""

from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

config = pulumi.Config()
cluster = k8s.Provider(
    "cluster",
    kubeconfig=pulumi.Output.secret(Path(config.require("kubeconfigPath")).read_text()),
    cluster_identifier=config.require("clusterId"),
    enable_config_map_mutable=True,
)
greeting = k8s.core.v1.ConfigMap(
    "greeting",
    metadata={"name": config.require("name"), "namespace": "default"},
    data={"hello": config.get("greeting") or "world"},
    opts=pulumi.ResourceOptions(provider=cluster),
)
pulumi.export("uid", greeting.metadata.uid)
