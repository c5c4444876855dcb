"""The runtime's Kubernetes client: lightkube's AsyncClient whose one-shot requests skip httpx2.

lightkube turns each call into an httpx2 Request (URL parsed and merged with the base, header
models, the auth flow) and reads the response back through httpx2's stream layers, on top of the
aiohttp transport (runtime/kube/transport.py). For the create, patch, get and delete calls the
controllers make per pod, that wrapping cost the client as much CPU as aiohttp's own send and
receive (py-spy in the offloading bench: httpx2's request building 12 %, its send chain 7 % of the
virtual kubelet's samples). Here lightkube still builds the request (`prepare_request`: URL path,
query, body) and decodes the answer, and aiohttp sends it: nothing else wraps it.

Watches the informers stream (`watch_lines`) are read from aiohttp as they come, split into lines
here rather than by httpx2's byte, text and line decoders in turn; those of an informer that asks
for it, while it is quiet, share HTTP/2 connections instead (runtime/kube/multiplexing.py).
What keeps lightkube's httpx2 path: lists (paged, maybe gzipped), lightkube's own watch(), and
credentials other than a bearer token, a token file or a client certificate (exec plugins, basic
auth), whose httpx2 auth flows lightkube implements.
Errors are those lightkube raises: ApiError for a Kubernetes Status, httpx2's transport errors.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Generator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import msgspec
import yarl
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.config.client_adapter import ConnectionParams, verify_cluster
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User
from lightkube.core import decoders
from lightkube.core.exceptions import ConfigError
from lightkube.core.generic_client import BasicRequest, GenericAsyncClient, transform_exception

from runtime.kube.multiplexing import Multiplexer
from runtime.kube.transport import AiohttpTransport, RequestHook, as_httpx_error

# lightkube's default: 10 s to connect, and to wait for each read
DEFAULT_TIMEOUT = httpx2.Timeout(10.0)
# and a one-shot request's deadline, whole: a server that trickles its answer does not hold it forever
REQUEST_DEADLINE_SECONDS = 60.0
# lightkube's methods that answer with one object (lists and watches keep the httpx2 path)
_ONE_SHOT = frozenset({"get", "post", "put", "patch", "delete", "deletecollection"})
# what aiohttp raises for a connection or a read that failed (as_httpx_error maps them to httpx2's)
_TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)
# characters of a path segment sent as they are (names such as system:node:x keep their colons)
_PATH_SAFE = "/:@"


# The current bearer token of a client whose credentials change while it runs (None: none now).
TokenSource = Callable[[], str | None]


class BearerToken:
    """The Authorization header of a kubeconfig user, as lightkube's own auth would send it: its
    token file (read again after a 401: the kubelet rotates projected tokens), else its token, else
    none (a client certificate, in the TLS context). With a `source`, the token it gives now, in
    place of the kubeconfig's (a virtual kubelet's credentials, picked up live)."""

    def __init__(self, user: User, source: TokenSource | None = None) -> None:
        self._source = source
        self._file = user.token_file
        self._header = None if self._file else (f"Bearer {user.token}" if user.token else None)

    @staticmethod
    def serves(user: User) -> bool:
        """Whether the user's credentials are among those this class sends (else httpx2's auth flows)."""
        if user.token_file or user.token:
            return True
        return not (user.exec or (user.username and user.password) or user.auth_provider)

    def header(self) -> str | None:
        if self._source is not None:
            token = self._source()
            self._header = f"Bearer {token}" if token else None
            return self._header
        if self._file and self._header is None:
            try:
                self._header = f"Bearer {Path(self._file).read_text().strip()}"
            except FileNotFoundError:
                raise ConfigError(f"Token file {self._file} not found") from None  # as lightkube says it
        return self._header

    def renewed(self) -> bool:
        """After a 401: whether the token changed since it was read (a token file, or the source)."""
        if self._source is not None:
            before = self._header
            return self.header() != before
        if not self._file:
            return False
        before, self._header = self._header, None
        return self.header() != before


class _DirectRequests(GenericAsyncClient):
    """lightkube's generic client, sending its one-shot requests through aiohttp directly."""

    def __init__(
        self,
        config: SingleConfig,
        transport: AiohttpTransport,
        multiplexer: Multiplexer | None,
        timeout: httpx2.Timeout,
        field_manager: str | None,
        token_source: TokenSource | None = None,
    ) -> None:
        # lightkube types the transport as a sync one, though its async client takes an async one
        params = ConnectionParams(timeout=timeout, transport=transport)  # type: ignore[arg-type]
        super().__init__(params, config, field_manager=field_manager)
        assert config.user is not None  # checked by RuntimeClient
        self._transport = transport
        self._server = config.cluster.server.rstrip("/")
        self._token = BearerToken(config.user, token_source) if BearerToken.serves(config.user) else None
        if token_source is not None:  # lists keep lightkube's httpx2 path: it asks the source too
            self._client.auth = _SourceAuth(token_source)
        # what httpx2 would send but Accept-Encoding: one object is small, and on loopback gzip costs
        # more CPU than it saves (lists, which can be large, keep httpx2's gzip)
        self._headers = {"Accept": "application/json", "User-Agent": self._client.headers["User-Agent"]}
        self._timeout = aiohttp.ClientTimeout(
            total=REQUEST_DEADLINE_SECONDS, sock_connect=timeout.connect, sock_read=timeout.read
        )
        self._multiplexer = multiplexer

    async def request(
        self,
        method: str,
        res: Any = None,
        obj: Any = None,
        name: str | None = None,
        namespace: str | None = None,
        watch: bool = False,
        headers: dict[str, str] | None = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        if self._token is None or watch or method not in _ONE_SHOT:
            return await super().request(method, res, obj, name, namespace, watch, headers=headers, params=params)
        request = self.prepare_request(method, res, obj, name, namespace, watch, headers=headers, params=params)
        if obj is not None and method == "delete":
            request.data = obj  # DeleteOptions (delete_with_options), which lightkube leaves out
        path, url = self._target(request)
        body = None if request.data is None else msgspec.json.encode(request.data)
        send_headers = {**self._headers, **(request.headers or {})}
        if body is not None:
            send_headers.setdefault("Content-Type", "application/json")
        status, response_headers, content = await self._exchange(request.method, url, path, send_headers, body)
        if status == 401 and self._token.renewed():
            status, response_headers, content = await self._exchange(request.method, url, path, send_headers, body)
        if status >= 400:
            raise _status_error(request.method, url, status, response_headers, content)
        if request.response_type is None:
            return None
        return decoders.decode_object(content, request.response_type)

    async def delete_with_options(self, res: Any, name: str, namespace: str | None, options: dict[str, Any]) -> None:
        """A delete with a body, DeleteOptions (e.g. preconditions): lightkube's delete sends none."""
        if self._token is not None:
            await self.request("delete", res, options, name, namespace)
            return
        request = self.prepare_request("delete", res, None, name, namespace)
        request.data = options
        response = await self.send(self.build_adapter_request(request))  # type: ignore[no-untyped-call]
        self.handle_response("delete", response, request)

    def _target(self, request: BasicRequest) -> tuple[str, str]:
        """The path (what the request hooks are told) and the whole URL of `request`."""
        path = "/" + urllib.parse.quote(request.url, safe=_PATH_SAFE)
        query = urllib.parse.urlencode(_query(request.params)) if request.params else ""
        return path, self._server + path + (f"?{query}" if query else "")

    def _authorize(self, headers: dict[str, str]) -> dict[str, str]:
        assert self._token is not None
        authorization = self._token.header()
        if authorization:
            headers["Authorization"] = authorization
        return headers

    async def _exchange(
        self, method: str, url: str, path: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        connecting = True
        try:
            response = await self._transport.send(method, url, path, self._authorize(headers), body, self._timeout)
            connecting = False
            try:
                return response.status, list(response.raw_headers), await response.read()
            finally:
                response.release()
        except _TRANSPORT_ERRORS as err:
            raise as_httpx_error(err, httpx2.Request(method, url), connecting=connecting) from err

    def streams_directly(self) -> bool:
        return self._token is not None

    async def stream_lines(
        self, request: BasicRequest, multiplexed: bool = False, read_idle: float | None = None
    ) -> AsyncIterator[bytes]:
        """The non-empty lines of a streamed answer to `request` (a watch), until the server ends it;
        over HTTP/1.1, httpx2.ReadTimeout once nothing came for `read_idle` seconds."""
        assert self._token is not None
        if multiplexed and self._multiplexer is not None:
            async for line in self._multiplexed_lines(request):
                yield line
            return
        path, url = self._target(request)
        headers = self._authorize(dict(self._headers))
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._timeout.sock_connect, sock_read=read_idle)
        connecting = True
        try:
            response = await self._transport.send(request.method, url, path, headers, None, timeout, streaming=True)
            connecting = False
            try:
                if response.status >= 400:
                    if response.status == 401:
                        self._token.renewed()  # the next attempt reads a rotated token file
                    raise _status_error(
                        request.method, url, response.status, list(response.raw_headers), await response.read()
                    )
                async for line in lines_of(response.content.iter_any()):
                    yield line
            finally:
                response.release()
        except _TRANSPORT_ERRORS as err:
            raise as_httpx_error(err, httpx2.Request(request.method, url), connecting=connecting) from err

    async def _multiplexed_lines(self, request: BasicRequest) -> AsyncIterator[bytes]:
        """`stream_lines` over HTTP/2, sharing a connection with the client's other watches."""
        assert self._token is not None and self._multiplexer is not None
        path, url = self._target(request)
        for hook in self._transport.request_hooks:
            hook(request.method, path)
        headers = [(k.lower().encode(), v.encode()) for k, v in self._authorize(dict(self._headers)).items()]
        target = yarl.URL(url, encoded=True).raw_path_qs
        async with self._multiplexer.stream(target, headers, self._timeout.sock_connect) as response:
            if response.status >= 400:
                if response.status == 401:
                    self._token.renewed()  # the next attempt reads a rotated token file
                raise _status_error(request.method, url, response.status, response.headers, await response.read())
            async for line in lines_of(response.chunks()):
                yield line


async def lines_of(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """The non-empty lines of a stream, however its chunks cut them (aiohttp's own readline caps a
    line's length, and a watch event carrying a large object is one long line)."""
    pending: list[bytes] = []
    async for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            line = chunk[start:end]
            if pending:
                pending.append(line)
                line = b"".join(pending)
                pending.clear()
            if line:
                yield line
            start = end + 1
        if start < len(chunk):
            pending.append(chunk[start:])
    if pending:
        yield b"".join(pending)


async def watch_lines(
    client: AsyncClient, request: BasicRequest, multiplexed: bool = False, read_idle: float | None = None
) -> AsyncGenerator[bytes, None]:
    """The non-empty lines of the watch `request` (lightkube's prepared request) sent with `client`,
    over HTTP/2 if `multiplexed` (and the client can); a refusal raises ApiError (or RuntimeError when
    the answer is no Kubernetes Status). Over HTTP/1.1, `read_idle`: nothing read for that long raises
    httpx2.ReadTimeout (an HTTP/2 connection has its PING instead)."""
    generic = client._client
    if isinstance(generic, _DirectRequests) and generic.streams_directly():
        async for line in generic.stream_lines(request, multiplexed, read_idle):
            yield line
        return
    watch_timeout = generic._watch_timeout
    timeout = httpx2.Timeout(
        connect=watch_timeout.connect, read=read_idle, write=watch_timeout.write, pool=watch_timeout.pool
    )
    http_request = generic._client.build_request(request.method, request.url, params=request.params, timeout=timeout)
    response = await generic._client.send(http_request, stream=True)
    try:
        if response.is_error:
            body = await response.aread()
            try:
                status = decoders.decode_status(body)
            except msgspec.MsgspecError:
                raise RuntimeError(f"watch answered HTTP {response.status_code}") from None
            raise ApiError(status=status)
        async for text in response.aiter_lines():
            if text:
                yield text.encode()
    finally:
        await response.aclose()


def _query(params: dict[str, Any]) -> dict[str, str]:
    """Query parameters as httpx2 writes them: booleans in lower case, None left out."""
    return {k: _query_value(v) for k, v in params.items() if v is not None}


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _status_error(method: str, url: str, status: int, headers: list[tuple[bytes, bytes]], content: bytes) -> Exception:
    """The error lightkube raises for this answer: ApiError when it carries a Kubernetes Status."""
    request = httpx2.Request(method, url)
    response = httpx2.Response(status, headers=headers, content=content, request=request)
    error = httpx2.HTTPStatusError(f"HTTP {status} for {method} {url}", request=request, response=response)
    return transform_exception(error)  # type: ignore[no-any-return]


class _SourceAuth(httpx2.Auth):
    """httpx2's auth flow of a token source: the token it gives at each request."""

    def __init__(self, source: TokenSource) -> None:
        self._source = source

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        token = self._source()
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        yield request


class RuntimeClient(AsyncClient):
    """A lightkube AsyncClient over aiohttp, whose one-shot requests skip httpx2 (module docstring).
    `token_source`: its bearer token comes from there at each request instead of from `config`;
    `bounded`: its connections capped, for a client of another cluster (runtime/kube/transport.py)."""

    def __init__(
        self,
        config: SingleConfig,
        *,
        field_manager: str | None = None,
        timeout: httpx2.Timeout | None = None,
        token_source: TokenSource | None = None,
        bounded: bool = False,
    ) -> None:
        if config.user is None:
            raise ValueError("the kubeconfig names no current context with a user")
        self.transport = AiohttpTransport(verify_cluster(config.cluster, config.user, config.abs_file), bounded=bounded)
        # watches over HTTP/2 (runtime/kube/multiplexing.py), with a TLS context of their own (ALPN h2)
        self.multiplexer = (
            Multiplexer(config.cluster.server, verify_cluster(config.cluster, config.user, config.abs_file))
            if config.cluster.server.startswith("https://")
            else None
        )
        # AsyncClient.__init__ would make a GenericAsyncClient; these are the two fields it sets
        self._timeout = timeout or DEFAULT_TIMEOUT
        self._client = _DirectRequests(
            config, self.transport, self.multiplexer, self._timeout, field_manager, token_source
        )

    async def close(self) -> None:
        if self.multiplexer is not None:
            self.multiplexer.close()
        await super().close()

    def on_request(self, hook: RequestHook) -> None:
        """Calls `hook(method, path)` for every request this client sends, whichever the path."""
        self.transport.request_hooks.append(hook)


async def delete_unchanged(
    client: AsyncClient, res: Any, name: str, *, uid: str, resource_version: str, namespace: str | None = None
) -> None:
    """Delete the object only while it is the one read (`uid`) at the version read (`resource_version`):
    the API server refuses (409 Conflict) once anyone changed it since, so a decision taken on what was
    read holds. A client other than the runtime's (tests' plain lightkube ones) deletes without them."""
    if not isinstance(client, RuntimeClient):
        await client.delete(res, name, namespace=namespace)
        return
    options = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": uid, "resourceVersion": resource_version},
    }
    direct = client._client
    assert isinstance(direct, _DirectRequests)
    await direct.delete_with_options(res, name, namespace, options)


def async_client(
    config: KubeConfig | SingleConfig,
    *,
    field_manager: str | None = None,
    timeout: httpx2.Timeout | None = None,
    token_source: TokenSource | None = None,
    bounded: bool = False,
) -> RuntimeClient:
    """The runtime's client of `config` (its current context); `token_source`: see RuntimeClient;
    `bounded`: a client of another cluster's API server, its connections capped (transport.py)."""
    single = config.get() if isinstance(config, KubeConfig) else config
    if single is None:
        raise ValueError("the kubeconfig names no current context")
    return RuntimeClient(
        single, field_manager=field_manager, timeout=timeout, token_source=token_source, bounded=bounded
    )
