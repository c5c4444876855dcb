"""What bounds and checks the runtime transport's connections (runtime/kube/transport.py and
liveness.py), against a loopback server: one-shot requests share REQUEST_CONNECTIONS, streams have a
pool of their own that never takes those places, and every socket carries the liveness options."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
from aiohttp import web

from runtime.kube import liveness
from runtime.kube.transport import OWN_WATCH_CONNECTIONS, REQUEST_CONNECTIONS, AiohttpTransport

TIMEOUT = aiohttp.ClientTimeout(total=10)


class Server:
    """Notes each request's client port; `/` is answered once REQUEST_CONNECTIONS requests have
    arrived (so a burst overlaps), `/stream` holds its answer open until `ended` is set."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        self.gate = asyncio.Event()
        self.ended = asyncio.Event()
        self.streaming = 0

    async def answer(self, request: web.Request) -> web.Response:
        assert request.transport is not None
        self.ports.append(request.transport.get_extra_info("peername")[1])
        if len(self.ports) >= REQUEST_CONNECTIONS:
            self.gate.set()
        await self.gate.wait()
        return web.Response(text="ok")

    async def stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        self.streaming += 1
        await self.ended.wait()
        return response

    async def start(self) -> tuple[web.AppRunner, str]:
        app = web.Application()
        app.router.add_get("/", self.answer)
        app.router.add_get("/stream", self.stream)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        listening = socket.socket()
        listening.bind(("127.0.0.1", 0))
        await web.SockSite(runner, listening).start()
        return runner, f"http://127.0.0.1:{listening.getsockname()[1]}"


async def get(transport: AiohttpTransport, url: str, streaming: bool = False) -> aiohttp.ClientResponse:
    return await transport.send("GET", url, "/", [], None, TIMEOUT, streaming=streaming)


async def answered(transport: AiohttpTransport, url: str) -> str:
    response = await get(transport, url)
    try:
        return await response.text()
    finally:
        response.release()


def test_a_burst_of_requests_shares_at_most_request_connections() -> None:
    async def scenario() -> tuple[list[str], list[int], int]:
        server = Server()
        runner, base = await server.start()
        transport = AiohttpTransport(ssl_context=False, bounded=True)
        try:
            answers = await asyncio.gather(*(answered(transport, base + "/") for _ in range(3 * REQUEST_CONNECTIONS)))
            return answers, server.ports, transport.connection_count()
        finally:
            await transport.aclose()
            await runner.cleanup()

    answers, ports, open_now = asyncio.run(scenario())
    assert answers == ["ok"] * (3 * REQUEST_CONNECTIONS)
    # without the cap the 18 requests, all sent before any is answered, open 18 connections
    assert len(set(ports)) == REQUEST_CONNECTIONS
    assert open_now == REQUEST_CONNECTIONS


def test_streams_have_their_own_pool_and_requests_still_get_through() -> None:
    async def scenario() -> tuple[str, int]:
        server = Server()
        server.gate.set()
        runner, base = await server.start()
        transport = AiohttpTransport(ssl_context=False, bounded=True)
        try:
            held = [await get(transport, base + "/stream", streaming=True) for _ in range(REQUEST_CONNECTIONS + 1)]
            answer = await asyncio.wait_for(answered(transport, base + "/"), 5)
            server.ended.set()
            for response in held:
                response.close()
            return answer, server.streaming
        finally:
            await transport.aclose()
            await runner.cleanup()

    answer, streaming = asyncio.run(scenario())
    assert streaming == REQUEST_CONNECTIONS + 1
    assert answer == "ok"


def test_the_budget_of_watches_on_a_connection_of_their_own() -> None:
    transport = AiohttpTransport(ssl_context=False, bounded=True)
    assert all(transport.claim_own_watch() for _ in range(OWN_WATCH_CONNECTIONS))
    assert not transport.claim_own_watch()
    transport.release_own_watch()
    assert transport.claim_own_watch()
    # a client of its own cluster is not bounded
    unbounded = AiohttpTransport(ssl_context=False)
    assert all(unbounded.claim_own_watch() for _ in range(10 * OWN_WATCH_CONNECTIONS))
    # with the HTTP/2 connection of the quiet watches and the kubelet API relay's: the most a
    # peering holds to its foreign API server in a burst
    assert REQUEST_CONNECTIONS + OWN_WATCH_CONNECTIONS + 1 + 1 <= 10


def test_every_connection_carries_keepalive_and_a_user_timeout() -> None:
    async def scenario() -> list[tuple[int, int, int, int]]:
        server = Server()
        runner, base = await server.start()
        transport = AiohttpTransport(ssl_context=False, bounded=True)
        try:
            seen = []
            for streaming in (False, True):  # each pool
                response = await get(transport, base + "/stream", streaming=streaming)
                assert response.connection is not None and response.connection.transport is not None
                sock = response.connection.transport.get_extra_info("socket")
                seen.append(
                    (
                        sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
                    )
                )
                response.close()
            server.ended.set()
            return seen
        finally:
            await transport.aclose()
            await runner.cleanup()

    expected = (
        1,
        liveness.KEEPALIVE_IDLE_SECONDS,
        liveness.KEEPALIVE_INTERVAL_SECONDS,
        liveness.USER_TIMEOUT_SECONDS * 1000,
    )
    assert asyncio.run(scenario()) == [expected, expected]
    # the kernel gives up on a silent connection within the liveness target
    worst = liveness.KEEPALIVE_IDLE_SECONDS + liveness.KEEPALIVE_INTERVAL_SECONDS * liveness.KEEPALIVE_PROBES
    assert max(worst, liveness.USER_TIMEOUT_SECONDS) < liveness.DEAD_CONNECTION_SECONDS
