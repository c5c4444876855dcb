"""The runtime's Kubernetes client: lightkube's AsyncClient whose one-shot requests skip httpx2.

lightkube turns each call into an httpx2 Request (URL parsed and merged with the base, header
models, the auth flow) and reads the response back through httpx2's stream layers, on top of the
aiohttp transport (runtime/kube/transport.py). For the create, patch, get and delete calls the
controllers make per pod, that wrapping cost the client as much CPU as aiohttp's own send and
receive (py-spy in the offloading bench: httpx2's request building 12 %, its send chain 7 % of the
virtual kubelet's samples). Here lightkube still builds the request (`prepare_request`: URL path,
query, body) and decodes the answer, and aiohttp sends it: nothing else wraps it.

What keeps lightkube's httpx2 path: lists (paged, maybe gzipped), watches (runtime/kube/informing.py
streams them), and credentials other than a bearer token, a token file or a client certificate
(exec plugins, basic auth), whose httpx2 auth flows lightkube implements.
Errors are those lightkube raises: ApiError for a Kubernetes Status, httpx2's transport errors.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import msgspec
from lightkube import AsyncClient, KubeConfig
from lightkube.config.client_adapter import ConnectionParams, verify_cluster
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User
from lightkube.core import decoders
from lightkube.core.generic_client import GenericAsyncClient, transform_exception

from runtime.kube.transport import AiohttpTransport, RequestHook, as_httpx_error

# lightkube's default: 10 s to connect, and to wait for each read
DEFAULT_TIMEOUT = httpx2.Timeout(10.0)
# lightkube's methods that answer with one object (lists and watches keep the httpx2 path)
_ONE_SHOT = frozenset({"get", "post", "put", "patch", "delete", "deletecollection"})
# characters of a path segment sent as they are (names such as system:node:x keep their colons)
_PATH_SAFE = "/:@"


class BearerToken:
    """The Authorization header of a kubeconfig user, as lightkube's own auth would send it: its
    token file (read again after a 401: the kubelet rotates projected tokens), else its token, else
    none (a client certificate, in the TLS context)."""

    def __init__(self, user: User) -> None:
        self._file = user.token_file
        self._header = None if self._file else (f"Bearer {user.token}" if user.token else None)

    @staticmethod
    def serves(user: User) -> bool:
        """Whether the user's credentials are among those this class sends (else httpx2's auth flows)."""
        if user.token_file or user.token:
            return True
        return not (user.exec or (user.username and user.password) or user.auth_provider)

    def header(self) -> str | None:
        if self._file and self._header is None:
            self._header = f"Bearer {Path(self._file).read_text().strip()}"
        return self._header

    def renewed(self) -> bool:
        """After a 401: whether the token changed since it was read (only a token file can)."""
        if not self._file:
            return False
        before, self._header = self._header, None
        return self.header() != before


class _DirectRequests(GenericAsyncClient):
    """lightkube's generic client, sending its one-shot requests through aiohttp directly."""

    def __init__(
        self, config: SingleConfig, transport: AiohttpTransport, timeout: httpx2.Timeout, field_manager: str | None
    ) -> None:
        # lightkube types the transport as a sync one, though its async client takes an async one
        params = ConnectionParams(timeout=timeout, transport=transport)  # type: ignore[arg-type]
        super().__init__(params, config, field_manager=field_manager)
        assert config.user is not None  # checked by RuntimeClient
        self._transport = transport
        self._server = config.cluster.server.rstrip("/")
        self._token = BearerToken(config.user) if BearerToken.serves(config.user) else None
        # what httpx2 would send but Accept-Encoding: one object is small, and on loopback gzip costs
        # more CPU than it saves (lists, which can be large, keep httpx2's gzip)
        self._headers = {"Accept": "application/json", "User-Agent": self._client.headers["User-Agent"]}
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout.connect, sock_read=timeout.read)

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
        path = "/" + urllib.parse.quote(request.url, safe=_PATH_SAFE)
        url = self._server + path
        if request.params:
            url += "?" + urllib.parse.urlencode({k: _query_value(v) for k, v in request.params.items()})
        send_headers = {**self._headers, **(request.headers or {})}
        body = None
        if request.data is not None:
            body = msgspec.json.encode(request.data)
            send_headers.setdefault("Content-Type", "application/json")
        status, response_headers, content = await self._exchange(request.method, url, path, send_headers, body)
        if status == 401 and self._token.renewed():
            status, response_headers, content = await self._exchange(request.method, url, path, send_headers, body)
        if status >= 400:
            raise _status_error(request.method, url, status, response_headers, content)
        if request.response_type is None:
            return None
        return decoders.decode_object(content, request.response_type)

    async def _exchange(
        self, method: str, url: str, path: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        assert self._token is not None
        authorization = self._token.header()
        if authorization:
            headers["Authorization"] = authorization
        connecting = True
        try:
            response = await self._transport.send(method, url, path, headers, body, self._timeout)
            connecting = False
            try:
                return response.status, list(response.raw_headers), await response.read()
            finally:
                response.release()
        except Exception as err:
            raise as_httpx_error(err, httpx2.Request(method, url), connecting=connecting) from err


def _query_value(value: Any) -> str:
    """A query parameter as httpx2 writes it (booleans in lower case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _status_error(method: str, url: str, status: int, headers: list[tuple[bytes, bytes]], content: bytes) -> Exception:
    """The error lightkube raises for this answer: ApiError when it carries a Kubernetes Status."""
    request = httpx2.Request(method, url)
    response = httpx2.Response(status, headers=headers, content=content, request=request)
    error = httpx2.HTTPStatusError(f"HTTP {status} for {method} {url}", request=request, response=response)
    return transform_exception(error)  # type: ignore[no-any-return]


class RuntimeClient(AsyncClient):
    """A lightkube AsyncClient over aiohttp, whose one-shot requests skip httpx2 (module docstring)."""

    def __init__(
        self, config: SingleConfig, *, field_manager: str | None = None, timeout: httpx2.Timeout | None = None
    ) -> None:
        if config.user is None:
            raise ValueError("the kubeconfig names no current context with a user")
        self.transport = AiohttpTransport(verify_cluster(config.cluster, config.user, config.abs_file))
        # AsyncClient.__init__ would make a GenericAsyncClient; these are the two fields it sets
        self._timeout = timeout or DEFAULT_TIMEOUT
        self._client = _DirectRequests(config, self.transport, self._timeout, field_manager)

    def on_request(self, hook: RequestHook) -> None:
        """Calls `hook(method, path)` for every request this client sends, whichever the path."""
        self.transport.request_hooks.append(hook)


def async_client(
    config: KubeConfig | SingleConfig, *, field_manager: str | None = None, timeout: httpx2.Timeout | None = None
) -> RuntimeClient:
    """The runtime's client of `config` (its current context)."""
    single = config.get() if isinstance(config, KubeConfig) else config
    if single is None:
        raise ValueError("the kubeconfig names no current context")
    return RuntimeClient(single, field_manager=field_manager, timeout=timeout)
