"""/metrics over TLS for cluster mode, like controller-runtime's secure metrics: the caller's
bearer token is checked by a TokenReview and its right by a SubjectAccessReview on the non-resource
URL (`get /metrics`, granted by the ClusterRole `liqo-metrics-reader`). No token: 401; no right:
403; the API server away: 503. The probes (/healthz, /readyz) stay open on the probe port.

The serving certificate is self-signed, made at start (scrapers of such endpoints skip
verification or pin it, as with controller-runtime's default), in a child process (runtime.tls).
Imported only when enabled: aiohttp costs a process ~10 MB.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from lightkube import AsyncClient
from lightkube.models.authorization_v1 import NonResourceAttributes
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from runtime.kube.reviews import Reviewer, bearer_token
from runtime.tls import issue

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"


class SecureMetricsServer:
    def __init__(self, client: AsyncClient, registry: CollectorRegistry, address: str, port: int) -> None:
        """`client`: of the cluster this component runs in, which knows its callers' tokens."""
        self.reviews = Reviewer(client)
        self.registry = registry
        self.address, self.port = address, port
        self.app = web.Application(middlewares=[self._secure])
        self.app.add_routes([web.get(METRICS_PATH, self._metrics)])
        self._runner: web.AppRunner | None = None

    @property
    def bound_port(self) -> int:
        """The port served (the one picked when `port` was 0)."""
        assert self._runner is not None, "start() first"
        return int(self._runner.addresses[0][1])

    async def start(self) -> None:
        certificate = await issue([self.address, "127.0.0.1", "localhost"], ca_common_name="liqo-metrics-ca")
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=1)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.address, self.port, ssl_context=certificate.ssl_context()).start()
        log.info(
            "metrics on https://%s:%d%s (TokenReview + SubjectAccessReview)",
            self.address,
            self.bound_port,
            METRICS_PATH,
        )

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _secure(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        token = bearer_token(request.headers.get("Authorization", ""))
        if token is None:
            return web.Response(status=401, text="Unauthorized: a bearer token is needed\n")
        try:
            caller = await self.reviews.caller_of(token)
            if caller is None:
                return web.Response(status=401, text="Unauthorized\n")
            verb = "get" if request.method in ("GET", "HEAD") else request.method.lower()
            allowed, reason = await self.reviews.allowed(
                caller, non_resource=NonResourceAttributes(path=request.path, verb=verb)
            )
        except Exception as err:  # the API server away: nobody can be told apart
            log.warning("cannot review a metrics request: %s", err)
            return web.Response(status=503, text=f"cannot authenticate or authorize the request now: {err}\n")
        if not allowed:
            text = f'Forbidden (user={caller.user}, verb={verb}, path="{request.path}")'
            return web.Response(status=403, text=f"{text}: {reason}\n" if reason else f"{text}\n")
        return await handler(request)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})
