"""The virtual kubelet's /metrics/resource from the foreign metrics API: names, labels, counters."""

from __future__ import annotations

import re

from runtime.virtualkubelet.kubeletapi import request_attributes
from runtime.virtualkubelet.resourcemetrics import (
    ContainerUsage,
    OffloadedPod,
    ResourceMetrics,
    usage_from_pod_metrics,
)

POD = OffloadedPod("shop", "web-1", "shop-home", "web-1", {"main": 1000.0, "side": 1000.0})
LISTING = {
    "kind": "PodMetricsList",
    "items": [
        {
            "metadata": {"name": "web-1", "namespace": "shop-home"},
            "containers": [
                {"name": "main", "usage": {"cpu": "250m", "memory": "100Mi"}},
                {"name": "side", "usage": {"cpu": "500000000n", "memory": "1024Ki"}},
            ],
        },
        {"metadata": {"name": "elsewhere"}, "containers": [{"name": "x", "usage": {"cpu": "1", "memory": "1"}}]},
    ],
}


def sample(text: str, series: str) -> float:
    found = re.search(rf"^{re.escape(series)} (\S+) \d+$", text, re.MULTILINE)
    assert found, f"{series} not in\n{text}"
    return float(found.group(1))


def test_foreign_pod_metrics_are_read_by_remote_pod_and_container() -> None:
    usage = usage_from_pod_metrics("shop-home", LISTING)
    assert usage[("shop-home", "web-1")] == {
        "main": ContainerUsage(0.25, 100 << 20),
        "side": ContainerUsage(0.5, 1 << 20),
    }


def test_counters_integrate_the_foreign_rate_so_two_scrapes_give_it_back() -> None:
    metrics = ResourceMetrics()
    usage = usage_from_pod_metrics("shop-home", LISTING)
    first = metrics.render([POD], usage, error=False, now=1010.0)
    main = 'container_cpu_usage_seconds_total{container="main",namespace="shop",pod="web-1"}'
    assert sample(first, main) == 0.25 * 10  # since the container started
    second = metrics.render([POD], usage, error=False, now=1025.0)
    assert (sample(second, main) - sample(first, main)) / 15 == 0.25  # what metrics-server computes
    memory = 'container_memory_working_set_bytes{container="main",namespace="shop",pod="web-1"}'
    assert sample(second, memory) == 100 << 20
    assert sample(second, 'container_start_time_seconds{container="main",namespace="shop",pod="web-1"}') == 1000.0
    # the node: the sum of its pods
    assert sample(second, "node_cpu_usage_seconds_total") == sample(second, main) + 0.5 * 25
    assert sample(second, "node_memory_working_set_bytes") == (100 << 20) + (1 << 20)
    assert sample(second, 'pod_memory_working_set_bytes{namespace="shop",pod="web-1"}') == (100 << 20) + (1 << 20)
    assert "# TYPE container_cpu_usage_seconds_total counter" in second
    assert "\nscrape_error 0\n" in second


def test_pods_without_foreign_figures_are_left_out_and_a_failed_read_is_said() -> None:
    text = ResourceMetrics().render([POD], {}, error=True, now=1010.0)
    assert "container_" not in text and "pod_" not in text
    assert sample(text, "node_memory_working_set_bytes") == 0
    assert "\nscrape_error 1\n" in text


def test_label_values_are_escaped() -> None:
    pod = OffloadedPod("ns", "p", "t", "p", {})
    text = ResourceMetrics().render([pod], {("t", "p"): {'a"b\\c': ContainerUsage(0.0, 1)}}, error=False, now=1.0)
    assert 'container="a\\"b\\\\c"' in text


def test_resource_metrics_are_authorized_as_nodes_metrics() -> None:
    assert request_attributes("GET", "/metrics/resource") == ("get", ["metrics"])
