"""The virtual kubelet's health check against a real foreign API server: an answer is not enough.

docs/offloading.md: the node turns NotReady when the foreign API server cannot serve the home identity. A
401 (revoked or expired credentials) and a 403 (its RBAC removed) count as failed checks, with a
reason that says which; a 404 (no advertisement yet) comes from a live, authorized server.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
import yaml
from lightkube import Client, KubeConfig
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ServiceAccount

from liqo_stack.dev.clusters import DevEnvironment
from runtime.kube.client import async_client
from runtime.virtualkubelet.node import (
    FORBIDDEN_REASON,
    UNAUTHORIZED_REASON,
    UNREACHABLE_REASON,
    health_failure,
    probe_foreign,
)

pytestmark = pytest.mark.clusters

TENANT = "liqo-tenant-home"


def with_token(dev_env: DevEnvironment, cluster_id: str, token: str) -> dict[str, Any]:
    """The cluster's admin kubeconfig, its user swapped for a bearer token."""
    config: dict[str, Any] = yaml.safe_load(dev_env.kubeconfig(cluster_id).read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    return config


def check(config: dict[str, Any], cluster_id: str) -> str | None:
    async def probe() -> int | None:
        client = async_client(KubeConfig.from_dict(config))
        try:
            return await probe_foreign(client, TENANT, cluster_id, 10)
        finally:
            await client.close()

    return health_failure(asyncio.run(probe()))


def test_revoked_credentials_and_missing_rbac_fail_the_health_check(
    dev_env: DevEnvironment, foreign: dict[str, Client], unique_name: str
) -> None:
    cluster = foreign["foreign-1"]
    admin = yaml.safe_load(dev_env.kubeconfig("foreign-1").read_text())
    assert check(admin, "foreign-1") is None, "an authorized read answers (404 without an advertisement)"

    assert check(with_token(dev_env, "foreign-1", "not-a-valid-token"), "foreign-1") == UNAUTHORIZED_REASON

    # a valid identity that may not read the advertisement: its RoleBinding removed
    cluster.create(ServiceAccount(metadata=ObjectMeta(name=unique_name, namespace="default")))
    try:
        request = ServiceAccount.Token(metadata=ObjectMeta(name=unique_name), spec=TokenRequestSpec(audiences=[]))
        issued = cast(Any, cluster.create(request, name=unique_name, namespace="default"))
        assert check(with_token(dev_env, "foreign-1", issued.status.token), "foreign-1") == FORBIDDEN_REASON
    finally:
        cluster.delete(ServiceAccount, unique_name, namespace="default")

    # nobody there: the reason the node always had
    unreachable = yaml.safe_load(dev_env.kubeconfig("foreign-1").read_text())
    for entry in unreachable["clusters"]:
        entry["cluster"]["server"] = "https://127.0.0.1:1"
    assert check(unreachable, "foreign-1") == UNREACHABLE_REASON
