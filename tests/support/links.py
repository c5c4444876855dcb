"""Faults on the links to an API server, as networks make them, for the liveness tests.

- `SilentDrop`: the packets of some open TCP connections are dropped, both ways, by nftables on
  loopback (a NAT or a load balancer that forgot its flows: no FIN, no reset), while new
  connections go through. Needs root (CAP_NET_ADMIN) and `nft` (Debian's nftables, .ci/run).
- `FreezingRelay`: a TCP relay whose open connections can be frozen: their bytes stop both ways
  while TCP still acknowledges them (a proxy whose far side is gone), so only an application-level
  check (an HTTP/2 PING, a read deadline) can tell. Written here because no proxy offers this one
  fault: toxiproxy's toxics apply to new connections as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from runtime.kube.client import RuntimeClient

_tables = itertools.count()


def local_ports_to(pid: int, server_port: int) -> set[int]:
    """The local ports of the process's ESTABLISHED TCP connections to `server_port` (loopback)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and fields[9] in inodes and int(fields[2].rsplit(":", 1)[1], 16) == server_port:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def client_ports(client: RuntimeClient) -> set[int]:
    """The local ports of the client's open connections: its pools' and its HTTP/2 connections'."""
    ports = set()
    for session in (client.transport._session, client.transport._streams):
        if session is None:
            continue
        connector: Any = session.connector
        protocols = [protocol for idle in connector._conns.values() for protocol, _ in idle]
        for protocol in [*protocols, *connector._acquired]:
            if protocol.transport is not None:
                ports.add(protocol.transport.get_extra_info("sockname")[1])
    if client.multiplexer is not None:
        for connection in client.multiplexer._connections:
            if not connection.closed:
                ports.add(connection._writer.get_extra_info("sockname")[1])
    return ports


class SilentDrop:
    """Drops every packet of the connections from `local_ports` to `server_port`, both ways, until
    the block ends; every other connection, new ones to the same server too, goes through."""

    def __init__(self, server_port: int, local_ports: Iterable[int]) -> None:
        self.server_port = server_port
        self.local_ports = sorted(set(local_ports))
        if not self.local_ports:
            raise ValueError(f"no open connection to port {server_port} to drop")
        self.table = f"liqo_silent_drop_{os.getpid()}_{next(_tables)}"

    def __enter__(self) -> SilentDrop:
        ports = ", ".join(map(str, self.local_ports))
        # the input hook: the sender's own stack sees no error, as with a drop on the way
        rules = f"""
        table inet {self.table} {{
          chain input {{
            type filter hook input priority -10; policy accept;
            tcp dport {self.server_port} tcp sport {{ {ports} }} drop
            tcp sport {self.server_port} tcp dport {{ {ports} }} drop
          }}
        }}
        """
        subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True, capture_output=True)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        subprocess.run(["nft", "delete", "table", "inet", self.table], check=True, capture_output=True)


class FreezingRelay:
    """A relay on 127.0.0.1 to `host:port` in the running event loop; `freeze()` stops the bytes of
    every connection open now, both ways, while new ones pass."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self.connections = 0
        self._frozen: list[asyncio.Event] = []
        self._open: set[asyncio.Event] = set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> FreezingRelay:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def freeze(self) -> int:
        """Freezes the connections open now; how many."""
        for frozen in self._open:
            frozen.set()
        count = len(self._open)
        self._open.clear()
        return count

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        frozen = asyncio.Event()
        self._open.add(frozen)
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        pumps = [
            asyncio.create_task(self._pump(client_reader, server_writer, frozen)),
            asyncio.create_task(self._pump(server_reader, client_writer, frozen)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
                self._tasks.discard(pump)
            self._open.discard(frozen)
            client_writer.close()
            server_writer.close()

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frozen: asyncio.Event) -> None:
        while data := await reader.read(1 << 16):
            if frozen.is_set():
                continue  # read, so TCP acknowledges it, and dropped
            writer.write(data)
            await writer.drain()
