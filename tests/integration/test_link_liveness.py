"""Connections that die without a word (runtime/kube/liveness.py): the runtime's client finds them
and its watches resume from their resourceVersion, nothing lost and no list again, against a real
API server.

Two faults: the packets of the client's open connections dropped on loopback by nftables (a NAT
that forgot its flows: TCP keepalive and the HTTP/2 PING both see it), and a relay in the path
whose open connections stop passing bytes while TCP still acknowledges them (only the PING, or a
busy watch's read deadline, sees it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import msgspec
import pytest
from lightkube import Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace

from liqo_stack.dev.clusters import DevEnvironment
from runtime.kube import Event, Informer
from runtime.kube.client import RuntimeClient, async_client
from runtime.kube.liveness import DEAD_CONNECTION_SECONDS
from tests.support.kube import wait_until_async
from tests.support.links import FreezingRelay, SilentDrop, client_ports, local_ports_to

pytestmark = pytest.mark.clusters
log = logging.getLogger(__name__)
# generous: the checks find a dead connection within DEAD_CONNECTION_SECONDS, the watch then retries
RECOVERY_TIMEOUT = 2 * DEAD_CONNECTION_SECONDS
# the informer's linear backoff step in the outage test (the runtime's: 1 s), long enough to tell a retry
# at the server's first answer from one at the end of the backoff
BACKOFF_STEP_SECONDS = 10.0
MADE_HERE = {"made-by": "test-link-liveness"}  # not the namespace's own kube-root-ca.crt


@pytest.fixture
def namespace(home: Client, unique_name: str) -> Iterator[str]:
    home.create(Namespace(metadata=ObjectMeta(name=unique_name)))
    yield unique_name
    home.delete(Namespace, unique_name)


def home_config(dev_env: DevEnvironment, port: int | None = None) -> Any:
    """The home cluster's kubeconfig (its current context), through `port` on loopback if given."""
    single = KubeConfig.from_file(dev_env.kubeconfig("home")).get()
    assert single is not None
    if port is None:
        return single
    return single._replace(cluster=msgspec.structs.replace(single.cluster, server=f"https://127.0.0.1:{port}"))


def server_port(dev_env: DevEnvironment) -> int:
    return urlsplit(home_config(dev_env).cluster.server).port or 443


def create_configmap(home: Client, namespace: str, name: str) -> None:
    home.create(ConfigMap(metadata=ObjectMeta(name=name, namespace=namespace, labels=MADE_HERE), data={"k": name}))


