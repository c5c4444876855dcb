"""The HTTP transport under every runtime client: aiohttp beneath lightkube's httpx2 client.

Why by hand: lightkube speaks httpx2, and no kept package adapts aiohttp to httpx2's transport
interface. Why at all: with httpx2's own transport (httpcore2 over anyio) a request costs the client
0.63 ms of CPU, with aiohttp 0.31 ms (`tests/bench/bench_client.py`, 60 watches open): httpcore2's
pool scans every connection for each request (the watches hold dozens), and anyio's TLS stream
recomputes its extra attributes on each read, while aiohttp, already here for the webhook and
kubelet servers, parses HTTP in C. In the offloading bench this cut the virtual kubelet's CPU
per pod by 40 % (8.4 -> 4.9 ms) and the agent's by 30 % (3.5 -> 2.5 ms).

Through this transport lightkube builds the requests (auth, headers, URLs) and reads the responses
with httpx2 as before, and errors surface as the httpx2 exceptions it handles. The runtime's client
(runtime/kube/client.py) also sends its one-shot requests here without httpx2 (`send`).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import ssl
from collections.abc import AsyncIterator, Callable, Mapping

import aiohttp
import httpx2
import yarl
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ConnectionKey

from runtime.kube.liveness import Reachability, live_socket

# A client `bounded` to another cluster's API server (a peering's foreign client: a foreign cluster
# serves many homes) shares at most this many connections among its one-shot requests (and lists),
# which wait for one beyond that: a 1,000-pod burst's 16 pod workers and the reflectors' once held 42
# connections to a foreign API server. With streams (a busy watch each, at most
# OWN_WATCH_CONNECTIONS of them), the HTTP/2 connection of the quiet watches and the kubelet API's
# relay (its resource metrics), a peering holds at most 10 (runtime/kube/informing.py). A client of
# its own cluster is not bounded: the cap would only queue its work.
REQUEST_CONNECTIONS = 5
# Streams (watches over HTTP/1.1) have a pool of their own, uncapped: a capped pool once full of
# watches would leave every request waiting forever. What bounds it is the informers' budget.
OWN_WATCH_CONNECTIONS = 3
# How long an idle connection is kept for the next request: client-go's IdleConnTimeout (aiohttp's
# default, 15 s, closed them between two rollouts, and each burst began with a TLS handshake per
# worker on both sides, on the path of its first pods).
IDLE_CONNECTION_SECONDS = 90.0
# asyncio's TLS connections (aiohttp's) each allocate and zero a read buffer of SSLProtocol.max_size,
# 256 KiB: 330 KB of RSS per connection against httpx2's 85 KB, with dozens of watches each holding
# one. A read of one TLS record's worth (16 KiB, the most a record holds) brings it to 94 KB
# (tests/bench/bench_client.py). asyncio reads this class attribute for each new connection.
TLS_READ_BUFFER = 16 * 1024
asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER
# headers aiohttp writes itself from the body it sends
_OWN_HEADERS = frozenset({b"content-length", b"transfer-encoding"})
# the callers name these (or leave them out on purpose), aiohttp must not add its own
_SKIPPED_AUTO_HEADERS = ("Accept-Encoding", "User-Agent", "Content-Type")


class LastUsedFirstConnector(aiohttp.TCPConnector):
    """aiohttp's connector, handing out the idle connection used last rather than the one idle longest.

    Why: aiohttp reuses its idle connections oldest first, so a trickle of requests (Lease renewals,
    health checks, status updates: several a minute per peering) goes round every connection a burst
    or a start-up's lists opened, and none is ever idle for IDLE_CONNECTION_SECONDS: a virtual kubelet
    kept 8 connections per foreign cluster open for good. Go's http.Transport (client-go's) takes the
    most recent one, so the others idle out; this does the same. aiohttp has no option for it: the
    override keeps the idle deque most recent first (aiohttp 3.14 pinned; tests/unit/test_transport_pool.py
    fails if its order changes)."""

    def _release(self, key: ConnectionKey, protocol: ResponseHandler, *, should_close: bool = False) -> None:
        super()._release(key, protocol, should_close=should_close)
        idle = self._conns.get(key)
        if idle and idle[-1][0] is protocol:  # kept for reuse (appended last): to the front, taken next
            idle.appendleft(idle.pop())


# what a request hook is told: the HTTP method and the URL path (runtime/kube/serving.py counts them)
RequestHook = Callable[[str, str], None]


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """Sends requests through aiohttp, opened in the loop of the first request: httpx2's (lightkube's
    own path) and those runtime/kube/client.py sends without httpx2. Two pools: one for one-shot
    requests (REQUEST_CONNECTIONS at most if `bounded`), one for streams (watches)."""

    def __init__(self, ssl_context: ssl.SSLContext | bool = True, *, bounded: bool = False) -> None:
        self._ssl = ssl_context
        self.bounded = bounded
        self._session: aiohttp.ClientSession | None = None  # one-shot requests and lists
        self._streams: aiohttp.ClientSession | None = None  # watches over HTTP/1.1
        self._loop: asyncio.AbstractEventLoop | None = None
        self.request_hooks: list[RequestHook] = []
        self.reachability = Reachability()  # of the API server, by the one-shot requests' outcome
        self.own_watches = 0  # watches holding a connection of their own now (informing.py's budget)

    def _session_here(self, streaming: bool = False) -> aiohttp.ClientSession:
        """The session of requests (or of streams), opened in the running loop on first use (an aiohttp
        session belongs to one loop)."""
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            raise RuntimeError("this Kubernetes client was first used in another event loop: make one per loop")
        self._loop = loop
        if streaming:
            if self._streams is None or self._streams.closed:
                self._streams = self._new_session(limit=0)  # aiohttp: 0 is no limit
            return self._streams
        if self._session is None or self._session.closed:
            self._session = self._new_session(limit=REQUEST_CONNECTIONS if self.bounded else 0)
        return self._session

    def _new_session(self, limit: int) -> aiohttp.ClientSession:
        # live_socket: keepalive probes and a user timeout, so a silently dropped connection ends
        # (runtime/kube/liveness.py) and is never handed out again
        connector = LastUsedFirstConnector(
            ssl=self._ssl, limit=limit, keepalive_timeout=IDLE_CONNECTION_SECONDS, socket_factory=live_socket
        )
        # httpx2 decodes the body by its Content-Encoding; aiohttp must hand it over as sent
        return aiohttp.ClientSession(connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar())

    def claim_own_watch(self) -> bool:
        """Whether one more watch may have a connection of its own (then it holds it until `release_own_watch`)."""
        if self.bounded and self.own_watches >= OWN_WATCH_CONNECTIONS:
            return False
        self.own_watches += 1
        return True

    def release_own_watch(self) -> None:
        self.own_watches -= 1

    def connection_count(self) -> int:
        """The connections open in both pools (in use or idle)."""
        count = 0
        for session in (self._session, self._streams):
            connector = session.connector if session is not None and not session.closed else None
            if isinstance(connector, aiohttp.TCPConnector):
                count += len(connector._acquired) + sum(len(idle) for idle in connector._conns.values())
        return count

    async def send(
        self,
        method: str,
        url: str,
        path: str,
        headers: Mapping[str, str] | list[tuple[str, str]],
        body: bytes | None,
        timeout: aiohttp.ClientTimeout,
        streaming: bool = False,
    ) -> aiohttp.ClientResponse:
        """One request to `url` (already encoded: sent as is), in the pool of streams if `streaming`;
        aiohttp's own errors pass through."""
        for hook in self.request_hooks:
            hook(method, path)
        try:
            response = await self._session_here(streaming).request(
                method,
                yarl.URL(url, encoded=True),
                headers=headers,
                data=body,
                skip_auto_headers=_SKIPPED_AUTO_HEADERS,
                allow_redirects=False,
                timeout=timeout,
            )
        except (aiohttp.ClientConnectionError, OSError, TimeoutError):
            if not streaming:
                self.reachability.failed()
            raise
        if not streaming:
            self.reachability.answered()
        return response

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        headers = [
            (k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw if k.lower() not in _OWN_HEADERS
        ]
        timeout = request.extensions.get("timeout") or {}
        try:
            response = await self.send(
                request.method,
                str(request.url),
                request.url.path,
                headers,
                body or None,
                aiohttp.ClientTimeout(total=None, sock_connect=timeout.get("connect"), sock_read=timeout.get("read")),
                streaming=request.url.params.get("watch") in ("true", "1"),  # lightkube's own watch path
            )
        except Exception as err:
            raise as_httpx_error(err, request, connecting=True) from err
        return httpx2.Response(
            status_code=response.status,
            headers=list(response.raw_headers),
            stream=_ResponseStream(response, request),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": (response.reason or "").encode()},
        )

    async def aclose(self) -> None:
        for session in (self._session, self._streams):
            if session is not None and not session.closed:
                await session.close()
        self._session = self._streams = None


class _ResponseStream(httpx2.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse, request: httpx2.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except Exception as err:
            raise as_httpx_error(err, self._request, connecting=False) from err

    async def aclose(self) -> None:
        self._response.release()


def as_httpx_error(err: Exception, request: httpx2.Request, *, connecting: bool) -> Exception:
    """The httpx2 exception lightkube and the informers expect for an aiohttp failure."""
    message = str(err) or type(err).__name__
    kind: type[httpx2.TransportError]
    if isinstance(err, aiohttp.ClientConnectorError | aiohttp.ServerFingerprintMismatch):
        kind = httpx2.ConnectError
    elif isinstance(err, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        kind = (
            httpx2.ConnectTimeout
            if connecting and isinstance(err, aiohttp.ConnectionTimeoutError)
            else httpx2.ReadTimeout
        )
    elif isinstance(err, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        kind = httpx2.RemoteProtocolError
    elif isinstance(err, aiohttp.ClientError | OSError):
        kind = httpx2.ConnectError if connecting else httpx2.ReadError
    else:
        return err
    return kind(message, request=request)
