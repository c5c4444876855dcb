"""The runtime's client and HTTP transport (aiohttp under lightkube) against a real API server: what
lightkube and the informers rely on from httpx2's own transport must hold through it, whether a
request goes through httpx2 (lists, watches) or straight to aiohttp (one-shot requests)."""

from __future__ import annotations

import asyncio
import os
import socket
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import msgspec
import pytest
from lightkube import ApiError, Client, KubeConfig
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.core_v1 import ConfigMap, Namespace, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import RoleBinding
from lightkube.types import PatchType

from liqo_stack.dev.clusters import DevEnvironment
from runtime.kube import EngineMetrics, Event, Informer, informing
from runtime.kube.client import RuntimeClient, async_client, delete_unchanged
from runtime.kube.transport import AiohttpTransport
from tests.support.kube import wait_until_async
from tests.support.sockets import established_by_port

pytestmark = pytest.mark.clusters
BIG = {"size": "big"}  # the big ConfigMaps, apart from any other in the namespace


@pytest.fixture
def namespace(home: Client, unique_name: str) -> Any:
    home.create(Namespace(metadata=ObjectMeta(name=unique_name)))
    yield unique_name
    home.delete(Namespace, unique_name)


def runtime_client(dev_env: DevEnvironment, **options: Any) -> RuntimeClient:
    return async_client(KubeConfig.from_file(dev_env.kubeconfig("home")), field_manager="transport-test", **options)


def test_requests_go_through_aiohttp_and_errors_keep_their_status(dev_env: DevEnvironment, namespace: str) -> None:
    client = runtime_client(dev_env)
    assert isinstance(client._client._client._transport, AiohttpTransport)
    sent: list[tuple[str, str]] = []  # every request, as the runtime's metrics count them
    client.on_request(lambda method, path: sent.append((method, path)))
    through_httpx2: list[str] = []  # those lightkube built as httpx2 requests

    async def built(request: httpx2.Request) -> None:
        through_httpx2.append(f"{request.method} {request.url.path}")

    client._client._client.event_hooks["request"].append(built)

    async def scenario() -> None:
        created = await client.create(ConfigMap(metadata=ObjectMeta(name="cm", namespace=namespace), data={"a": "1"}))
        assert created.metadata and created.metadata.uid
        patched = await client.patch(
            ConfigMap, "cm", {"data": {"b": "2"}}, namespace=namespace, patch_type=PatchType.MERGE
        )
        assert patched.data == {"a": "1", "b": "2"}
        applied = await client.apply(
            ConfigMap(metadata=ObjectMeta(name="applied", namespace=namespace), data={"c": "3"})
        )
        assert applied.data == {"c": "3"}
        assert (await client.get(ConfigMap, "cm", namespace=namespace)).data == {"a": "1", "b": "2"}
        with pytest.raises(ApiError) as conflict:
            await client.create(ConfigMap(metadata=ObjectMeta(name="cm", namespace=namespace)))
        assert conflict.value.status.code == 409
        await client.delete(ConfigMap, "cm", namespace=namespace)
        with pytest.raises(ApiError) as missing:
            await client.get(ConfigMap, "cm", namespace=namespace)
        assert missing.value.status.code == 404 and missing.value.status.reason == "NotFound"
        # one-shot requests skip httpx2; a list keeps lightkube's path, through the same transport
        assert through_httpx2 == []
        listed = [c.metadata.name async for c in client.list(ConfigMap, namespace=namespace) if c.metadata]
        assert "applied" in listed and "cm" not in listed
        assert through_httpx2 == [f"GET /api/v1/namespaces/{namespace}/configmaps"]
        assert [method for method, _ in sent] == ["POST", "PATCH", "PATCH", "GET", "POST", "DELETE", "GET", "GET"]
        assert {path for _, path in sent} == {
            f"/api/v1/namespaces/{namespace}/configmaps",
            f"/api/v1/namespaces/{namespace}/configmaps/cm",
            f"/api/v1/namespaces/{namespace}/configmaps/applied",
        }
        await client.close()

    asyncio.run(scenario())


