"""Health, readiness and Prometheus metrics over HTTP, on loopback unless told otherwise.

/healthz: the process serves. /readyz: every registered readiness check passes (e.g. informers
synced). /metrics: the engine's metrics in Prometheus' text format, unless they are served over TLS
with authentication instead (cluster mode: runtime/kube/securemetrics.py).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

if TYPE_CHECKING:
    from runtime.kube.client import RuntimeClient

ReadinessCheck = Callable[[], bool]


class EngineMetrics:
    """The figures every controller reports, in one registry per process. A work queue's figures are
    labelled with the foreign cluster it works for (`cluster`, empty for the process's own): a
    virtual-kubelet process serves many peerings, each with queues of the same names."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.cluster = ""
        queue = ["queue", "cluster"]
        self.queue_depth = Gauge("liqo_queue_depth", "keys waiting in a work queue", queue, registry=self.registry)
        self.queue_workers = Gauge("liqo_queue_workers", "workers of a work queue", queue, registry=self.registry)
        self.reconcile_seconds = Histogram(
            "liqo_reconcile_seconds", "duration of one reconcile", [*queue, "result"], registry=self.registry
        )
        self.api_calls = Counter(
            "liqo_api_calls_total",
            "requests sent to an API server",
            ["cluster", "verb", "resource"],
            registry=self.registry,
        )
        self.requests = Counter(
            "liqo_api_requests_total",
            "HTTP requests this process sent to an API server, by method (the writes: POST, PUT, PATCH, DELETE)",
            ["cluster", "method", "resource"],
            registry=self.registry,
        )

    def for_cluster(self, cluster: str) -> EngineMetrics:
        """The same figures, with the work queues labelled `cluster` (one peering's)."""
        scoped = copy.copy(self)
        scoped.cluster = cluster
        return scoped

    def count_requests(self, client: RuntimeClient, cluster: str) -> None:
        """Counts every request `client` sends: a stand-by replica shows it writes nothing."""
        counter = self.requests
        children: dict[tuple[str, str], Any] = {}  # labels() takes a lock and a lookup: once per kind of request

        def count(method: str, path: str) -> None:
            labels = (method, resource_of(path))
            child = children.get(labels)
            if child is None:
                child = children[labels] = counter.labels(cluster, *labels)
            child.inc()

        client.on_request(count)


def resource_of(path: str) -> str:
    """The resource (and subresource) of an API path: /api/v1/namespaces/a/pods/b/status -> pods/status."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"]:
        parts = parts[3:]
    else:
        return parts[0] if parts else ""
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]
    if not parts:
        return ""
    return f"{parts[0]}/{parts[2]}" if len(parts) > 2 else parts[0]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: no access log
        return None


class ProbeServer:
    def __init__(
        self, metrics: EngineMetrics, host: str = "127.0.0.1", port: int = 0, *, metrics_elsewhere: str = ""
    ) -> None:
        """`metrics_elsewhere`: where /metrics is served instead (then this server answers 404 there)."""
        self.metrics = metrics
        self.metrics_elsewhere = metrics_elsewhere
        self._checks: dict[str, ReadinessCheck] = {}
        self._metrics_app = make_wsgi_app(metrics.registry)
        self._server: WSGIServer = make_server(host, port, self._app, handler_class=_QuietHandler)
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def add_readiness(self, name: str, check: ReadinessCheck) -> None:
        self._checks[name] = check

    def not_ready(self) -> list[str]:
        failing = []
        for name, check in self._checks.items():
            try:
                ok = check()
            except Exception:
                ok = False
            if not ok:
                failing.append(name)
        return failing

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        if path == "/readyz":
            failing = self.not_ready()
            status = "503 Service Unavailable" if failing else "200 OK"
            start_response(status, [("Content-Type", "text/plain")])
            body = "".join(f"not ready: {name}\n" for name in failing) or "ok\n"
            return [body.encode()]
        if path == "/metrics" and self.metrics_elsewhere:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [f"/metrics is served at {self.metrics_elsewhere}\n".encode()]
        if path == "/metrics":
            return self._metrics_app(environ, start_response)  # type: ignore[no-any-return]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"try /healthz, /readyz or /metrics\n"]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name="probes", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
