"""Watches multiplexed over HTTP/2: a client's watches of one API server share a connection, as
client-go's do, up to the streams the server allows on one (then another connection opens).

Why: over HTTP/1.1 each watch holds a TLS connection for as long as it runs. A virtual kubelet
watches about ten kinds in each twin namespace, so 500 offloaded namespaces held 5,012 connections
to each foreign API server (issue 38). Why by hand: aiohttp's client speaks HTTP/1.1 only, and
httpcore2's HTTP/2 connection has each stream's reader take the socket in turn under one lock, so an
event for an idle watch waits behind a read by every other watch. Here one reader task per
connection hands each frame to its stream at once; h2 (the protocol's state machine) does the rest.

Every watch (Informer `multiplexed`, the default), but only while it is quiet: each peering or agent
in a process would otherwise add a connection per watch it holds (its home Pods, Events, volumes,
ShadowPods, ...), idle or not. Over HTTP/2 an event costs more CPU, here (the h2 state machine is
pure Python) and in the API server, so a watch that turns busy (a burst of pods in its twin) goes on
over HTTP/1.1.

Flow control is the backpressure: a stream's data is acknowledged as its reader takes it, so a
slow informer holds up only its own stream.

Liveness (runtime/kube/liveness.py): a connection that has read nothing for PING_AFTER_IDLE_SECONDS
sends a PING, and is closed, failing its streams, if nothing comes back within PING_TIMEOUT_SECONDS;
its sockets also carry TCP keepalive and a user timeout. The watches then resume elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import httpx2
import yarl

from runtime.kube.liveness import PING_AFTER_IDLE_SECONDS, PING_TIMEOUT_SECONDS, apply_socket_options

log = logging.getLogger(__name__)

# Each stream may have this much unread data in flight (h2's default, 64 KiB, paces a list-sized
# watch event to one round trip per 64 KiB); the connection's window covers many such streams.
STREAM_WINDOW = 1 << 20
CONNECTION_WINDOW = 1 << 28
# a connection no stream uses is closed after this long: client-go's IdleConnTimeout
IDLE_CONNECTION_SECONDS = 90.0
READ_SIZE = 1 << 16


class StreamError(httpx2.ReadError):
    """The stream or its connection ended before the server finished the answer."""


@dataclass
class _Stream:
    id: int
    headers: asyncio.Future[list[tuple[bytes, bytes]]]
    # data chunks with their flow-controlled length; None once the server ended the stream
    chunks: asyncio.Queue[tuple[bytes, int] | BaseException | None] = field(default_factory=asyncio.Queue)
    ended: bool = False


class _Connection:
    """One HTTP/2 connection and the reader task that hands its frames to their streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, authority: str) -> None:
        self._reader = reader
        self._writer = writer
        self.authority = authority
        self._h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self._streams: dict[int, _Stream] = {}
        self._settled = asyncio.Event()  # the server's SETTINGS (its stream limit) arrived
        self.closed = False
        self.draining = False  # the server sent GOAWAY: its streams finish, no new one starts here
        self._idle_timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self.last_read = self._loop.time()  # when a frame last came: the liveness check's clock
        self._ping_sent: float | None = None  # when the PING now unanswered went out
        self.pings = 0  # PINGs sent (the cost of the liveness check, counted by the tests and benches)
        self._liveness = self._loop.call_later(PING_AFTER_IDLE_SECONDS, self._check_liveness)
        self._h2.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW}
        )
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        self._flush()
        self._task = asyncio.create_task(self._read_frames(), name=f"http2 {authority}")

    def stream_limit(self) -> int:
        """The most streams the server lets this connection carry at once."""
        return int(self._h2.remote_settings.max_concurrent_streams)

    def open_streams(self) -> int:
        return int(self._h2.open_outbound_streams)

    def has_room(self) -> bool:
        return not (self.closed or self.draining) and self.open_streams() < self.stream_limit()

    async def settled(self) -> None:
        await self._settled.wait()
        if self.closed:
            raise StreamError("the connection closed before the server's settings arrived")

    def open(self, path: str, headers: list[tuple[bytes, bytes]]) -> _Stream:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        stream_id = self._h2.get_next_available_stream_id()
        request = [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":authority", self.authority.encode()),
            (b":path", path.encode()),
            *headers,
        ]
        stream = _Stream(stream_id, asyncio.get_running_loop().create_future())
        self._streams[stream_id] = stream
        self._h2.send_headers(stream_id, request, end_stream=True)
        self._flush()
        return stream

    def consumed(self, stream: _Stream, length: int) -> None:
        """Hands the window of data its reader took back to the server."""
        if self.closed or not length:
            return
        self._h2.acknowledge_received_data(length, stream.id)
        self._flush()

    def release(self, stream: _Stream) -> None:
        """The reader is done with `stream`: cancelled if the server has not ended it, and the window
        of what it left unread handed back (else the connection's window would shrink for good)."""
        self._streams.pop(stream.id, None)
        unread = 0
        while not stream.chunks.empty():
            item = stream.chunks.get_nowait()
            if isinstance(item, tuple):
                unread += item[1]
        self.consumed(stream, unread)
        if not self.closed and not stream.ended:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self._h2.reset_stream(stream.id, h2.errors.ErrorCodes.CANCEL)
                self._flush()
        if not self._streams and not self.closed:
            if self.draining:
                self.close()
                return
            self._idle_timer = asyncio.get_running_loop().call_later(IDLE_CONNECTION_SECONDS, self.close)

    def close(self) -> None:
        if not self.closed:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self._h2.close_connection()
                self._flush()
        self._task.cancel()
        self._terminate(StreamError("the client closed the connection"))

    def _check_liveness(self) -> None:
        """Every PING_AFTER_IDLE_SECONDS of silence: a PING; no frame within PING_TIMEOUT_SECONDS of it
        and the connection is dead (a flow dropped on the way, a partition): closed, its streams failed."""
        if self.closed:
            return
        now = self._loop.time()
        if self._ping_sent is not None and self.last_read < self._ping_sent:
            if now - self._ping_sent >= PING_TIMEOUT_SECONDS:
                silent = now - self._ping_sent
                log.warning("HTTP/2 connection to %s answered no PING in %.0f s: closed", self.authority, silent)
                self._abort(StreamError(f"{self.authority} answered no PING within {PING_TIMEOUT_SECONDS:.0f} s"))
                return
            self._liveness = self._loop.call_at(self._ping_sent + PING_TIMEOUT_SECONDS, self._check_liveness)
            return
        self._ping_sent = None
        if now - self.last_read < PING_AFTER_IDLE_SECONDS:
            self._liveness = self._loop.call_at(self.last_read + PING_AFTER_IDLE_SECONDS, self._check_liveness)
            return
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._h2.ping(b"liveness")
            self._flush()
        self.pings += 1
        self._ping_sent = now
        self._liveness = self._loop.call_at(now + PING_TIMEOUT_SECONDS, self._check_liveness)

    def _abort(self, error: BaseException) -> None:
        """Ends a connection that no longer answers: nothing more is sent on it (a GOAWAY would only
        wait behind the data the peer never acknowledged)."""
        self._task.cancel()
        self._terminate(error)
        self._writer.transport.abort()

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data and not self._writer.is_closing():
            self._writer.write(data)

    async def _read_frames(self) -> None:
        error: BaseException = StreamError("the server closed the connection")
        try:
            while data := await self._reader.read(READ_SIZE):
                self.last_read = self._loop.time()
                for event in self._h2.receive_data(data):
                    self._on_event(event)
                self._flush()
                if self.closed:
                    break
        except asyncio.CancelledError:
            error = StreamError("the client closed the connection")
        except (OSError, h2.exceptions.ProtocolError) as err:
            error = StreamError(f"the connection failed: {err}")
        finally:
            self._terminate(error)

    def _on_event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RemoteSettingsChanged):
            self._settled.set()
            return
        if isinstance(event, h2.events.ConnectionTerminated):  # GOAWAY
            self.draining = True
            last = event.last_stream_id if event.error_code == h2.errors.ErrorCodes.NO_ERROR else -1
            for unserved in [s for s in self._streams.values() if last is None or s.id > last]:
                self._fail(unserved, StreamError(f"the server went away ({event.error_code!r}) before the stream"))
            return
        stream = self._streams.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, h2.events.DataReceived):
            if stream is None:  # a stream its reader let go of: only the window matters
                self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            else:
                stream.chunks.put_nowait((event.data or b"", event.flow_controlled_length))
        if stream is None:
            return
        if isinstance(event, h2.events.ResponseReceived):
            stream.headers.set_result(list(event.headers or []))
        elif isinstance(event, h2.events.StreamEnded):
            stream.ended = True
            stream.chunks.put_nowait(None)
        elif isinstance(event, h2.events.StreamReset):
            self._fail(stream, StreamError(f"the server reset the stream ({event.error_code!r})"))

    @staticmethod
    def _fail(stream: _Stream, error: BaseException) -> None:
        if stream.ended:
            return
        stream.ended = True
        if not stream.headers.done():
            stream.headers.set_exception(error)
        stream.chunks.put_nowait(error)

    def _terminate(self, error: BaseException) -> None:
        self.closed = True
        self._settled.set()
        self._liveness.cancel()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        for stream in self._streams.values():
            self._fail(stream, error)
        self._streams.clear()
        self._writer.close()