def test_a_token_file_is_read_again_after_a_401(
    dev_env: DevEnvironment, home: Client, namespace: str, tmp_path: Path
) -> None:
    """As lightkube's own auth for in-cluster tokens, which the kubelet rotates: a 401 reads the
    file again and retries once; a token that did not change leaves the 401 to the caller."""
    home.create(ServiceAccount(metadata=ObjectMeta(name="reader", namespace=namespace)))
    home.create(
        RoleBinding(
            metadata=ObjectMeta(name="reader", namespace=namespace),
            roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="view"),
            subjects=[Subject(kind="ServiceAccount", name="reader", namespace=namespace)],
        )
    )
    # the test's own ConfigMap: kube-root-ca.crt appears only when the controller-manager gets to it
    home.create(ConfigMap(metadata=ObjectMeta(name="readable", namespace=namespace), data={"a": "1"}))
    request = ServiceAccount.Token(metadata=ObjectMeta(name="reader"), spec=TokenRequestSpec(audiences=[]))
    answer: Any = home.create(request, name="reader", namespace=namespace)
    token_file = tmp_path / "token"
    token_file.write_text("not-a-token\n")
    config = KubeConfig.from_file(dev_env.kubeconfig("home")).get()
    assert config is not None and config.user is not None
    # the CA of the cluster, and the token file instead of the admin's client certificate
    user = msgspec.structs.replace(
        config.user,
        token_file=str(token_file),
        client_cert=None,
        client_cert_data=None,
        client_key=None,
        client_key_data=None,
    )
    client = async_client(config._replace(user=user))

    async def scenario() -> None:
        with pytest.raises(ApiError) as refused:
            await client.get(Namespace, namespace)
        assert refused.value.status.code == 401
        token_file.write_text(str(answer.status.token))
        # the cached header is refused, the file is read again and the request retried
        read = await client.get(ConfigMap, "readable", namespace=namespace)
        assert read.data == {"a": "1"}
        await client.close()

    asyncio.run(scenario())


def test_a_compressed_list_and_a_watch_stream_arrive_whole(dev_env: DevEnvironment, namespace: str) -> None:
    """The API server gzips responses over 128 KiB (we ask for gzip as httpx2 does): the list is
    decoded; a watch streams its events line by line, as the informers read them."""
    client = runtime_client(dev_env)
    big = "x" * 60_000

    async def scenario() -> None:
        metas = [ObjectMeta(name=f"big-{i}", namespace=namespace, labels=BIG) for i in range(4)]
        await asyncio.gather(*(client.create(ConfigMap(metadata=meta, data={"v": big})) for meta in metas))
        response = await client._client._client.get(
            f"/api/v1/namespaces/{namespace}/configmaps", params={"labelSelector": "size=big"}
        )
        assert response.headers.get("content-encoding") == "gzip"
        assert len(response.json()["items"]) == 4
        listed = [
            cm.metadata.name
            async for cm in client.list(ConfigMap, namespace=namespace, labels={"size": "big"})
            if cm.metadata
        ]
        assert sorted(str(n) for n in listed) == [f"big-{i}" for i in range(4)]

        informer = Informer(client, ConfigMap, namespace=namespace)
        seen: list[Event] = []
        informer.add_handler(seen.append)
        task = asyncio.create_task(informer.run())
        await asyncio.wait_for(informer.synced.wait(), 30)
        await client.create(ConfigMap(metadata=ObjectMeta(name="late", namespace=namespace)))
        await client.delete(ConfigMap, "big-0", namespace=namespace)
        deadline = asyncio.get_running_loop().time() + 30
        expected = {("ADDED", f"{namespace}/late"), ("DELETED", f"{namespace}/big-0")}
        while not expected <= {(e.type, e.key) for e in seen}:
            assert asyncio.get_running_loop().time() < deadline, [(e.type, e.key) for e in seen]
            await asyncio.sleep(0.05)
        task.cancel()
        await client.close()

    asyncio.run(scenario())


def _add_key(keys: set[str], event: Event) -> None:
    keys.add(event.key)


async def running_informers(
    count: int, client: RuntimeClient, namespace: str, **options: Any
) -> tuple[list[Informer], list[set[str]], list[asyncio.Task[None]]]:
    """`count` ConfigMap informers of `namespace`, synced; the keys each has seen; their tasks."""
    informers = [Informer(client, ConfigMap, namespace=namespace, **options) for _ in range(count)]
    seen: list[set[str]] = [set() for _ in informers]
    for informer, keys in zip(informers, seen, strict=True):
        informer.add_handler(partial(_add_key, keys))
    tasks = [asyncio.create_task(informer.run()) for informer in informers]
    await asyncio.wait_for(asyncio.gather(*(i.synced.wait() for i in informers)), 60)
    return informers, seen, tasks


