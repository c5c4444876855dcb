"""metrics-server for a dev cluster: the resource metrics API (metrics.k8s.io) behind `kubectl top`.

It runs as a local process beside the cluster's control plane (its command line points into the
cluster's kwok folder, so `liqo-stack dev down` stops it with the rest) and is registered through
an APIService. The aggregator reaches it through a Service of type ExternalName `localhost`: an
Endpoints object may not hold a loopback address, but the API server resolves an ExternalName
Service to that host (k8s.io/apiserver/pkg/util/proxy ResolveCluster), as kwokctl does for its own
metrics-server. The API server forwards with its --proxy-client-cert-file (kwokctl's admin
certificate, signed by the cluster CA), which metrics-server authenticates as a client certificate.

It scrapes every Node's kubelet port (kwok's fake nodes at the path their
`metrics.k8s.io/resource-metrics-path` annotation names; a virtual node's kubelet API at
`/metrics/resource`) as the cluster's admin client certificate, and verifies the kubelets' serving
certificates against the cluster CA (kwok's nodes have only the Hostname `localhost` and kwok
serves with kwokctl's admin certificate, valid for it; the virtual kubelets have an InternalIP and a
certificate the cluster's signer issued for it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from lightkube import ApiError, Client
from lightkube.generic_resource import create_global_resource
from lightkube.resources.core_v1 import Service

from liqo_stack.dev import ports
from liqo_stack.dev.components import component_env

NAME = "metrics-server"
NAMESPACE = "kube-system"
API_VERSION = "v1beta1"
APISERVICE_NAME = f"{API_VERSION}.metrics.k8s.io"
# the shortest resolution metrics-server accepts: `kubectl top` answers ~20s after a pod starts
METRIC_RESOLUTION = "10s"
KUBELET_TIMEOUT = "5s"  # below 90% of the resolution, as metrics-server requires

APIService = create_global_resource("apiregistration.k8s.io", "v1", "APIService", "apiservices")


def command(binary: Path, kubeconfig: Path, pki: Path, port: int) -> list[str]:
    return [
        str(binary),
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--tls-cert-file={pki / 'admin.crt'}",
        f"--tls-private-key-file={pki / 'admin.key'}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",  # kwok's nodes have only a Hostname: localhost
        "--kubelet-use-node-status-port",
        f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        f"--kubelet-client-certificate={pki / 'admin.crt'}",
        f"--kubelet-client-key={pki / 'admin.key'}",
        f"--metric-resolution={METRIC_RESOLUTION}",
        f"--kubelet-request-timeout={KUBELET_TIMEOUT}",
    ]


def manifests(port: int) -> list[dict[str, Any]]:
    """The Service the aggregator resolves to localhost:`port`, and the APIService that uses it."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"name": "https", "port": port}]},
    }
    apiservice = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": APISERVICE_NAME},
        "spec": {
            "group": "metrics.k8s.io",
            "version": API_VERSION,
            "service": {"name": NAME, "namespace": NAMESPACE, "port": port},
            # metrics-server serves a certificate for 127.0.0.1/localhost, and the aggregator checks
            # the name <service>.<namespace>.svc: as upstream's manifest, the link is not verified
            # (it never leaves the loopback interface)
            "insecureSkipTLSVerify": True,
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }
    return [service, apiservice]


class MetricsServer:
    """One cluster's metrics-server process: its pid, port and log live in the cluster's kwok folder."""

    def __init__(self, binary: Path, cluster_dir: Path, kubeconfig: Path, pki: Path) -> None:
        self.binary, self.cluster_dir, self.kubeconfig, self.pki = binary, cluster_dir, kubeconfig, pki

    @property
    def pid_file(self) -> Path:
        return self.cluster_dir / "pids" / f"{NAME}.pid"

    @property
    def log(self) -> Path:
        return self.cluster_dir / "logs" / f"{NAME}.log"

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
            alive = str(self.binary).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()  # not a reused pid
        except (OSError, ValueError):
            return None
        return pid if alive else None

    def ensure(self, client: Client) -> int:
        """Running and registered (again, after a restart of the cluster): return its port."""
        port = self._port_if_running()
        if port is None:
            port = ports.any_free()
            self.log.parent.mkdir(parents=True, exist_ok=True)
            self.pid_file.parent.mkdir(parents=True, exist_ok=True)
            with self.log.open("ab") as log:
                process = subprocess.Popen(
                    command(self.binary, self.kubeconfig, self.pki, port),
                    cwd=self.cluster_dir,  # it writes nothing there: its certificates are given
                    env=component_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            self.pid_file.write_text(str(process.pid))
        for manifest in manifests(port):
            if manifest["kind"] == "Service":
                client.apply(cast(Service, Service.from_dict(manifest)), force=True)
            else:
                client.apply(APIService.from_dict(manifest), force=True)
        return port

    def remove(self, client: Client) -> None:
        """Unregistered, then stopped: an APIService left without its server would fail every client's
        discovery of metrics.k8s.io (kubectl's "couldn't get resource list")."""
        deletes: list[Callable[[], None]] = [
            lambda: client.delete(APIService, APISERVICE_NAME),
            lambda: client.delete(Service, NAME, namespace=NAMESPACE),
        ]
        for delete in deletes:
            try:
                delete()
            except ApiError as err:
                if err.status.code != 404:  # not registered: nothing to take back
                    raise
        self.stop()

    def _port_if_running(self) -> int | None:
        pid = self.pid()
        if pid is None:
            return None
        with contextlib.suppress(OSError):
            for arg in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                if arg.startswith(b"--secure-port="):
                    return int(arg.split(b"=", 1)[1])
        return None

    def stop(self, timeout: float = 10) -> None:
        pid = self.pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.pid() is not None and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
