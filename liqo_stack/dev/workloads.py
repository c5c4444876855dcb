"""Example workloads for the dev clusters, and waiting for them to run."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod, Service


def example_deployment(name: str, namespace: str, replicas: int) -> Deployment:
    labels = {"app": name}
    return cast(
        Deployment,
        Deployment.from_dict(
            {
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "containers": [
                                {
                                    "name": "web",
                                    "image": "nginx:1.27",
                                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                                }
                            ]
                        },
                    },
                },
            }
        ),
    )


def apply_deployment(client: Client, deployment: Deployment) -> None:
    assert deployment.metadata is not None and deployment.metadata.namespace
    client.apply(Namespace(metadata=ObjectMeta(name=deployment.metadata.namespace)), force=True)
    client.apply(deployment, force=True)


def pods_summary(pods: list[Pod], count: int) -> str:
    """`2/4 Running (1 Pending, 1 unscheduled)`: what a wait for `count` Running pods sees now."""
    phases: dict[str, int] = {}
    for pod in pods:
        phase = (pod.status.phase if pod.status else None) or "Unknown"
        if phase == "Pending" and pod.spec and not pod.spec.nodeName:
            phase = "unscheduled"
        phases[phase] = phases.get(phase, 0) + 1
    running = phases.pop("Running", 0)
    others = ", ".join(f"{n} {phase}" for phase, n in sorted(phases.items()))
    return f"{running}/{count} Running" + (f" ({others})" if others else "")


def wait_pods_running(
    client: Client,
    namespace: str,
    selector: dict[str, str],
    count: int,
    timeout: float,
    report: Callable[[str], None] | None = None,
) -> list[Pod]:
    """Block until `count` pods matching `selector` are Running; raise TimeoutError with what was seen.

    `report` gets the summary each time it changes (e.g. `3/4 Running (1 Pending)`)."""
    deadline = time.monotonic() + timeout
    pods: list[Pod] = []
    said = ""
    while time.monotonic() < deadline:
        pods = list(client.list(Pod, namespace=namespace, labels=selector))  # type: ignore[arg-type]
        running = [p for p in pods if p.status and p.status.phase == "Running"]
        summary = pods_summary(pods, count)
        if report and summary != said:
            report(summary)
            said = summary
        if len(running) >= count:
            return running
        time.sleep(0.5)
    phases = sorted((p.metadata.name if p.metadata else "?", p.status.phase if p.status else None) for p in pods)
    raise TimeoutError(f"{count} pods in {namespace} not Running after {timeout:.0f}s; seen: {phases}")


def example_config_and_service(name: str, namespace: str) -> list[Any]:
    """What the example app uses: its settings (a ConfigMap) and the Service in front of its pods,
    both reflected into the twins of an offloaded namespace."""
    config = ConfigMap.from_dict(
        {"metadata": {"name": f"{name}-settings", "namespace": namespace}, "data": {"GREETING": "hello from home"}}
    )
    service = Service.from_dict(
        {
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
            "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 80}]},
        }
    )
    return [config, service]