def test_more_watches_than_a_connection_pool_would_hold_leave_requests_room(
    dev_env: DevEnvironment, namespace: str
) -> None:
    """A watch over HTTP/1.1 (a busy one) holds its connection for as long as it runs, and a burst
    can make many busy: past any fixed pool size (httpx2's was 100) a capped pool would leave the
    next watch, and every request, waiting forever."""
    client = runtime_client(dev_env)
    watches = 120

    async def scenario() -> None:
        metrics = EngineMetrics()  # counts the watch requests the informers send
        _, seen, tasks = await running_informers(watches, client, namespace, metrics=metrics, multiplexed=False)
        labels = {"cluster": "", "verb": "watch", "resource": "ConfigMap"}
        await wait_until_async(  # every informer past its list, its watch sent
            lambda: (metrics.registry.get_sample_value("liqo_api_calls_total", labels) or 0) >= watches,
            30,
            f"{watches} watches",
        )
        created = await asyncio.wait_for(
            client.create(ConfigMap(metadata=ObjectMeta(name="after-the-watches", namespace=namespace))), 10
        )
        assert created.metadata is not None
        key = f"{namespace}/after-the-watches"
        deadline = asyncio.get_running_loop().time() + 15
        while not all(key in keys for keys in seen):
            missing = sum(key not in keys for keys in seen)
            assert asyncio.get_running_loop().time() < deadline, f"{missing} of {watches} watches never saw the create"
            await asyncio.sleep(0.1)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()

    asyncio.run(scenario())