@dataclass
class Response:
    """A streamed answer: its status, headers, and its body as it comes (`chunks`)."""

    status: int
    headers: list[tuple[bytes, bytes]]
    _connection: _Connection
    _stream: _Stream

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            item = await self._stream.chunks.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            data, length = item
            self._connection.consumed(self._stream, length)
            if data:
                yield data

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])


class Multiplexer:
    """The HTTP/2 connections of one client to one API server, opened as the streams need them."""

    def __init__(self, server: str, ssl_context: ssl.SSLContext) -> None:
        url = yarl.URL(server)
        if url.scheme != "https" or url.host is None:
            raise ValueError(f"HTTP/2 watches need an https:// server, not {server}")
        self._host, self._port = url.host, url.port or 443
        self._authority = f"{url.host}:{self._port}"
        self._ssl = ssl_context
        self._ssl.set_alpn_protocols(["h2"])
        self._connections: list[_Connection] = []
        self._opening = asyncio.Lock()  # one connection opens at a time: the next stream may fit it
        self._loop: asyncio.AbstractEventLoop | None = None

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, headers: list[tuple[bytes, bytes]], connect_timeout: float | None
    ) -> AsyncIterator[Response]:
        """A GET of `path` (with its query), its answer streamed until the block ends."""
        connection = await self._with_room(connect_timeout)
        stream = connection.open(path, headers)
        try:
            response_headers = await stream.headers
            status = next(int(v) for k, v in response_headers if k == b":status")
            yield Response(status, [(k, v) for k, v in response_headers if not k.startswith(b":")], connection, stream)
        finally:
            connection.release(stream)

    async def _with_room(self, connect_timeout: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # connections belong to the loop that opened them, gone with it
            self._loop, self._connections, self._opening = loop, [], asyncio.Lock()
        self._connections = [c for c in self._connections if not c.closed]
        for connection in self._connections:
            if connection.has_room():
                return connection
        async with self._opening:
            for connection in self._connections:  # one opened while this waited
                if connection.has_room():
                    return connection
            async with asyncio.timeout(connect_timeout):
                connection = await self._connect()
            self._connections.append(connection)
            return connection

    async def _connect(self) -> _Connection:
        try:
            reader, writer = await asyncio.open_connection(
                self._host, self._port, ssl=self._ssl, server_hostname=self._host
            )
        except OSError as err:
            raise httpx2.ConnectError(f"cannot reach {self._authority}: {err}") from err
        apply_socket_options(writer.get_extra_info("socket"))
        ssl_object = writer.get_extra_info("ssl_object")
        if ssl_object is None or ssl_object.selected_alpn_protocol() != "h2":
            writer.close()
            raise httpx2.ConnectError(f"{self._authority} does not speak HTTP/2")
        connection = _Connection(reader, writer, self._authority)
        try:
            await connection.settled()
        except BaseException:  # a timeout included: nothing of it is left behind
            connection.close()
            raise
        return connection

    def close(self) -> None:
        for connection in self._connections:
            connection.close()
        self._connections.clear()

    def connection_count(self) -> int:
        return sum(1 for c in self._connections if not c.closed)
