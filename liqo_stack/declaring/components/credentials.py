"""The home cluster's identity in a foreign cluster, as the kubeconfig its virtual kubelet uses.

Composed from the identity's token Secret (filled by the foreign cluster's token controller, read
back through pulumi-kubernetes as a secret output: `data.token` and the cluster's `data["ca.crt"]`)
and from where the foreign API server is reached: `apiServerAddress` in the stack config, else the
server of the foreign cluster's kubeconfig.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import pulumi
import yaml

from liqo_stack.declaring.components.cluster import Cluster
from liqo_stack.declaring.config import ConfigError, current_cluster, parse_api_server_address


def server_of(kubeconfig: str, cluster_id: str) -> dict[str, Any]:
    """The `cluster` entry (server, CA) of a kubeconfig's current context, which must name a server."""
    cluster = current_cluster(kubeconfig)
    if not cluster.get("server"):
        raise ConfigError(
            f"cluster {cluster_id}: its kubeconfig names no server for its current context; fix the kubeconfig "
            "or set apiServerAddress"
        )
    return cluster


def compose_kubeconfig(cluster: Mapping[str, Any], cluster_id: str, user: str, token: str, ca_data: str | None) -> str:
    """A kubeconfig of `user` with `token` for the server of `cluster` (a kubeconfig's cluster entry),
    trusting `ca_data` (the token Secret's CA) or else the entry's own CA."""
    entry: dict[str, Any] = {"server": cluster["server"]}
    if ca_data or cluster.get("certificate-authority-data"):
        entry["certificate-authority-data"] = ca_data or cluster["certificate-authority-data"]
    elif cluster.get("insecure-skip-tls-verify"):
        entry["insecure-skip-tls-verify"] = True
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_id, "cluster": entry}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": cluster_id, "context": {"cluster": cluster_id, "user": user}}],
        "current-context": cluster_id,
    }
    return str(yaml.safe_dump(config))


def home_identity_kubeconfig(
    api_server_address: str | None,
    foreign: Cluster,
    identity: str,
    tenant: str,
    token_data: pulumi.Output[Mapping[str, str]],
) -> pulumi.Output[str]:
    """The identity's kubeconfig, a secret output known once the token Secret has its data;
    `api_server_address`: where the identity reaches the API server (None: the kubeconfig's server)."""
    if api_server_address is not None:
        address = parse_api_server_address(api_server_address)
        server: pulumi.Output[Mapping[str, Any]] = pulumi.Output.from_input(
            {"server": f"https://{f'[{address.host}]' if ':' in address.host else address.host}:{address.port}"}
        )
    elif foreign.kubeconfig is not None:
        server = foreign.kubeconfig.apply(lambda text: server_of(text, foreign.cluster_id))
    else:
        raise ConfigError(
            f"liqo:foreignClusters: cluster {foreign.cluster_id} has neither a kubeconfig nor apiServerAddress: "
            "set apiServerAddress (where the home identity reaches its API server) when you pass its provider"
        )

    def compose(args: list[Any]) -> str:
        cluster, data = args
        if not (data or {}).get("token"):
            raise RuntimeError(
                f"the token Secret of {identity} in {tenant} of cluster {foreign.cluster_id} has no data.token: is "
                "that cluster's kube-controller-manager (its token controller) running?"
            )
        token = base64.b64decode(data["token"]).decode()
        ca = data.get("ca.crt")
        return compose_kubeconfig(cluster, foreign.cluster_id, identity, token, ca)

    return pulumi.Output.secret(pulumi.Output.all(server, token_data).apply(compose))
