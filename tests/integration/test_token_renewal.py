"""The token reflector against real API servers: a pod's token Secret is renewed when its time comes
(80% of the shortest token's life; made seconds here), with new tokens the home API server
issued, and deleted when the home pod goes; a Secret of ours that its store has not shown yet is no
conflict."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.core_v1 import Event, Pod, Secret, ServiceAccount

from liqo_stack.dev.clusters import DevEnvironment
from runtime.api import VirtualNodeSpec, names
from runtime.forging import tokens
from runtime.kube import Informer
from runtime.reflection import Peering
from runtime.reflection.tokens import TokenReflector
from tests.support.kube import get_or_none, wait_until_async

pytestmark = pytest.mark.clusters


def pod(namespace: str) -> Any:
    """A pod that never runs (its node does not exist): what counts is the token it mounts."""
    vault = {"serviceAccountToken": {"path": "vault", "audience": "vault", "expirationSeconds": 600}}
    return Pod.from_dict(
        {
            "metadata": {"name": "renewed", "namespace": namespace},
            "spec": {
                "nodeName": "nowhere",
                "serviceAccountName": "robot",
                "containers": [{"name": "app", "image": "nginx", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
                "volumes": [{"name": "v", "projected": {"sources": [vault]}}],
            },
        }
    )


def decoded(secret: Any) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in (secret.data or {}).items()}


@contextlib.asynccontextmanager
async def token_reflector(dev_env: DevEnvironment, namespace: str, twin: str) -> AsyncIterator[TokenReflector]:
    """The token reflector of foreign-1 following `namespace` into `twin`, with token support on."""
    home_client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("home")))
    foreign_client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("foreign-1")))
    pods = Informer(home_client, Pod, namespace=namespace)
    spec = VirtualNodeSpec(clusterID="foreign-1")
    peering = Peering(home_client, foreign_client, "home", "foreign-1", node_spec=lambda: spec)
    reflector = TokenReflector(peering, pods)
    task = asyncio.create_task(pods.run())
    try:
        await pods.synced.wait()
        await reflector.start()
        reflector.follow({namespace: twin})
        yield reflector
    finally:
        task.cancel()
        await reflector.stop()
        await home_client.close()
        await foreign_client.close()


def test_a_token_secret_is_renewed_when_due_and_deleted_with_the_pod(
    dev_env: DevEnvironment,
    home: Client,
    foreign: dict[str, Client],
    namespaces: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    namespace, twin = namespaces
    home.create(ServiceAccount(metadata=ObjectMeta(name="robot", namespace=namespace)))
    home.create(pod(namespace))
    # 600 s is the shortest token the API server issues: renew after 1% of it (6 s) instead of 80%
    monkeypatch.setattr(tokens, "REFRESH_AT", 0.01)
    name = names.token_secret_name("renewed")
    seen: list[Any] = []

    async def scenario() -> None:
        async def secret_where(condition: Any, timeout: float) -> Any:
            deadline = asyncio.get_running_loop().time() + timeout
            while asyncio.get_running_loop().time() < deadline:
                listed = foreign["foreign-1"].list(Secret, namespace=twin, fields={"metadata.name": name})
                found = next(iter(listed), None)
                if condition(found):
                    return found
                await asyncio.sleep(0.2)
            raise TimeoutError(f"Secret {twin}/{name}: condition not met after {timeout:.0f}s")

        async with token_reflector(dev_env, namespace, twin):
            seen.append(await secret_where(lambda s: s is not None, 30))
            seen.append(await secret_where(lambda s: s is not None and decoded(s) != decoded(seen[0]), 30))
            seen.append(review(home, decoded(seen[1])["v.token"]))
            home.delete(Pod, "renewed", namespace=namespace, grace_period=0)
            await secret_where(lambda s: s is None, 30)

    asyncio.run(scenario())
    first, renewed = decoded(seen[0]), decoded(seen[1])
    assert first["v.token"] != renewed["v.token"], "a new token"
    assert cast(Any, seen[0]).metadata.uid == cast(Any, seen[1]).metadata.uid, "the same Secret, updated in place"
    assert renewed["namespace"] == namespace
    status = seen[2]
    assert status.authenticated and status.user.username == f"system:serviceaccount:{namespace}:robot"


def review(home: Client, token: str) -> Any:
    spec = {"token": token, "audiences": ["vault"]}
    body: Any = TokenReview.from_dict({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})
    return cast(Any, home.create(body)).status


def test_a_secret_of_ours_the_store_has_not_shown_yet_is_no_conflict(
    dev_env: DevEnvironment, home: Client, foreign: dict[str, Client], namespaces: tuple[str, str]
) -> None:
    namespace, twin = namespaces
    home.create(ServiceAccount(metadata=ObjectMeta(name="robot", namespace=namespace)))
    name = names.token_secret_name("renewed")

    async def scenario() -> None:
        async with token_reflector(dev_env, namespace, twin) as reflector:
            await wait_until_async(lambda: reflector.synced_scope(namespace), what="the twin's Secrets known")
            # the Secrets' store stops seeing events: the Secret about to be written is never shown
            reflector.scopes[namespace].tasks["secrets"].cancel()
            home.create(pod(namespace))
            there = foreign["foreign-1"]
            await wait_until_async(lambda: get_or_none(there, Secret, name, twin), what="the token Secret written")
            queue = reflector.queue  # its renewal stays scheduled: done when the reconciles are
            await wait_until_async(
                lambda: queue.depth == 0 and not queue._processing, what="the write's reconcile done"
            )
            done = queue.stats.reconciles
            queue.add(f"{namespace}/renewed")  # decided again, the store still without it: 409
            await wait_until_async(lambda: queue.stats.reconciles > done, what="the pod decided again")

    asyncio.run(scenario())
    events = list(home.list(Event, namespace=namespace, fields={"involvedObject.name": "renewed"}))
    assert [e.message for e in events if e.reason == "ReflectionConflict"] == []
    assert get_or_none(foreign["foreign-1"], Secret, name, twin) is not None
