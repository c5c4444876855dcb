"""`TokenKubeconfig`: a kubeconfig for a ServiceAccount, from its token Secret, as a Pulumi secret.

The token controller of the target cluster fills the token Secret asynchronously; this resource
waits for it and composes a kubeconfig with the cluster's server and CA and that token. It owns
nothing in the cluster (the token Secret is a KubeObject), so deleting it deletes nothing.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import pulumi
import yaml
from lightkube import ApiError
from lightkube.resources.core_v1 import Secret
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider, UpdateResult

from liqo_stack.resources.kube_object import client_for, serialized

TOKEN_WAIT_SECONDS = 60


def compose_kubeconfig(admin_kubeconfig: str, cluster_id: str, user: str, token: str, ca_data: str | None) -> str:
    admin = yaml.safe_load(admin_kubeconfig)
    context = next(
        c for c in admin["contexts"] if c["name"] == admin.get("current-context", admin["contexts"][0]["name"])
    )
    cluster = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])["cluster"]
    cluster_entry: dict[str, Any] = {"server": cluster["server"]}
    if ca_data or cluster.get("certificate-authority-data"):
        cluster_entry["certificate-authority-data"] = ca_data or cluster["certificate-authority-data"]
    elif cluster.get("insecure-skip-tls-verify"):
        cluster_entry["insecure-skip-tls-verify"] = True
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_id, "cluster": cluster_entry}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": cluster_id, "context": {"cluster": cluster_id, "user": user}}],
        "current-context": cluster_id,
    }
    return str(yaml.safe_dump(config))


def _read_token(props: dict[str, Any]) -> dict[str, Any]:
    client = client_for(props["admin_kubeconfig"])
    deadline = time.monotonic() + TOKEN_WAIT_SECONDS
    while True:
        try:
            found = client.get(Secret, props["secret_name"], namespace=props["namespace"])
            data = found.data or {}
            if data.get("token"):
                token = base64.b64decode(data["token"]).decode()
                kubeconfig = compose_kubeconfig(
                    props["admin_kubeconfig"], props["cluster_id"], props["account"], token, data.get("ca.crt")
                )
                return {**props, "kubeconfig": kubeconfig}
        except ApiError as err:
            if err.status.code != 404:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{props['namespace']}/{props['secret_name']} got no token within {TOKEN_WAIT_SECONDS}s: "
                "is kube-controller-manager (its token controller) running in that cluster?"
            )
        time.sleep(0.5)


class TokenKubeconfigProvider(ResourceProvider):
    def __reduce__(self) -> tuple[type, tuple[()]]:
        # Pickled by reference: the state names this class, and every run uses the installed code.
        return (type(self), ())

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        keys = ("admin_kubeconfig", "cluster_id", "namespace", "secret_name", "account")
        return DiffResult(
            changes=any(olds.get(k) != news.get(k) for k in keys), replaces=[], delete_before_replace=False
        )

    @serialized
    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"{props['cluster_id']}/{props['namespace']}/{props['secret_name']}", _read_token(props))

    @serialized
    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(_read_token(news))


_PROVIDER = TokenKubeconfigProvider()


class TokenKubeconfig(pulumi.dynamic.Resource, module="liqo", name="TokenKubeconfig"):
    kubeconfig: pulumi.Output[str]

    def __init__(
        self,
        resource_name: str,
        *,
        cluster_id: pulumi.Input[str],
        admin_kubeconfig: pulumi.Input[str],
        namespace: pulumi.Input[str],
        secret_name: pulumi.Input[str],
        account: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "cluster_id": cluster_id,
            "admin_kubeconfig": pulumi.Output.secret(admin_kubeconfig),
            "namespace": namespace,
            "secret_name": secret_name,
            "account": account,
            "kubeconfig": None,
        }
        secret_opts = pulumi.ResourceOptions(additional_secret_outputs=["kubeconfig"])
        super().__init__(_PROVIDER, resource_name, props, pulumi.ResourceOptions.merge(opts, secret_opts))
