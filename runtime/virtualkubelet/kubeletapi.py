"""The kubelet API of a virtual node: what the home API server calls for `kubectl logs`, `exec`,
`attach` and `port-forward` of a pod on it, relayed to the remote pod (twin namespace, same name)
through the foreign API server's pod subresources, as the home identity.

Secured like the kubelet's own port: TLS; the caller is authenticated by an x509 client
certificate signed by the home cluster's client CA (the API server's `--kubelet-client-certificate`)
or by a bearer token (TokenReview at home), and authorised by a SubjectAccessReview at home on
`nodes/<subresource>` of this node, with the kubelet's mapping (`/containerLogs`, `/exec`,
`/attach`, `/portForward`: `proxy`; `/metrics`: `metrics`, e.g. `/metrics/resource` (resourcemetrics.py);
`/stats`: `stats`; `/logs`: `log`; `/healthz`: `healthz`, else `proxy`). Nobody: 401; not allowed:
403. Answers are cached as the kubelet's webhook authenticator and authorizer do.

Streams (exec, attach, port-forward) are WebSockets only: a 1.36 API server passes the client's
WebSocket through to a Node that declares `ExtendWebSocketsToKubelet` (see node.py), and its frames
(`v5.channel.k8s.io`, `SPDY/3.1+portforward.k8s.io`) are relayed unchanged to the same subresource
of the foreign API server, which speaks the same protocols. A client that only speaks SPDY gets a
400 saying so.

Imported only when the kubelet API is enabled (aiohttp itself is loaded by the API clients'
transport, runtime/kube/transport.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
import socket
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from lightkube import AsyncClient, KubeConfig
from lightkube.models.authorization_v1 import ResourceAttributes
from lightkube.resources.core_v1 import ConfigMap
from multidict import MultiMapping

from runtime.kube.liveness import live_socket
from runtime.kube.reviews import Caller, Reviewer
from runtime.virtualkubelet.node import address_family
from runtime.virtualkubelet.resourcemetrics import OffloadedPod, ResourceMetrics, usage_from_pod_metrics

log = logging.getLogger(__name__)

# What the kube-apiserver reads to know whom it trusts for client certificates (readable by the
# virtual kubelet's configmaps rights); kubelets are handed the same CA as --client-ca-file.
CLIENT_CA_CONFIGMAP = ("kube-system", "extension-apiserver-authentication")
CLIENT_CA_KEY = "client-ca-file"

# below metrics-server's --kubelet-request-timeout (10s by default, 5s in the dev clusters): answer,
# perhaps partly, before it gives up
METRICS_TIMEOUT = 4.0
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"  # what the kubelet answers, what metrics-server parses
LOG_PARAMS = ("follow", "previous", "timestamps", "sinceSeconds", "sinceTime", "tailLines", "limitBytes", "stream")
# The kubelet's stream parameters -> the API server's pods/exec|attach ones.
STREAM_PARAMS = {"input": "stdin", "output": "stdout", "error": "stderr", "tty": "tty"}
WEBSOCKET_ONLY = (
    "this virtual kubelet serves exec, attach and port-forward over WebSocket only "
    "(v5.channel.k8s.io, SPDY/3.1+portforward.k8s.io tunnelled in WebSocket): use a kubectl of 1.31 or later, "
    "without KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false / KUBECTL_PORT_FORWARD_WEBSOCKETS=false"
)

# kwok (the dev clusters' kubelets) reports a command's exit code as an internal error; a kubelet
# says NonZeroExitCode with the code, which is what kubectl turns into its own exit code.
_KWOK_EXIT = re.compile(r"error executing command in container: .*?: exit status (\d+)", re.DOTALL)


def bind_listener(address: str, port: int) -> socket.socket:
    """The kubelet API's socket, bound and listening (SO_REUSEADDR, as aiohttp binds): bound before the
    Node names the port, so a port another process holds fails the peering before its Node says Ready."""
    try:
        return socket.create_server((address, port), family=address_family(address), backlog=128)
    except OSError as err:
        why = os.strerror(err.errno).lower() if err.errno else str(err)
        raise OSError(
            err.errno,
            f"the kubelet API cannot listen on {address}:{port}: {why}; stop what holds it, or give the node "
            "another port (--kubelet-port-of ID=PORT)",
        ) from err


def caller_from_certificate(peercert: Mapping[str, Any] | None) -> Caller | None:
    """The user (CN) and groups (O) of a verified client certificate, as Kubernetes reads them."""
    if not peercert:
        return None
    user, groups = "", []
    for rdn in peercert.get("subject") or ():
        for key, value in rdn:
            if key == "commonName":
                user = value
            elif key == "organizationName":
                groups.append(value)
    return Caller(user, tuple(groups)) if user else None


def request_attributes(method: str, path: str) -> tuple[str, list[str]]:
    """The verb and the nodes subresources (any one allowed is enough) the kubelet checks for a
    request (pkg/kubelet/server/auth.go, with KubeletFineGrainedAuthz, on by default in 1.36)."""
    verb = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    subresources = []

    def under(prefix: str) -> bool:
        return path == prefix or path.startswith(prefix + "/")

    if under("/pods") or under("/runningpods"):
        subresources.append("pods")
    elif under("/healthz"):
        subresources.append("healthz")
    if under("/stats"):
        subresources.append("stats")
    elif under("/metrics"):
        subresources.append("metrics")
    elif under("/logs"):
        subresources.append("log")
    else:
        subresources.append("proxy")
    return verb.get(method, ""), subresources


def exit_status_frame(frame: bytes) -> bytes:
    """A status-channel frame (v4/v5: channel 3, a metav1.Status) with kwok's exit error made the
    kubelet's NonZeroExitCode; any other frame unchanged."""
    if not frame or frame[0] != 3:
        return frame
    try:
        status = json.loads(frame[1:])
    except ValueError:
        return frame
    if not isinstance(status, dict) or status.get("status") != "Failure" or status.get("reason") != "InternalError":
        return frame
    found = _KWOK_EXIT.search(str(status.get("message") or ""))
    if found is None:
        return frame
    code = found.group(1)
    answer = {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command: exit status {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code}]},
    }
    return b"\x03" + json.dumps(answer).encode()


