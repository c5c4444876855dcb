"""The runtime transport's connection pool reuses the idle connection used last, as Go's does, so
the surplus a burst opened idles out instead of being kept alive by a trickle of requests."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
from aiohttp import web

from runtime.kube.transport import (
    IDLE_CONNECTION_SECONDS,
    REQUEST_CONNECTIONS,
    AiohttpTransport,
    LastUsedFirstConnector,
)

BURST = REQUEST_CONNECTIONS  # as many as the pool may open


async def serving(ports: list[int]) -> tuple[web.AppRunner, str]:
    """A loopback HTTP server that notes each request's client port. The first BURST requests are
    answered only once all of them have arrived, so they overlap, each on a connection of its own."""
    burst_arrived = asyncio.Event()

    async def answer(request: web.Request) -> web.Response:
        assert request.transport is not None
        ports.append(request.transport.get_extra_info("peername")[1])
        if len(ports) >= BURST:
            burst_arrived.set()
        await burst_arrived.wait()
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    await web.SockSite(runner, listening).start()
    return runner, f"http://127.0.0.1:{listening.getsockname()[1]}/"


async def get(transport: AiohttpTransport, url: str) -> None:
    response = await transport.send("GET", url, "/", [], None, aiohttp.ClientTimeout(total=10))
    await response.read()
    response.release()


def test_after_a_burst_a_trickle_of_requests_reuses_one_connection() -> None:
    async def scenario() -> tuple[list[int], list[int], int]:
        ports: list[int] = []
        runner, url = await serving(ports)
        transport = AiohttpTransport(ssl_context=False, bounded=True)
        try:
            await asyncio.gather(*(get(transport, url) for _ in range(BURST)))
            burst = list(ports)
            ports.clear()
            for _ in range(3 * BURST):  # sequential: one idle connection is enough each time
                await get(transport, url)
            session = transport._session_here()
            assert isinstance(session.connector, LastUsedFirstConnector)
            idle = sum(len(conns) for conns in session.connector._conns.values())
            return burst, list(ports), idle
        finally:
            await transport.aclose()
            await runner.cleanup()

    burst, trickle, idle = asyncio.run(scenario())
    assert len(set(burst)) == BURST  # the burst opened one connection per request
    # aiohttp's own order would go round all of them; the others stay idle, and are closed once
    # they have been for IDLE_CONNECTION_SECONDS
    assert len(set(trickle)) == 1, trickle
    assert idle == BURST
    assert IDLE_CONNECTION_SECONDS > 0