class Recorder:
    """A ConfigMap informer's events, by name."""

    def __init__(self, client: RuntimeClient, namespace: str) -> None:
        self.informer = Informer(client, ConfigMap, namespace=namespace, labels=MADE_HERE)
        self.added: list[str] = []
        self.informer.add_handler(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.type == "ADDED":
            self.added.append(event.obj.metadata.name)

    def saw(self, name: str) -> bool:
        return name in self.added


async def recovered_within(recorder: Recorder, name: str, what: str) -> float:
    started = time.monotonic()
    await wait_until_async(lambda: recorder.saw(name), timeout=RECOVERY_TIMEOUT, what=what)
    return time.monotonic() - started


def test_watches_and_requests_outlive_a_silent_drop_of_every_open_connection(
    dev_env: DevEnvironment, home: Client, namespace: str
) -> None:
    client = async_client(home_config(dev_env), field_manager="liveness-test")
    port = server_port(dev_env)

    async def scenario() -> None:
        recorder = Recorder(client, namespace)
        task = asyncio.create_task(recorder.informer.run())
        try:
            await asyncio.wait_for(recorder.informer.synced.wait(), 30)
            create_configmap(home, namespace, "before")
            await wait_until_async(lambda: recorder.saw("before"), what="the event before the drop")
            await client.get(ConfigMap, "before", namespace=namespace)  # a pooled connection too
            with SilentDrop(port, local_ports_to(os.getpid(), port) & client_ports(client)):
                create_configmap(home, namespace, "during")  # the fixture's own connection is not dropped
                took = await recovered_within(recorder, "during", "the event after the drop")
                log.info("the watch resumed %.1f s after its connections were dropped", took)
                # a request is answered or fails within its deadline, and the next ones are answered
                with_deadline = time.monotonic()
                try:
                    await client.get(ConfigMap, "during", namespace=namespace)
                except Exception as err:  # a dead pooled connection: a ReadTimeout, not a wait forever
                    log.info("first request after the drop: %r after %.1f s", err, time.monotonic() - with_deadline)
                assert time.monotonic() - with_deadline < RECOVERY_TIMEOUT
                await client.get(ConfigMap, "during", namespace=namespace)
            assert recorder.added == ["before", "during"]  # each once: nothing lost, nothing again
            assert recorder.informer.relists == 1  # resumed from its resourceVersion
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()

    asyncio.run(scenario())


def test_frozen_connections_are_found_by_the_http2_ping_and_a_busy_watchs_read_deadline(
    dev_env: DevEnvironment, home: Client, namespace: str
) -> None:
    target = urlsplit(home_config(dev_env).cluster.server)

    async def scenario() -> None:
        async with FreezingRelay(target.hostname or "127.0.0.1", target.port or 443) as relay:
            client = async_client(home_config(dev_env, relay.port), field_manager="liveness-test")
            recorder = Recorder(client, namespace)
            task = asyncio.create_task(recorder.informer.run())
            try:
                await asyncio.wait_for(recorder.informer.synced.wait(), 30)
                for index in range(30):  # a burst: the watch turns busy, on a connection of its own
                    create_configmap(home, namespace, f"burst-{index}")
                await wait_until_async(lambda: recorder.saw("burst-29"), what="the burst")
                assert recorder.informer.busy
                await wait_until_async(lambda: watch_connections(client) == 1, what="the busy watch's own connection")
                assert client.multiplexer is not None and client.multiplexer.connection_count() == 1
                (quiet_connection,) = client.multiplexer._connections  # HTTP/2, idle since the watch left it
                relay.freeze()
                create_configmap(home, namespace, "during")
                took = await recovered_within(recorder, "during", "the event after the freeze")
                log.info("the busy watch resumed %.1f s after its connection froze", took)
                assert not recorder.informer.busy
                # the HTTP/2 connection froze too: its PING went unanswered, and it was closed
                assert quiet_connection.closed and quiet_connection.pings >= 1
                assert len(recorder.added) == len(set(recorder.added)) == 31
                assert recorder.informer.relists == 1
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await client.close()

    asyncio.run(scenario())


def watch_connections(client: RuntimeClient) -> int:
    """The client's HTTP/1.1 connections streaming a watch now (a busy watch's)."""
    streams = client.transport._streams
    return 0 if streams is None else len(streams.connector._acquired)  # type: ignore[union-attr]


def test_a_watch_that_could_not_reach_its_server_retries_as_soon_as_the_server_answers_again(
    dev_env: DevEnvironment, foreign: dict[str, Client], unique_name: str
) -> None:
    """foreign-2's API server stopped: the informer's watch fails, and its backoff (10 s, then 20 s here)
    would keep it away until well after the server is back. A one-shot request it answers again (in
    the runtime, a health check every few seconds; here a read every half second) ends that wait
    (runtime/kube/liveness.py, Reachability): the watch is back within seconds of the restart."""
    cluster = foreign["foreign-2"]
    cluster.create(Namespace(metadata=ObjectMeta(name=unique_name)))
    config = KubeConfig.from_file(dev_env.kubeconfig("foreign-2")).get()
    assert config is not None
    client = async_client(config, field_manager="liveness-test")
    outage = dev_env.api_server_stopped("foreign-2")

    async def read_every_half_second() -> None:  # a cadence, as the runtime's health checks keep one
        while True:
            with contextlib.suppress(Exception):  # refused while the server is away
                await client.get(Namespace, unique_name)
            await asyncio.sleep(0.5)

    async def scenario() -> float:
        recorder = Recorder(client, unique_name)
        recorder.informer.retry_delay = BACKOFF_STEP_SECONDS
        tasks = [asyncio.create_task(recorder.informer.run()), asyncio.create_task(read_every_half_second())]
        try:
            await asyncio.wait_for(recorder.informer.synced.wait(), 30)
            await asyncio.to_thread(outage.__enter__)
            await wait_until_async(  # failed twice (the broken watch, then a refused one): now waiting 20 s
                lambda: recorder.informer.failures >= 2, timeout=BACKOFF_STEP_SECONDS + 30, what="two failed watches"
            )
            await asyncio.to_thread(outage.__exit__, None, None, None)  # back, and serving every kind
            back = time.monotonic()
            create_configmap(cluster, unique_name, "after")
            await wait_until_async(lambda: recorder.saw("after"), timeout=60, what="the event after the restart")
            return time.monotonic() - back
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await client.close()

    try:
        took = asyncio.run(scenario())
    finally:
        cluster.delete(Namespace, unique_name)
    log.info("the watch saw a ConfigMap %.1f s after its API server served again", took)
    # without the wake-up it retries 3 x BACKOFF_STEP_SECONDS after the stop, about 10 s after this point
    assert took < 7, f"the watch came back {took:.1f} s after its API server"