def test_watches_share_http2_connections_up_to_the_servers_stream_limit(
    dev_env: DevEnvironment, namespace: str
) -> None:
    """A virtual kubelet watches about ten kinds per twin namespace: over HTTP/1.1 each watch held a
    TLS connection. Over HTTP/2 a client's watches share one, up to the streams the API server allows
    on one connection; each still sees its events at once, and a watch ended gives its stream back."""
    client = runtime_client(dev_env)
    assert client.multiplexer is not None
    config = KubeConfig.from_file(dev_env.kubeconfig("home")).get()
    assert config is not None
    server_port = urlsplit(config.cluster.server).port or 443
    watches = 250

    async def scenario() -> None:
        others = established_by_port(os.getpid())[server_port]  # the session's own clients' connections
        informers, seen, tasks = await running_informers(watches, client, namespace, multiplexed=True)
        await client.create(ConfigMap(metadata=ObjectMeta(name="seen-by-all", namespace=namespace)))
        key = f"{namespace}/seen-by-all"
        await wait_until_async(
            lambda: all(key in keys for keys in seen), 30, f"the create seen by all {watches} watches"
        )

        assert client.multiplexer is not None
        limit = min(c.stream_limit() for c in client.multiplexer._connections)
        assert limit < watches, "the test needs more watches than one connection carries"
        expected = -(-watches // limit)
        assert client.multiplexer.connection_count() == expected
        await client.transport.aclose()  # the lists' HTTP/1.1 connections: only the watches' remain
        assert established_by_port(os.getpid())[server_port] - others == expected

        for task in tasks[1:]:  # every watch but one ended: their streams are given back
            task.cancel()
        await asyncio.gather(*tasks[1:], return_exceptions=True)
        multiplexer = client.multiplexer
        await wait_until_async(
            lambda: sum(c.open_streams() for c in multiplexer._connections) == 1, 10, "the ended watches' streams reset"
        )
        await client.delete(ConfigMap, "seen-by-all", namespace=namespace)
        await wait_until_async(lambda: key not in informers[0].store, 10, "the delete seen by the last watch")
        tasks[0].cancel()
        await asyncio.gather(tasks[0], return_exceptions=True)
        await client.close()
        # the sockets leave ESTABLISHED as the closes go through, not when close() returns (seen in CI)
        await wait_until_async(
            lambda: established_by_port(os.getpid())[server_port] <= others, 10, "every connection of the client closed"
        )

    asyncio.run(scenario())


def test_a_multiplexed_watch_that_turns_busy_goes_on_over_a_connection_of_its_own(
    dev_env: DevEnvironment, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over HTTP/2 an event costs more CPU (client and API server): a twin's watch is multiplexed
    while quiet, and a burst moves it to a connection of its own without losing an event; once its
    watch ends quiet again, the next one is multiplexed again."""
    monkeypatch.setattr(informing, "QUIET_SECONDS", 1.0)
    client = runtime_client(dev_env)
    multiplexer = client.multiplexer
    assert multiplexer is not None
    burst = 3 * informing.BUSY_EVENTS

    def streams() -> int:
        return sum(c.open_streams() for c in multiplexer._connections)

    async def scenario() -> None:
        informer = Informer(client, ConfigMap, namespace=namespace, multiplexed=True, watch_timeout_seconds=3)
        keys: set[str] = set()
        informer.add_handler(partial(_add_key, keys))
        task = asyncio.create_task(informer.run())
        await asyncio.wait_for(informer.synced.wait(), 30)
        await wait_until_async(lambda: streams() == 1, 10, "the quiet watch on the HTTP/2 connection")
        await asyncio.gather(
            *(
                client.create(ConfigMap(metadata=ObjectMeta(name=f"burst-{i}", namespace=namespace)))
                for i in range(burst)
            )
        )
        expected = {f"{namespace}/burst-{i}" for i in range(burst)}
        await wait_until_async(lambda: expected <= keys, 30, f"all {burst} creates seen")
        # the multiplexed stream is released as its watch ends, a few loop turns after the event that
        # made the informer busy (seen once as 1 stream still open at the first look)
        await wait_until_async(lambda: informer.busy and streams() == 0, 10, "busy, off the HTTP/2 connection")
        await wait_until_async(lambda: not informer.busy and streams() == 1, 30, "multiplexed again, quiet")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()

    asyncio.run(scenario())


def test_transport_failures_are_httpx2_errors(dev_env: DevEnvironment, namespace: str) -> None:
    """Refused connections and silent servers raise what lightkube and the informers handle."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    config = KubeConfig.from_file(dev_env.kubeconfig("home")).get()
    assert config is not None
    cluster = msgspec.structs.replace(config.cluster, server=f"https://127.0.0.1:{closed_port}")
    refused = async_client(config._replace(cluster=cluster))
    quiet = runtime_client(dev_env, timeout=httpx2.Timeout(0.5))

    async def scenario() -> None:
        with pytest.raises(httpx2.ConnectError):
            await refused.get(Namespace, namespace)
        # a watch of a namespace where nothing happens: no byte within the read timeout
        http = quiet._client._client
        async with http.stream("GET", f"/api/v1/namespaces/{namespace}/configmaps?watch=true") as stream:
            with pytest.raises(httpx2.ReadTimeout):
                async for _ in stream.aiter_lines():
                    pass
        await refused.close()
        await quiet.close()

    asyncio.run(scenario())


def test_a_delete_with_preconditions_deletes_only_the_version_read(dev_env: DevEnvironment, namespace: str) -> None:
    """delete_unchanged (the foreign agent's delete of a twin): refused with 409 once the object changed
    since it was read, so a decision taken on what was read holds; the version read now deletes it."""
    client = runtime_client(dev_env)

    async def scenario() -> None:
        made = await client.create(ConfigMap(metadata=ObjectMeta(name="claimed", namespace=namespace)))
        assert made.metadata is not None
        read_then = (str(made.metadata.uid), str(made.metadata.resourceVersion))
        changed = await client.patch(
            ConfigMap, "claimed", {"metadata": {"labels": {"owner": "admin"}}}, namespace=namespace
        )
        with pytest.raises(ApiError) as refused:
            await delete_unchanged(
                client, ConfigMap, "claimed", uid=read_then[0], resource_version=read_then[1], namespace=namespace
            )
        assert refused.value.status.code == 409, refused.value.status
        assert (await client.get(ConfigMap, "claimed", namespace=namespace)).metadata is not None
        assert changed.metadata is not None
        await delete_unchanged(
            client,
            ConfigMap,
            "claimed",
            uid=str(changed.metadata.uid),
            resource_version=str(changed.metadata.resourceVersion),
            namespace=namespace,
        )
        with pytest.raises(ApiError) as gone:
            await client.get(ConfigMap, "claimed", namespace=namespace)
        assert gone.value.status.code == 404
        await client.close()

    asyncio.run(scenario())
