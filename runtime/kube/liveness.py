"""Liveness of the connections to API servers: a dead one is found within DEAD_CONNECTION_SECONDS.

A NAT or a load balancer that forgets its flows drops a connection's packets without a FIN or a
reset, while new connections go through; a partition drops everything. Nothing is read from such a
connection ever again, and nothing says so: a watch on it waits forever. Three checks, each seeing
what the others cannot:

- **TCP keepalive and TCP_USER_TIMEOUT on every client socket** (`apply_socket_options`): the
  kernel probes a connection idle for KEEPALIVE_IDLE_SECONDS, and aborts one whose probes or data
  go unacknowledged for USER_TIMEOUT_SECONDS (the read then fails with ETIMEDOUT). It costs no
  CPU in user space and no request to the API server: a 66-byte probe and its acknowledgement per
  KEEPALIVE_INTERVAL_SECONDS, on idle connections only.
- **HTTP/2 PING after PING_AFTER_IDLE_SECONDS without a frame** (runtime/kube/multiplexing.py, as
  client-go's health check since kubernetes#95981, 30 s + 15 s there): the connection is closed if
  no frame comes within PING_TIMEOUT_SECONDS. It sees what TCP cannot: a proxy in the path that still
  acknowledges TCP while its other side is gone.
- **A read deadline on a watch with a connection of its own** (HTTP/1.1, runtime/kube/informing.py):
  such a watch is there because it is busy; one silent for WATCH_READ_IDLE_SECONDS ends and resumes
  from its resourceVersion over HTTP/2, quiet or dead alike.

Every one-shot request also has a deadline of its own (runtime/kube/client.py).

Once the API server answers again, what could not reach it retries at once rather than at the end of
its backoff (`Reachability`): an informer that failed nine times in an outage would otherwise wait up
to 30 s more after the server is back, and a work queue's key (a pod status to write at home) up to
its queue's 60 s (`on_answer_again`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

DEAD_CONNECTION_SECONDS = 15.0

# Probes start after this long without a packet received, then go every KEEPALIVE_INTERVAL_SECONDS;
# the kernel aborts at the first probe after USER_TIMEOUT_SECONDS without an acknowledgement
# (keepalive's count is ignored once a user timeout is set): 5 + 3 x 3 = 14 s at the latest.
KEEPALIVE_IDLE_SECONDS = 5
KEEPALIVE_INTERVAL_SECONDS = 3
KEEPALIVE_PROBES = 3
USER_TIMEOUT_SECONDS = 12

# HTTP/2: a PING once nothing came for this long, and the connection closed if nothing answers it.
PING_AFTER_IDLE_SECONDS = 10.0
PING_TIMEOUT_SECONDS = 5.0

# A watch over HTTP/1.1 that reads nothing for this long is ended (runtime/kube/informing.py).
WATCH_READ_IDLE_SECONDS = DEAD_CONNECTION_SECONDS

# Linux constants (the socket module names them on Linux only)
_TCP_KEEPIDLE = getattr(socket, "TCP_KEEPIDLE", None)
_TCP_KEEPINTVL = getattr(socket, "TCP_KEEPINTVL", None)
_TCP_KEEPCNT = getattr(socket, "TCP_KEEPCNT", None)
_TCP_USER_TIMEOUT = getattr(socket, "TCP_USER_TIMEOUT", None)


def apply_socket_options(sock: Any) -> None:
    """Keepalive probes and a user timeout on a TCP socket (asyncio's TransportSocket too); where the
    platform lacks an option it is left out (the HTTP/2 PING and the deadlines still hold)."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (
        (_TCP_KEEPIDLE, KEEPALIVE_IDLE_SECONDS),
        (_TCP_KEEPINTVL, KEEPALIVE_INTERVAL_SECONDS),
        (_TCP_KEEPCNT, KEEPALIVE_PROBES),
        (_TCP_USER_TIMEOUT, USER_TIMEOUT_SECONDS * 1000),
    ):
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


def live_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    """aiohttp's `socket_factory`: the socket aiohttp would open, with the liveness options."""
    family, kind, protocol = addr_info[0], addr_info[1], addr_info[2]
    sock = socket.socket(family=family, type=kind, proto=protocol)
    sock.setblocking(False)
    apply_socket_options(sock)
    return sock


class Reachability:
    """Whether an API server answered a client's last one-shot request (a health check, a Lease renewal,
    any read or write). An informer whose watch could not reach the server waits for its next answer
    rather than its whole backoff. Only one-shot requests count: their failures are the server's, while
    a watch may fail on its connection alone, and one that woke the others by failing would spin."""

    def __init__(self) -> None:
        self.down = False
        self._answer: asyncio.Event | None = None  # made by the first waiter, set at the next answer
        # called at the first answer after a failure: work queues let their failed keys go (retry_failed)
        self.on_answer_again: list[Callable[[], object]] = []

    def failed(self) -> None:
        self.down = True

    def answered(self) -> None:
        if self.down:
            self.down = False
            if self._answer is not None:
                self._answer.set()
                self._answer = None
            for callback in list(self.on_answer_again):
                try:
                    callback()
                except Exception:  # one subscriber's bug must not fail the request that answered
                    log.exception("a callback on the API server answering again failed")

    async def answer_within(self, seconds: float) -> bool:
        """Wait until the server answers after a failure (True), or `seconds` (False)."""
        if self._answer is None:
            self._answer = asyncio.Event()
        answer = self._answer
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await answer.wait()
        return answer.is_set()


def reachability_of(client: object) -> Reachability | None:
    """The Reachability of a client made by runtime.kube.client (None for any other client)."""
    found = getattr(getattr(client, "transport", None), "reachability", None)
    return found if isinstance(found, Reachability) else None
