"""Probe server: health, readiness from registered checks, Prometheus metrics, all on loopback."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from runtime.kube import EngineMetrics, ProbeServer, WorkQueue
from runtime.kube.serving import resource_of


@pytest.fixture
def server() -> Iterator[ProbeServer]:
    probes = ProbeServer(EngineMetrics())
    probes.start()
    yield probes
    probes.stop()


def get(server: ProbeServer, path: str) -> tuple[int, str]:
    host, port = server.address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_serves_on_loopback_only(server: ProbeServer) -> None:
    assert server.address[0] == "127.0.0.1"


def test_health_is_ok_while_serving(server: ProbeServer) -> None:
    assert get(server, "/healthz") == (200, "ok\n")


def test_readiness_follows_the_checks(server: ProbeServer) -> None:
    synced = False
    server.add_readiness("pods informer synced", lambda: synced)
    assert get(server, "/readyz") == (503, "not ready: pods informer synced\n")
    synced = True
    assert get(server, "/readyz") == (200, "ok\n")


def test_a_failing_check_means_not_ready(server: ProbeServer) -> None:
    def broken() -> bool:
        raise RuntimeError("boom")

    server.add_readiness("broken", broken)
    assert get(server, "/readyz")[0] == 503


def test_metrics_report_queue_depth_and_reconciles(server: ProbeServer) -> None:
    async def scenario() -> None:
        async def reconcile(key: str) -> None:
            if key == "bad":
                raise RuntimeError("fails")

        queue = WorkQueue(reconcile, workers=1, name="offloading", metrics=server.metrics, base_delay=10)
        queue.add("good")
        queue.add("bad")
        queue.start()
        await asyncio.sleep(0.2)
        await queue.shutdown(drain_timeout=1)

    asyncio.run(scenario())
    status, body = get(server, "/metrics")
    assert status == 200
    assert 'liqo_queue_depth{cluster="",queue="offloading"} 0.0' in body
    assert 'liqo_reconcile_seconds_count{cluster="",queue="offloading",result="success"} 1.0' in body
    assert 'liqo_reconcile_seconds_count{cluster="",queue="offloading",result="failure"} 1.0' in body


def test_unknown_paths_say_what_exists(server: ProbeServer) -> None:
    status, body = get(server, "/")
    assert status == 404 and "/readyz" in body


def test_metrics_leave_the_probe_port_when_served_securely() -> None:
    probes = ProbeServer(EngineMetrics(), metrics_elsewhere="https://<pod>:8443/metrics")
    probes.start()
    try:
        status, body = get(probes, "/metrics")
        assert status == 404
        assert body == "/metrics is served at https://<pod>:8443/metrics\n"
        assert get(probes, "/healthz") == (200, "ok\n")
    finally:
        probes.stop()


@pytest.mark.parametrize(
    ("path", "resource"),
    [
        ("/api/v1/namespaces/a/pods/b/status", "pods/status"),
        ("/api/v1/namespaces/a/pods", "pods"),
        ("/api/v1/namespaces/a", "namespaces"),
        ("/api/v1/nodes/n", "nodes"),
        ("/apis/coordination.k8s.io/v1/namespaces/liqo/leases/x", "leases"),
        ("/apis/offloading.liqo.io/v1beta1/shadowpods", "shadowpods"),
        ("/version", "version"),
    ],
)
def test_requests_are_counted_by_resource(path: str, resource: str) -> None:
    assert resource_of(path) == resource
