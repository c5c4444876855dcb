"""What the e2e tests share: the runtime as local processes, and waiting on offloadings."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from liqo_stack.dev.clusters import DevEnvironment
from runtime.api import names
from runtime.kube.resources import NamespaceOffloadingResource


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(condition: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"{what} not met after {timeout:.0f}s")


class Runtime:
    """The controller-manager and one foreign agent per foreign cluster, as local processes."""

    def __init__(self, dev_env: DevEnvironment, foreign_ids: list[str], logs: Path, webhook_port: int) -> None:
        self.dev_env = dev_env
        self.webhook_port = webhook_port
        self.foreign_ids = foreign_ids
        self.logs = logs
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, which: str) -> None:
        """`controller-manager`, `agent-<foreign id>` or `kubelet-<foreign id>`."""
        if which == "controller-manager":
            args = ["controller-manager", "--kubeconfig", str(self.dev_env.kubeconfig("home")), "--home-cluster-id"]
            args += ["home", "--webhook-port", str(self.webhook_port)]
        elif which.startswith("agent-"):
            cluster_id = which.removeprefix("agent-")
            args = ["foreign-agent", "--kubeconfig", str(self.dev_env.kubeconfig(cluster_id)), "--cluster-id"]
            args += [cluster_id]
        else:
            cluster_id = which.removeprefix("kubelet-")
            args = ["virtual-kubelet", "--kubeconfig", str(self.dev_env.kubeconfig("home")), "--home-cluster-id"]
            args += ["home", "--foreign-cluster-id", cluster_id]
        log = (self.logs / f"{which}.log").open("ab")
        self.processes[which] = subprocess.Popen([sys.executable, "-m", "runtime", *args], stdout=log, stderr=log)

    def start_all(self) -> None:
        self.start("controller-manager")
        for cluster_id in self.foreign_ids:
            self.start(f"agent-{cluster_id}")
            self.start(f"kubelet-{cluster_id}")

    def kill(self, which: str) -> None:
        process = self.processes.pop(which)
        process.kill()
        process.wait()

    def stop_all(self) -> None:
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            process.wait(timeout=20)
        self.processes.clear()


def offload(home: Client, namespace: str, spec: dict[str, Any]) -> None:
    home.create(Namespace(metadata=ObjectMeta(name=namespace)))
    home.create(
        NamespaceOffloadingResource.from_dict(
            {"metadata": {"name": names.NAMESPACE_OFFLOADING_NAME, "namespace": namespace}, "spec": spec}
        )
    )


def status_of(home: Client, namespace: str) -> dict[str, Any]:
    found = home.get(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=namespace)
    return dict(found.get("status") or {})


def wait_phase(home: Client, namespace: str, phase: str, timeout: float = 40) -> dict[str, Any]:
    return dict(
        wait_until(
            lambda: (s := status_of(home, namespace)).get("offloadingPhase") == phase and s,
            timeout,
            f"{namespace} offloadingPhase {phase} (now {status_of(home, namespace).get('offloadingPhase')})",
        )
    )


def exists(client: Client, namespace: str) -> bool:
    try:
        found = client.get(Namespace, namespace)
    except ApiError as err:
        if err.status.code == 404:
            return False
        raise
    return found.metadata is None or found.metadata.deletionTimestamp is None


def twin_gone(client: Client, namespace: str) -> Callable[[], bool]:
    return lambda: not exists(client, namespace)


def unoffload(home: Client, namespace: str) -> None:
    home.delete(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=namespace)
    wait_until(
        lambda: (
            not any(
                o.metadata.name == names.NAMESPACE_OFFLOADING_NAME
                for o in home.list(NamespaceOffloadingResource, namespace=namespace)
            )
        ),
        60,
        f"{namespace} unoffloaded",
    )