def stream_query(kind: str, query: MultiMapping[str], container: str) -> list[tuple[str, str]]:
    """The foreign API server's query for pods/exec|attach|portforward, from the kubelet's."""
    params: list[tuple[str, str]] = []
    if kind == "portforward":
        for ports in query.getall("port", []):
            params += [("ports", p.strip()) for p in ports.split(",") if p.strip()]
        return params
    params.append(("container", container))
    for ours, theirs in STREAM_PARAMS.items():
        if query.get(ours) in ("1", "true"):
            params.append((theirs, "true"))
    if kind == "exec":
        params += [("command", c) for c in query.getall("command", [])]
    return params


@dataclass
class ForeignEndpoint:
    """Where and how the home identity reaches the foreign API server (its kubeconfig)."""

    server: str
    tls: ssl.SSLContext | bool
    headers: dict[str, str]

    def use_token(self, token: str | None) -> None:
        """New credentials (runtime/virtualkubelet/credentials.py): the next relayed request sends them."""
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        else:
            self.headers.pop("Authorization", None)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: dict[str, Any]) -> ForeignEndpoint:
        config = KubeConfig.from_dict(kubeconfig).get()
        if config is None:
            raise ValueError("the foreign kubeconfig has no current context")
        cluster, user = config.cluster, config.user
        tls: ssl.SSLContext | bool = True
        if cluster.server.startswith("https"):
            if cluster.insecure:
                tls = False
            else:
                context = ssl.create_default_context()
                if cluster.certificate_auth_data:
                    context.load_verify_locations(cadata=base64.b64decode(cluster.certificate_auth_data).decode())
                elif cluster.certificate_auth:
                    context.load_verify_locations(cafile=cluster.certificate_auth)
                if user is not None and user.client_cert and user.client_key:
                    context.load_cert_chain(user.client_cert, user.client_key)
                elif user is not None and user.client_cert_data and user.client_key_data:
                    # ssl loads a key pair only from files; they live just long enough to be read
                    with tempfile.TemporaryDirectory() as folder:
                        cert, key = Path(folder, "tls.crt"), Path(folder, "tls.key")
                        cert.write_bytes(base64.b64decode(user.client_cert_data))
                        key.write_bytes(base64.b64decode(user.client_key_data))
                        key.chmod(0o600)
                        context.load_cert_chain(cert, key)
                tls = context
        headers = {}
        token = user.token if user is not None else None
        if user is not None and not token and user.token_file:
            with open(user.token_file) as file:
                token = file.read().strip()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return cls(cluster.server.rstrip("/"), tls, headers)


# (namespace, pod name) at home -> (twin namespace, remote name), or None when not on this node
RemoteLookup = Callable[[str, str], tuple[str, str] | None]
# the pods on this node that run in the foreign cluster now
PodsOnNode = Callable[[], list[OffloadedPod]]


