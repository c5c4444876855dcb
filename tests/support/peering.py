"""A peering's credentials at home, read and pointed elsewhere, and the shared virtual kubelet
restarted to read them (it reads the server address at start, a token at a 401): how the e2e tests
put a server of their own, or a link, between the virtual kubelet and a foreign cluster."""

from __future__ import annotations

import base64
from typing import Any, cast

import yaml
from lightkube import Client
from lightkube.resources.core_v1 import Secret
from lightkube.types import PatchType

from liqo_stack.dev.external_runtime import SHARED_KUBELET, ExternalRuntime
from runtime.api import names
from tests.support.kube import served_on, wait_until


def credentials(home: Client, cluster_id: str) -> Any:
    return home.get(Secret, names.credentials_secret_name(cluster_id), namespace=names.LIQO_NAMESPACE)


def kubeconfig_of(secret: Any) -> dict[str, Any]:
    return cast(dict[str, Any], yaml.safe_load(base64.b64decode(secret.data["kubeconfig"])))


def set_kubeconfig(home: Client, cluster_id: str, content: bytes) -> None:
    home.patch(
        Secret,
        names.credentials_secret_name(cluster_id),
        {"data": {"kubeconfig": base64.b64encode(content).decode()}},
        namespace=names.LIQO_NAMESPACE,
        patch_type=PatchType.MERGE,
    )


def pointed_at(kubeconfig: dict[str, Any], server: str, ca_pem: bytes | None) -> bytes:
    changed = yaml.safe_load(yaml.safe_dump(kubeconfig))
    for cluster in changed["clusters"]:
        cluster["cluster"]["server"] = server
        if ca_pem is not None:
            cluster["cluster"]["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return yaml.safe_dump(changed).encode()


def restart_kubelet(runtime: ExternalRuntime, home: Client) -> None:
    """The shared process again, once it serves foreign-1's Node (its port, Ready)."""
    runtime.stop(SHARED_KUBELET)
    runtime.start(SHARED_KUBELET)
    port = runtime.kubelet_ports["foreign-1"]
    wait_until(lambda: runtime.pid(SHARED_KUBELET) is not None and runtime.ready(SHARED_KUBELET), 90, "restarted")
    node = names.virtual_node_name("foreign-1")
    wait_until(lambda: served_on(home, node, port), 60, "foreign-1's node served by the restarted process")


def kubeconfig_with_token(token: str, server: str = "https://127.0.0.1:6443") -> str:
    """A foreign cluster's kubeconfig as a credentials Secret holds it, for tests that never reach it."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "foreign", "cluster": {"server": server}}],
            "users": [{"name": "home", "user": {"token": token}}],
            "contexts": [{"name": "foreign", "context": {"cluster": "foreign", "user": "home"}}],
            "current-context": "foreign",
        }
    )
