"""A client whose token changes while it runs (runtime/kube/client.py: a token source): the token of
the moment goes out, a 401 followed by a changed token is sent again. The e2e test
(tests/e2e/test_foreign_guards.py) revokes and reissues a real token."""

from __future__ import annotations

import asyncio
import base64
from typing import Any, cast

from lightkube import AsyncClient
from lightkube.config.models import User
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret

from runtime.api import names
from runtime.controllers.namespaceoffloading import ForeignClusters
from runtime.kube.client import BearerToken
from runtime.kube.informing import object_key
from tests.support.kube import wait_until_async
from tests.support.peering import kubeconfig_with_token


def test_a_token_source_gives_the_header_of_the_moment() -> None:
    current = {"token": "old"}
    bearer = BearerToken(User(token="from-the-kubeconfig"), lambda: current["token"])
    assert bearer.header() == "Bearer old"
    assert not bearer.renewed(), "a 401 with the same token: nothing to send again"
    current["token"] = "new"
    assert bearer.renewed(), "a 401 after the token changed: sent again"
    assert bearer.header() == "Bearer new"


def test_without_a_source_the_kubeconfig_token_stays() -> None:
    bearer = BearerToken(User(token="fixed"))
    assert bearer.header() == "Bearer fixed"
    assert not bearer.renewed()


def _write_credentials(clusters: ForeignClusters, token: str) -> None:
    """The credentials Secret as the controller's watch of the liqo namespace last saw it."""
    encoded = base64.b64encode(kubeconfig_with_token(token).encode()).decode()
    secret = Secret(
        metadata=ObjectMeta(name="credentials", namespace=names.LIQO_NAMESPACE), data={"kubeconfig": encoded}
    )
    clusters.credentials.store[object_key(secret)] = secret


def _recording_closes(client: AsyncClient) -> list[AsyncClient]:
    """The list `client` appends itself to when it is closed (and closes)."""
    closed: list[AsyncClient] = []
    original_close = client.close

    async def recorded_close() -> None:
        closed.append(client)
        await original_close()

    client.close = recorded_close  # type: ignore[method-assign]
    return closed


def test_the_controller_managers_client_for_old_credentials_is_closed_once_its_requests_are_done() -> None:
    """A rotated token: the client for the old credentials lives on for the reconciles still using it
    (`retire_after`, a request's deadline), then is closed, not left to the garbage collector with its
    connections (CI's controller-manager log: "Unclosed client session")."""

    async def scenario() -> None:
        clusters = ForeignClusters(cast(Any, None), retire_after=0.2)
        _write_credentials(clusters, "first")
        first = await clusters.client("foreign-1", "credentials")
        assert await clusters.client("foreign-1", "credentials") is first, "unchanged credentials: the same client"
        closed = _recording_closes(first)
        _write_credentials(clusters, "second")
        assert await clusters.client("foreign-1", "credentials") is not first
        assert closed == [], "still open for the reconciles using it"
        await wait_until_async(lambda: closed == [first], 5, "the old client closed once its requests' deadline passed")
        await clusters.close()

    asyncio.run(scenario())


def test_a_client_retiring_when_the_controller_stops_is_closed_then() -> None:
    async def scenario() -> None:
        clusters = ForeignClusters(cast(Any, None), retire_after=3600)
        _write_credentials(clusters, "first")
        closed = _recording_closes(await clusters.client("foreign-1", "credentials"))
        _write_credentials(clusters, "second")
        await clusters.client("foreign-1", "credentials")
        await clusters.close()
        assert len(closed) == 1

    asyncio.run(scenario())