class KubeletApiServer:
    def __init__(
        self,
        home: AsyncClient,
        foreign: ForeignEndpoint,
        *,
        node_name: str,
        remote_of: RemoteLookup,
        address: str,
        port: int,
        tls: ssl.SSLContext,
        pods_on_node: PodsOnNode = list,
    ) -> None:
        """`tls`: the serving context; the client CA is added to it by `start()`."""
        self.home, self.foreign, self.node_name = home, foreign, node_name
        self.remote_of, self.pods_on_node = remote_of, pods_on_node
        self.resource_metrics = ResourceMetrics()
        self.address, self.port, self.tls = address, port, tls
        self.reviews = Reviewer(home)
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.app = web.Application(middlewares=[self._secure])
        self.app.add_routes(
            [
                web.get("/healthz", self._healthz),
                web.get("/metrics/resource", self._metrics_resource),
                web.get("/containerLogs/{namespace}/{pod}/{container}", self._container_logs),
                web.route("*", "/exec/{namespace}/{pod}/{container}", self._exec),
                web.route("*", "/attach/{namespace}/{pod}/{container}", self._attach),
                web.route("*", "/portForward/{namespace}/{pod}", self._port_forward),
            ]
        )

    # -- lifecycle ---------------------------------------------------------------------------------
    async def client_ca(self) -> str:
        namespace, name = CLIENT_CA_CONFIGMAP
        configmap = await self.home.get(ConfigMap, name, namespace=namespace)
        return str((configmap.data or {})[CLIENT_CA_KEY])

    async def start(self, listener: socket.socket | None = None) -> None:
        """Serve on `listener` (bound by `bind_listener` already), else on a socket bound here."""
        try:
            self.tls.verify_mode = ssl.CERT_OPTIONAL  # a certificate if given, else a token
            self.tls.load_verify_locations(cadata=await self.client_ca())
            self._session = aiohttp.ClientSession(
                headers=self.foreign.headers,
                connector=aiohttp.TCPConnector(ssl=self.foreign.tls, socket_factory=live_socket),  # liveness.py
                timeout=aiohttp.ClientTimeout(total=None, connect=10),
            )
            # handler_cancellation: a client gone ends its relay at once (a followed log waits forever);
            # shutdown_timeout: streams are ended at a stop, not waited for
            self._runner = web.AppRunner(self.app, access_log=None, handler_cancellation=True, shutdown_timeout=1)
            await self._runner.setup()
            await web.SockSite(
                self._runner, listener or bind_listener(self.address, self.port), ssl_context=self.tls
            ).start()
        except BaseException:
            await self.stop()  # what it opened goes with it: the peering restarts with a new one
            if listener is not None:  # closed with the site if it took it, else here: its port is free again
                listener.close()
            raise
        log.info("kubelet API on https://%s:%d", self.address, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "start() first"
        return self._session

    # -- authentication and authorization -------------------------------------------------------
    async def authenticate(self, request: web.Request) -> Caller | None:
        caller = caller_from_certificate(request.transport.get_extra_info("peercert") if request.transport else None)
        if caller is not None:
            return caller
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return await self._review_token(token.strip())

    async def _review_token(self, token: str) -> Caller | None:
        return await self.reviews.caller_of(token)

    async def authorize(self, caller: Caller, verb: str, subresource: str) -> tuple[bool, str]:
        attributes = ResourceAttributes(
            verb=verb, resource="nodes", subresource=subresource, name=self.node_name, version="v1"
        )
        return await self.reviews.allowed(caller, resource=attributes)

    @web.middleware
    async def _secure(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            caller = await self.authenticate(request)
        except Exception as err:  # the home API server away: nobody can be told apart
            log.warning("authentication failed: %s", err)
            return web.Response(status=503, text=f"cannot authenticate the request now: {err}\n")
        if caller is None:
            return web.Response(status=401, text="Unauthorized\n")
        verb, subresources = request_attributes(request.method, request.path)
        reasons = []
        for subresource in subresources:
            try:
                allowed, reason = await self.authorize(caller, verb, subresource)
            except Exception as err:
                log.warning("authorization failed: %s", err)
                return web.Response(status=503, text=f"cannot authorize the request now: {err}\n")
            if allowed:
                return await handler(request)
            reasons.append(reason)
        message = f"Forbidden (user={caller.user}, verb={verb}, resource=nodes, subresource(s)={subresources})" + (
            f": {'; '.join(r for r in reasons if r)}" if any(reasons) else ""
        )
        return web.Response(status=403, text=message + "\n")

    # -- handlers ----------------------------------------------------------------------------------
    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _metrics_resource(self, request: web.Request) -> web.Response:
        """The kubelet's resource metrics of this node's pods, from the foreign metrics API (each
        twin namespace read at once: one slow namespace must not make the whole answer late)."""
        pods = self.pods_on_node()
        twins = sorted({pod.twin for pod in pods})
        read = await asyncio.gather(*(self._foreign_pod_metrics(twin) for twin in twins))
        usage = {key: value for found in read if found is not None for key, value in found.items()}
        text = self.resource_metrics.render(pods, usage, error=any(found is None for found in read))
        return web.Response(body=text.encode(), headers={"Content-Type": PROMETHEUS_TEXT})

    async def _foreign_pod_metrics(self, twin: str) -> dict[tuple[str, str], Any] | None:
        """metrics.k8s.io pods of one twin namespace; None (said by scrape_error) if unreadable now."""
        url = f"{self.foreign.server}/apis/metrics.k8s.io/v1beta1/namespaces/{twin}/pods"
        try:
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=METRICS_TIMEOUT)) as upstream:
                if upstream.status != 200:
                    raise RuntimeError(f"HTTP {upstream.status}: {(await upstream.text())[:200]}")
                return dict(usage_from_pod_metrics(twin, await upstream.json()))
        except Exception as err:  # the other namespaces' figures are still worth serving
            log.warning("foreign pod metrics of %s: %s", twin, err)
            return None

    def _remote(self, request: web.Request) -> tuple[str, str]:
        namespace, pod = request.match_info["namespace"], request.match_info["pod"]
        remote = self.remote_of(namespace, pod)
        if remote is None:
            raise web.HTTPNotFound(text=f'pod "{namespace}/{pod}" not found on node {self.node_name}\n')
        return remote

    def _url(self, twin: str, name: str, subresource: str) -> str:
        return f"{self.foreign.server}/api/v1/namespaces/{twin}/pods/{name}/{subresource}"

    async def _container_logs(self, request: web.Request) -> web.StreamResponse:
        twin, name = self._remote(request)
        params = [("container", request.match_info["container"])]
        params += [(key, request.query[key]) for key in LOG_PARAMS if key in request.query]
        async with self.session.get(self._url(twin, name, "log"), params=params) as upstream:
            if upstream.status != 200:
                return web.Response(
                    status=upstream.status, body=await upstream.read(), content_type=upstream.content_type
                )
            response = web.StreamResponse(headers={"Content-Type": "text/plain"})
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        return await self._relay(request, "exec")

    async def _attach(self, request: web.Request) -> web.StreamResponse:
        return await self._relay(request, "attach")

    async def _port_forward(self, request: web.Request) -> web.StreamResponse:
        return await self._relay(request, "portforward")

    async def _relay(self, request: web.Request, kind: str) -> web.StreamResponse:
        upgrade = request.headers.get("Upgrade", "").lower()
        if upgrade != "websocket":
            raise web.HTTPBadRequest(text=WEBSOCKET_ONLY + "\n")
        twin, name = self._remote(request)
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
        params = stream_query(kind, request.query, request.match_info.get("container", ""))
        try:
            upstream = await self.session.ws_connect(
                self._url(twin, name, kind), protocols=offered, params=params, autoping=True, max_msg_size=0
            )
        except aiohttp.WSServerHandshakeError as err:
            return web.Response(status=err.status, text=f"foreign API server: {err.message}\n")
        async with upstream:
            client = web.WebSocketResponse(protocols=[upstream.protocol] if upstream.protocol else [], max_msg_size=0)
            await client.prepare(request)
            statuses = kind == "exec" and (upstream.protocol or "").startswith(("v4.", "v5."))
            up = asyncio.create_task(_pump(client, upstream, None))
            down = asyncio.create_task(_pump(upstream, client, exit_status_frame if statuses else None))
            try:
                done, _ = await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
                if down not in done:  # the client closed first: the remote side may still say how it ended
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(5):
                            await asyncio.shield(down)
            finally:
                for task in (up, down):
                    task.cancel()
                await asyncio.gather(up, down, return_exceptions=True)  # a cancellation of this relay still ends it
                await client.close(code=close_code(upstream.close_code))
        return client


def close_code(received: int | None) -> int:
    """The close code to pass on: one that may be sent. 1005, 1006 and 1015 only say that a peer
    sent none (the API server closes right after its status frame), which the protocol forbids
    sending; the stream's outcome is in its status frame anyway."""
    if received is None or received in (1005, 1006, 1015):
        return int(aiohttp.WSCloseCode.OK)
    return received


async def _pump(
    source: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
    target: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
    translate: Callable[[bytes], bytes] | None,
) -> None:
    """Frames from `source` to `target` as they are, until `source` closes; then close `target`."""
    async for message in source:
        if message.type == aiohttp.WSMsgType.BINARY:
            await target.send_bytes(translate(message.data) if translate else message.data)
        elif message.type == aiohttp.WSMsgType.TEXT:
            await target.send_str(message.data)
        else:
            break
    await target.close(code=close_code(source.close_code))
