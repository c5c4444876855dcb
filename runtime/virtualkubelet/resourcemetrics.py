"""The kubelet's resource metrics (`/metrics/resource`) of a virtual node, from the foreign cluster's
metrics API (metrics.k8s.io `pods`, read in the twin namespaces only: the home identity has nothing
cluster-wide there).

metrics-server at home scrapes this like any kubelet: it takes the rate of the cumulative CPU
counters between two scrapes and the memory working set as it is. The foreign metrics API gives a
CPU rate (usage over its window), so each container's counter integrates the last known rate over
the time between our answers: two scrapes at a steady rate give metrics-server back exactly the
foreign rate. A counter starts (or, after a restart of this process, starts again) at rate x
uptime, which metrics-server reads as a counter reset, as after a container restart. Node figures
are the sums over this node's offloaded pods (a virtual node has no usage of its own).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.api.quantities import parse_quantity


@dataclass(frozen=True)
class OffloadedPod:
    """A pod on the virtual node: its home name, where it runs, and its containers' start times."""

    namespace: str
    name: str
    twin: str
    remote: str
    started: Mapping[str, float] = field(default_factory=dict)  # container -> unix seconds


@dataclass(frozen=True)
class ContainerUsage:
    cpu_cores: float  # a rate, as metrics.k8s.io gives it
    memory_bytes: int


# remote (twin namespace, pod name) -> container -> usage
ForeignUsage = Mapping[tuple[str, str], Mapping[str, ContainerUsage]]

HELP = {
    "container_cpu_usage_seconds_total": ("counter", "Cumulative cpu time consumed by the container in core-seconds"),
    "container_memory_working_set_bytes": ("gauge", "Current working set of the container in bytes"),
    "container_start_time_seconds": ("gauge", "Start time of the container since unix epoch in seconds"),
    "pod_cpu_usage_seconds_total": ("counter", "Cumulative cpu time consumed by the pod in core-seconds"),
    "pod_memory_working_set_bytes": ("gauge", "Current working set of the pod in bytes"),
    "node_cpu_usage_seconds_total": ("counter", "Cumulative cpu time consumed by the node in core-seconds"),
    "node_memory_working_set_bytes": ("gauge", "Current working set of the node in bytes"),
    "scrape_error": ("gauge", "1 if there was an error while getting container metrics, 0 otherwise"),
}


def quantity(text: str) -> float:
    """A Kubernetes quantity as a number (metrics.k8s.io writes cpu in nanocores, "250000000n")."""
    return float(parse_quantity(text) or 0)


def usage_from_pod_metrics(twin: str, listing: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, ContainerUsage]]:
    """A metrics.k8s.io PodMetricsList of one twin namespace, by remote pod and container."""
    found: dict[tuple[str, str], dict[str, ContainerUsage]] = {}
    for item in listing.get("items") or []:
        name = (item.get("metadata") or {}).get("name")
        if not name:
            continue
        containers = found.setdefault((twin, name), {})
        for container in item.get("containers") or []:
            usage = container.get("usage") or {}
            containers[container["name"]] = ContainerUsage(
                quantity(usage.get("cpu", "0")), int(quantity(usage.get("memory", "0")))
            )
    return found


def _labels(**labels: str) -> str:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{key}="{escape(value)}"' for key, value in labels.items()) + "}" if labels else ""


class ResourceMetrics:
    """Cumulative CPU counters per container, kept between scrapes; `render` answers one scrape."""

    def __init__(self) -> None:
        # (home namespace, pod, container) -> (time of the last answer, cumulative core-seconds)
        self._cpu: dict[tuple[str, str, str], tuple[float, float]] = {}

    def render(
        self, pods: Iterable[OffloadedPod], usage: ForeignUsage, *, error: bool, now: float | None = None
    ) -> str:
        """Prometheus text (version 0.0.4), the kubelet's names and labels, home pod names."""
        now = time.time() if now is None else now
        stamp = f" {int(now * 1000)}"
        series: dict[str, list[str]] = {name: [] for name in HELP}
        node_cpu, node_memory = 0.0, 0
        seen = set()
        for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
            containers = usage.get((pod.twin, pod.remote))
            if not containers:
                continue  # not measured yet in the foreign cluster (a pod appears there after a scrape or two)
            pod_cpu, pod_memory = 0.0, 0
            for container, measured in sorted(containers.items()):
                key = (pod.namespace, pod.name, container)
                seen.add(key)
                started = pod.started.get(container)
                last = self._cpu.get(key)
                if last is None:
                    cumulative = measured.cpu_cores * max(0.0, now - started) if started else 0.0
                else:
                    cumulative = last[1] + measured.cpu_cores * max(0.0, now - last[0])
                self._cpu[key] = (now, cumulative)
                labels = _labels(container=container, namespace=pod.namespace, pod=pod.name)
                series["container_cpu_usage_seconds_total"].append(f"{labels} {cumulative:.9f}{stamp}")
                series["container_memory_working_set_bytes"].append(f"{labels} {measured.memory_bytes}{stamp}")
                if started:
                    series["container_start_time_seconds"].append(f"{labels} {started:.9f}{stamp}")
                pod_cpu += cumulative
                pod_memory += measured.memory_bytes
            labels = _labels(namespace=pod.namespace, pod=pod.name)
            series["pod_cpu_usage_seconds_total"].append(f"{labels} {pod_cpu:.9f}{stamp}")
            series["pod_memory_working_set_bytes"].append(f"{labels} {pod_memory}{stamp}")
            node_cpu += pod_cpu
            node_memory += pod_memory
        for gone in set(self._cpu) - seen:
            del self._cpu[gone]
        series["node_cpu_usage_seconds_total"].append(f" {node_cpu:.9f}{stamp}")
        series["node_memory_working_set_bytes"].append(f" {node_memory}{stamp}")
        series["scrape_error"].append(f" {1 if error else 0}")
        lines = []
        for name, samples in series.items():
            if not samples:
                continue
            kind, text = HELP[name]
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            lines += [f"{name}{sample}" for sample in samples]
        return "\n".join(lines) + "\n"
