"""Local dev clusters: one home and N foreign clusters, each a real control plane on loopback.

Each cluster is launched by `kwokctl --runtime binary` from the pinned binaries in the cache
(etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok). kwok simulates kubelets for
the fake nodes we register with its annotation only, so Nodes that our runtime registers (the
virtual nodes) are never touched by it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import ipaddress
import math
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import yaml
from lightkube import ApiError, Client, KubeConfig
from lightkube.generic_resource import create_global_resource
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from liqo_stack.dev import paths, ports
from liqo_stack.dev.components import component_env
from liqo_stack.dev.links import LinkNetwork, upstream_of
from liqo_stack.dev.metricsserver import MetricsServer
from liqo_stack.dev.progress import Heartbeat
from runtime.api import format_duration

HOME_CLUSTER_ID = "home"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"  # kwokctl's kwok-controller manages only Nodes with this = "fake"
CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")  # what etcd and kwok outlive
CONTROLLERS = ("kube-controller-manager", "kube-scheduler")  # the control plane but its API server
# kube-controller-manager gives its API server 10 s to turn healthy, then exits for good
# (WaitForAPIServer in its CreateControllerContext, which begins a moment after its start): one still
# running this long after its start has passed that check.
CONTROLLER_MANAGER_GIVES_UP_AFTER = 12.0
REQUIRED_BINARIES = (
    "kwokctl", "kwok", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "metrics-server"
)  # fmt: skip
# kwok serves its fake nodes' resource metrics at this path (the Metric below); metrics-server reads
# a node's path from this annotation
RESOURCE_METRICS_PATH_ANNOTATION = "metrics.k8s.io/resource-metrics-path"
KWOK_RESOURCE_METRICS_PATH = "/metrics/nodes/{nodeName}/metrics/resource"
# a fake pod's usage: these annotations (a quantity each), else 1m of cpu and 1Mi of memory per container
USAGE_CPU_ANNOTATION = "kwok.x-k8s.io/usage-cpu"
USAGE_MEMORY_ANNOTATION = "kwok.x-k8s.io/usage-memory"
KWOK_USAGE_KINDS = {"ClusterResourceUsage": "clusterresourceusages", "Metric": "metrics"}  # kind -> plural
# every port kwokctl's binary runtime would otherwise pick itself (its Options)
KWOKCTL_PORT_OPTIONS = (
    "etcdPort", "etcdPeerPort", "kubeApiserverPort", "kubeControllerManagerPort", "kubeSchedulerPort",
    "kwokControllerPort",
)  # fmt: skip

Progress = Callable[[str], None]


def kwokctl_config(
    pod_cidr: str,
    service_cidr: str,
    pki_dir: Path | None = None,
    pod_logs: Path | None = None,
    component_ports: Mapping[str, int] | None = None,
) -> list[dict[str, object]]:
    """kwokctl's binary runtime binds every component to 0.0.0.0 and lets kwok manage *all* Nodes;
    we serve on loopback only, and kwok must leave the virtual nodes to our runtime. Each cluster
    gets its own service range (the API server's default, 10.0.0.0/24, is every cluster's) and pod
    range (kwok's fallback when a Node has no podCIDR).

    With `pki_dir` (the cluster's, where kwokctl writes its CA and admin certificate) the API server
    presents a client certificate to kubelets, as a real one does (a virtual kubelet authenticates
    it against the cluster's client CA), and verifies theirs: the controller-manager signs
    kubelet-serving certificates with the cluster CA. With `pod_logs` (a folder) kwok serves the kubelet
    debugging API of its fake pods: logs replayed (and followed) from files there, exec running a
    real local shell, attach, and port-forward to a `cat` (an echo). `component_ports` (the options named
    in KWOKCTL_PORT_OPTIONS) are the ports its components listen on, handed out by liqo_stack.dev.ports
    rather than picked by kwokctl."""
    extra_args = component_args()
    extra_args["kube-apiserver"] = [{"key": "service-cluster-ip-range", "value": service_cidr}]
    if pki_dir is not None:
        extra_args["kube-apiserver"] += [
            {"key": "kubelet-client-certificate", "value": str(pki_dir / "admin.crt")},
            {"key": "kubelet-client-key", "value": str(pki_dir / "admin.key")},
            # kubelets' serving certificates are verified: kwok's is signed by the cluster CA, the
            # virtual kubelets' by the controller-manager below
            {"key": "kubelet-certificate-authority", "value": str(pki_dir / "ca.crt")},
        ]
        extra_args["kube-controller-manager"] += [
            {"key": "cluster-signing-cert-file", "value": str(pki_dir / "ca.crt")},
            {"key": "cluster-signing-key-file", "value": str(pki_dir / "ca.key")},
        ]
    extra_args["kwok-controller"] = [
        {"key": "manage-all-nodes", "value": "false", "override": True},
        {"key": "manage-nodes-with-annotation-selector", "value": f"{KWOK_NODE_ANNOTATION}=fake"},
        {"key": "cidr", "value": pod_cidr},
    ]
    config: list[dict[str, object]] = [
        {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokctlConfiguration",
            "options": {"bindAddress": "127.0.0.1", "enableCRDs": list(KWOK_USAGE_KINDS), **(component_ports or {})},
            "componentsPatches": [{"name": name, "extraArgs": args} for name, args in extra_args.items()],
        }
    ]
    config.append(kwok_configuration())
    if pod_logs is not None:
        config += kwok_debugging(pod_logs)
    return config


def component_args() -> dict[str, list[dict[str, object]]]:
    """A dev cluster runs one of each component on one throwaway machine: the scheduler and the
    controller-manager need no leader election (each renewed a Lease every 2 s, most of an idle API
    server's requests), and etcd no fsync (its data goes with the cluster; a crash of the machine may
    lose it). Three idle clusters used 6.7-6.9 CPU-seconds a minute so, 7.5-7.8 with kwokctl's defaults.
    The node lifecycle controller looks at the Nodes as often as Kubernetes' does (NODE_MONITOR_PERIOD)."""
    no_election: dict[str, object] = {"key": "leader-elect", "value": "false"}
    return {
        "etcd": [{"key": "unsafe-no-fsync", "value": "true"}],
        "kube-scheduler": [no_election],
        "kube-controller-manager": [no_election, NODE_MONITOR_PERIOD],
    }


# How often the node lifecycle controller reads the Nodes' Ready conditions and sets or lifts their
# not-ready and unreachable taints: Kubernetes' default, where kwokctl's (25 s, its heartbeat factor 5)
# left a virtual node Ready again tainted for up to 25 s (no pod scheduled to it meanwhile), and one
# gone NotReady untainted as long (its pods' tolerationSeconds counted from then).
NODE_MONITOR_PERIOD: dict[str, object] = {"key": "node-monitor-period", "value": "5s", "override": True}


# Status patches kwok's fake kubelets keep in flight, for all fake nodes together (kwok's default: 4).
# A kubelet works on each of its pods apart, on its own machine; with 4 in flight, a pod reached
# Running only once 4 patches ahead of it came back from an API server busy with other work, so a
# burst of 1,000 offloaded pods waited 6.2 s p50 from binding to Running in the foreign cluster
# against 0.01 s direct, at the same kwok CPU per pod; with 16, 0.16 s (tests/bench/bench_offloading).
KWOK_POD_STATUS_PARALLELISM = 16


def kwok_configuration() -> dict[str, object]:
    """kwok's own options. kwok defaults none of them once a KwokConfiguration is given, so its
    defaults (v0.8.0) are restated, the debugging handlers that serve logs and exec among them."""
    options = {
        "podPlayStageParallelism": KWOK_POD_STATUS_PARALLELISM,
        "nodePlayStageParallelism": 4,
        "nodeLeaseParallelism": 4,
        "podsOnNodeSyncParallelism": 1,
        "enableDebuggingHandlers": True,
        "enableProfilingHandler": True,
        "enableContentionProfiling": False,
        "enablePodsOnNodeSyncListPager": True,
        "enablePodsOnNodeSyncStreamWatch": False,
    }
    return {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration", "options": options}


POD_LOG = "current.log"  # what every fake container logs (CRI format), appended to by tests
PREVIOUS_POD_LOG = "previous.log"  # what `kubectl logs --previous` shows


def cri_log_line(message: str, stream: str = "stdout") -> str:
    """One line in the CRI log format kwok (as the kubelet) reads container logs in."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{stamp} {stream} F {message}\n"


def kwok_debugging(pod_logs: Path) -> list[dict[str, object]]:
    """kwok's ClusterLogs, ClusterExec, ClusterAttach and ClusterPortForward for every fake pod."""
    meta = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "metadata": {"name": "liqo-stack-dev"}}
    logs, previous = str(pod_logs / POD_LOG), str(pod_logs / PREVIOUS_POD_LOG)
    return [
        {**meta, "kind": "ClusterLogs", "spec": {"logs": [{"logsFile": logs, "previousLogsFile": previous}]}},
        {**meta, "kind": "ClusterExec", "spec": {"execs": [{"local": {"workDir": str(pod_logs)}}]}},
        {**meta, "kind": "ClusterAttach", "spec": {"attaches": [{"logsFile": logs}]}},
        {**meta, "kind": "ClusterPortForward", "spec": {"forwards": [{"command": ["cat"]}]}},
    ]


def kwok_usage() -> list[dict[str, object]]:
    """kwok's resource usage of every fake pod (ClusterResourceUsage, from its annotations) served
    as the kubelet's resource metrics (Metric) for metrics-server. Created as objects (kwokctl's
    `enableCRDs`): kwokctl passes these kinds from its --config only to a metrics-server it runs
    itself, and ours runs beside it (liqo_stack/dev/metricsserver.py)."""
    meta = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "metadata": {"name": "liqo-stack-dev"}}
    return [
        {**meta, "kind": "ClusterResourceUsage", "spec": {"usages": [{"usage": KWOK_USAGE}]}},
        {**meta, "kind": "Metric", "spec": {"path": KWOK_RESOURCE_METRICS_PATH, "metrics": KWOK_RESOURCE_METRICS}},
    ]


def _usage(annotation: str, default: str) -> dict[str, str]:
    """A CEL expression of kwok: the annotation's quantity, else the default."""
    expression = f'"{annotation}" in pod.metadata.annotations ? Quantity(pod.metadata.annotations["{annotation}"])'
    return {"expression": f'{expression} : Quantity("{default}")'}


KWOK_USAGE = {"cpu": _usage(USAGE_CPU_ANNOTATION, "1m"), "memory": _usage(USAGE_MEMORY_ANNOTATION, "1Mi")}


def _metric(name: str, dimension: str, kind: str, value: str) -> dict[str, object]:
    """One series of the kubelet's /metrics/resource as kwok computes it (kwok's own metrics-resource.yaml)."""
    metric: dict[str, object] = {"name": name, "dimension": dimension, "kind": kind, "help": name, "value": value}
    if dimension == "container":
        metric["labels"] = [
            {"name": "container", "value": "container.name"},
            {"name": "namespace", "value": "pod.metadata.namespace"},
            {"name": "pod", "value": "pod.metadata.name"},
        ]
    return metric


KWOK_RESOURCE_METRICS = [
    _metric("container_start_time_seconds", "container", "gauge", "pod.SinceSecond()"),
    _metric("container_cpu_usage_seconds_total", "container", "counter", 'pod.CumulativeUsage("cpu", container.name)'),
    _metric("container_memory_working_set_bytes", "container", "gauge", 'pod.Usage("memory", container.name)'),
    _metric("node_cpu_usage_seconds_total", "node", "counter", 'node.CumulativeUsage("cpu")'),
    _metric("node_memory_working_set_bytes", "node", "gauge", 'node.Usage("memory")'),
]


def write_pod_logs(pod_logs: Path, cluster_id: str) -> None:
    """The files kwok replays as container logs, unless already there (tests append to them)."""
    pod_logs.mkdir(parents=True, exist_ok=True)
    for name, text in ((POD_LOG, "running"), (PREVIOUS_POD_LOG, "before the restart")):
        path = pod_logs / name
        if not path.exists():
            path.write_text(cri_log_line(f"a container of {cluster_id}, {text}"))


class DevEnvironmentError(RuntimeError):
    """A dev-environment step failed; the message says what to do next."""


class ApiServerExitedError(DevEnvironmentError):
    """A cluster's API server, just started (a new cluster or a stopped one), exited before it served."""


def foreign_cluster_id(index: int) -> str:
    return f"foreign-{index}"


def home_cluster_id(index: int) -> str:
    """The first home is `home`; further ones (two homes on one foreign cluster) `home-2`, `home-3`..."""
    return HOME_CLUSTER_ID if index == 1 else f"{HOME_CLUSTER_ID}-{index}"


def env_name(cluster_id: str) -> str:
    """KUBECONFIG_<ID>: upper-cased, dashes as underscores (foreign-1 -> KUBECONFIG_FOREIGN_1)."""
    return "KUBECONFIG_" + cluster_id.upper().replace("-", "_")


@dataclass(frozen=True)
class NodeShape:
    """Capacity of one fake node; realistic defaults for a mid-size worker."""

    cpu: str = "16"
    memory: str = "64Gi"
    pods: int = 110
    gpus: int = 0

    def capacity(self) -> dict[str, str]:
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods), "ephemeral-storage": "200Gi"}
        if self.gpus:
            capacity["nvidia.com/gpu"] = str(self.gpus)
        return capacity


def default_pod_cidr(index: int) -> str:
    """Cluster `index` (home 0, foreign-N N): pods in 10.100.0.0/16, 10.101.0.0/16, ..."""
    return f"10.{100 + index}.0.0/16"


def default_service_cidr(index: int) -> str:
    """Cluster `index`: services in 10.200.0.0/16, 10.201.0.0/16, ..."""
    return f"10.{200 + index}.0.0/16"


@dataclass(frozen=True)
class ClusterLayout:
    foreign: int = 2
    nodes_per_cluster: int = 2
    homes: int = 1  # further homes come after the foreign clusters: their ranges stay as with one home
    node: NodeShape = field(default_factory=NodeShape)
    # per cluster id, instead of the defaults: each cluster its own ranges, like real ones
    pod_cidrs: Mapping[str, str] = field(default_factory=dict)
    service_cidrs: Mapping[str, str] = field(default_factory=dict)
    # each cluster's metrics-server (`kubectl top`); without it, `DevEnvironment.metrics_server(id).ensure`
    # starts one when needed (the test sessions' clusters: it scrapes every node each 10 s, for two modules)
    metrics_servers: bool = True

    def cluster_ids(self) -> list[str]:
        foreigns = [foreign_cluster_id(i) for i in range(1, self.foreign + 1)]
        return [HOME_CLUSTER_ID, *foreigns, *(home_cluster_id(i) for i in range(2, self.homes + 1))]

    def home_ids(self) -> list[str]:
        return [home_cluster_id(i) for i in range(1, self.homes + 1)]

    def pod_cidr(self, cluster_id: str) -> str:
        return self.pod_cidrs.get(cluster_id) or default_pod_cidr(self.cluster_ids().index(cluster_id))

    def service_cidr(self, cluster_id: str) -> str:
        return self.service_cidrs.get(cluster_id) or default_service_cidr(self.cluster_ids().index(cluster_id))


def node_pod_cidr(cluster_pod_cidr: str, index: int, pods: int) -> str:
    """The block of the cluster's pod range that node `index` hands out (kwok takes a Node's
    spec.podCIDR): room for `pods` addresses, at least a /24 (a /120 for IPv6)."""
    network = ipaddress.ip_network(cluster_pod_cidr)
    host_bits = max(8, math.ceil(math.log2(pods + 2)))
    prefix = network.max_prefixlen - host_bits
    if prefix < network.prefixlen:
        raise DevEnvironmentError(f"pod range {network} is too small for {pods} pods per node")
    blocks = network.subnets(new_prefix=prefix)
    for _ in range(index):
        next(blocks, None)
    block = next(blocks, None)
    if block is None:
        raise DevEnvironmentError(f"pod range {network} has no block of /{prefix} left for node {index}")
    return str(block)


def fake_node_manifest(cluster_id: str, index: int, shape: NodeShape, pod_cidr: str | None = None) -> dict[str, object]:
    name = f"{cluster_id}-worker-{index}"
    capacity = shape.capacity()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                KWOK_NODE_ANNOTATION: "fake",
                "node.alpha.kubernetes.io/ttl": "0",
                RESOURCE_METRICS_PATH_ANNOTATION: KWOK_RESOURCE_METRICS_PATH.replace("{nodeName}", name),
            },
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "topology.kubernetes.io/zone": f"{cluster_id}-zone-{index % 2}",
            },
        },
        **({"spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]}} if pod_cidr else {}),
        "status": {"capacity": capacity, "allocatable": capacity},
    }


class DevEnvironment:
    """The dev clusters under one state directory; every method is safe to call repeatedly."""

    def __init__(
        self, state_dir: Path | None = None, bin_dir: Path | None = None, audit_policy: Path | None = None
    ) -> None:
        """`audit_policy`: clusters created from now on log API requests by it (see `audit_log`)."""
        self.state_dir = state_dir or paths.state_root()
        self.bin_dir = bin_dir or paths.bin_dir()
        self.audit_policy = audit_policy

    # -- locations -------------------------------------------------------------------------
    @property
    def kwok_workdir(self) -> Path:
        return self.state_dir / "kwok"

    @property
    def kubeconfig_dir(self) -> Path:
        return self.state_dir / "kubeconfigs"

    @property
    def merged_kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    def audit_log(self, cluster_id: str) -> Path:
        """Where the API server writes its audit events (only with an `audit_policy`)."""
        return self.kwok_workdir / "clusters" / cluster_id / "logs" / "audit.log"

    def kubeconfig(self, cluster_id: str) -> Path:
        return self.kubeconfig_dir / f"{cluster_id}.yaml"

    @property
    def links(self) -> LinkNetwork:
        """The links from the home's runtime to the foreign API servers (liqo_stack/dev/links.py)."""
        return LinkNetwork(self.state_dir / "links", self.bin_dir)

    def api_server_address(self, cluster_id: str) -> str:
        """`host:port` of the cluster's API server, as its kubeconfig names it."""
        raw = yaml.safe_load(self.kubeconfig(cluster_id).read_text())
        return upstream_of(str(raw["clusters"][0]["cluster"]["server"]))

    def start_links(self, profile: str | None = None, foreign_ids: list[str] | None = None) -> dict[str, str]:
        """A proxy in front of each foreign cluster's API server (default: every running cluster
        named foreign-N), with `profile` on each (None: the one set last, else `none`). Returns where
        each is reached: cluster id -> `127.0.0.1:port`, the stack's `apiServerAddress`."""
        if foreign_ids is None:
            foreign_ids = [c for c in self.existing_clusters() if c.startswith("foreign-")]
        upstreams = {cluster_id: self.api_server_address(cluster_id) for cluster_id in foreign_ids}
        with ports.locked():  # the proxies' ports, picked free, are bound before a cluster can pick them
            return self.links.up(upstreams, profile)

    def client(self, cluster_id: str, **kwargs: object) -> Client:
        return Client(KubeConfig.from_file(self.kubeconfig(cluster_id)), field_manager="liqo-stack-dev", **kwargs)  # type: ignore[arg-type]

    # -- kwokctl ---------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = component_env()
        env["KWOK_WORKDIR"] = str(self.kwok_workdir)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def _kwokctl(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 300,
        stop_early: Callable[[], DevEnvironmentError | None] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run kwokctl. `stop_early`, asked every second while it runs, may give the error to raise instead
        of waiting on, when waiting cannot help. kwokctl is killed on every way out but its own end."""
        cmd = [str(self.bin_dir / "kwokctl"), *args]
        deadline = time.monotonic() + timeout
        with subprocess.Popen(cmd, env=self._env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
            try:
                while True:
                    try:  # asked again after a timeout, communicate loses no output
                        stdout, stderr = proc.communicate(timeout=min(1.0, max(0.01, deadline - time.monotonic())))
                        break
                    except subprocess.TimeoutExpired:
                        error = stop_early() if stop_early is not None else None
                        if error is not None:
                            raise error from None
                        if time.monotonic() >= deadline:
                            raise DevEnvironmentError(
                                f"`kwokctl {' '.join(args[:3])} ...` did not finish in {format_duration(timeout)}. "
                                f"The components' logs are in {self.kwok_workdir}/clusters/*/logs; "
                                "`liqo-stack dev down` resets the clusters."
                            ) from None
            except BaseException:  # also Ctrl-C: kwokctl does not run on unseen
                proc.kill()
                proc.wait()  # not communicate(): a child of kwokctl may hold its pipes open
                raise
        if check and proc.returncode != 0:
            raise DevEnvironmentError(
                f"`kwokctl {' '.join(args)}` failed:\n{(stderr or stdout).strip()[-2000:]}\n"
                f"Logs are under {self.kwok_workdir}/clusters; `liqo-stack dev down` resets the clusters."
            )
        return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)

    def check_binaries(self) -> None:
        missing = [name for name in REQUIRED_BINARIES if not (self.bin_dir / name).exists()]
        if missing:
            raise DevEnvironmentError(
                f"missing binaries in {self.bin_dir}: {', '.join(missing)}. "
                "Build them with `python3 tools/build.py` (cold: about 20 minutes; warm: seconds)."
            )

    def existing_clusters(self) -> list[str]:
        if not (self.bin_dir / "kwokctl").exists() or not self.kwok_workdir.exists():
            return []
        out = self._kwokctl("get", "clusters").stdout
        return [line.strip() for line in out.splitlines() if line.strip()]

    def _is_ready(self, cluster_id: str) -> bool:
        """`/readyz` passes: a restarted API server answers for built-in kinds before it serves its
        custom resources again ("storage is (re)initializing")."""
        http = self.client(cluster_id, timeout=5)._client._client  # lightkube has no raw GET
        try:
            return bool(http.get("/readyz").status_code == 200)
        except Exception:
            return False

    def _serves_every_kind(self, cluster_id: str) -> bool:
        """Every custom resource is served again: after /readyz a restarted API server still answers
        a kind 429 "storage is (re)initializing" until that kind's storage is rebuilt (seconds on a
        loaded machine), which client-go retries and lightkube does not."""
        http = self.client(cluster_id, timeout=5)._client._client
        try:
            found = http.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
            if found.status_code != 200:
                return False
            for crd in found.json().get("items") or []:
                spec = crd["spec"]
                served = [v["name"] for v in spec["versions"] if v.get("served")]
                if served:
                    path = f"/apis/{spec['group']}/{served[0]}/{spec['names']['plural']}"
                    if http.get(path, params={"limit": "1"}).status_code == 429:
                        return False
            return True
        except Exception:
            return False

    def pki_dir(self, cluster_id: str) -> Path:
        """kwokctl's CA and admin certificate of the cluster (the API server's client CA)."""
        return self.kwok_workdir / "clusters" / cluster_id / "pki"

    def metrics_server(self, cluster_id: str) -> MetricsServer:
        """The cluster's metrics-server (`kubectl top`), a process beside its control plane."""
        return MetricsServer(
            self.bin_dir / "metrics-server",
            self.kwok_workdir / "clusters" / cluster_id,
            self.kubeconfig(cluster_id),
            self.pki_dir(cluster_id),
        )

    def pod_logs(self, cluster_id: str) -> Path:
        """The files kwok serves as the logs of the cluster's fake containers (`POD_LOG`, ...)."""
        return self.kwok_workdir / "pod-logs" / cluster_id

    def _write_kwokctl_config(self, cluster_id: str, layout: ClusterLayout) -> Path:
        config = self.state_dir / f"kwokctl-{cluster_id}.yaml"
        write_pod_logs(self.pod_logs(cluster_id), cluster_id)
        docs = kwokctl_config(
            layout.pod_cidr(cluster_id),
            layout.service_cidr(cluster_id),
            pki_dir=self.pki_dir(cluster_id),
            pod_logs=self.pod_logs(cluster_id),
            component_ports=dict(zip(KWOKCTL_PORT_OPTIONS, ports.hand_out(len(KWOKCTL_PORT_OPTIONS)), strict=True)),
        )
        config.write_text(yaml.safe_dump_all(docs))
        return config

    def _create_cluster(self, cluster_id: str, layout: ClusterLayout) -> None:
        b = self.bin_dir
        self._kwokctl(
            "create", "cluster", "--name", cluster_id, "--runtime", "binary",
            "--config", str(self._write_kwokctl_config(cluster_id, layout)),
            "--etcd-binary", str(b / "etcd"),
            "--kube-apiserver-binary", str(b / "kube-apiserver"),
            "--kube-controller-manager-binary", str(b / "kube-controller-manager"),
            "--kube-scheduler-binary", str(b / "kube-scheduler"),
            "--kwok-controller-binary", str(b / "kwok"),
            "--kubeconfig", str(self.state_dir / "kwokctl-kubeconfig"),
            # fits one machine with several clusters: etcd keeps a small backend
            "--etcd-quota-backend-size", "2Gi",
            "--wait", "3m",
            *(["--kube-audit-policy", str(self.audit_policy)] if self.audit_policy else []),
            stop_early=self._api_server_exit(cluster_id, "was created"),
        )  # fmt: skip

    def _api_server_exit(self, cluster_id: str, doing: str) -> Callable[[], ApiServerExitedError | None]:
        """For `_kwokctl(stop_early=...)`: the error once the API server that kwokctl started for the
        cluster has exited (kwokctl would wait two more minutes for it to serve), with its and etcd's last
        words. Its PID file, rewritten by that start, tells it from a stopped cluster's (whose PID may be
        the same number after a reboot)."""
        cluster_dir = self.kwok_workdir / "clusters" / cluster_id
        pid_file = cluster_dir / "pids" / "kube-apiserver.pid"
        before = _written_at(pid_file)

        def exited() -> ApiServerExitedError | None:
            pid = _recorded_pid(cluster_dir, "kube-apiserver")
            if pid is None or _written_at(pid_file) == before or _alive(pid):
                return None
            logs = cluster_dir / "logs"
            return ApiServerExitedError(
                f"{cluster_id}: kube-apiserver exited as the cluster {doing} ("
                + "; ".join(f"{name}: {_last_line(logs / f'{name}.log')}" for name in ("etcd", "kube-apiserver"))
                + f"); the logs are in {logs}. `liqo-stack dev up` tries again; `liqo-stack dev down` resets"
            )

        return exited

    def _write_kubeconfig(self, cluster_id: str) -> None:
        raw = yaml.safe_load(self._kwokctl("get", "kubeconfig", "--name", cluster_id).stdout)
        # Rename cluster, user and context after the cluster id, so contexts read `home`, `foreign-1`.
        raw["clusters"][0]["name"] = cluster_id
        raw["users"][0]["name"] = cluster_id
        raw["contexts"] = [{"name": cluster_id, "context": {"cluster": cluster_id, "user": cluster_id}}]
        raw["current-context"] = cluster_id
        self.kubeconfig_dir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig(cluster_id).write_text(yaml.safe_dump(raw))

    def _write_merged_kubeconfig(self, cluster_ids: list[str]) -> None:
        merged: dict[str, object] = {"apiVersion": "v1", "kind": "Config", "preferences": {}}
        for key in ("clusters", "users", "contexts"):
            merged[key] = [
                entry for cid in cluster_ids for entry in yaml.safe_load(self.kubeconfig(cid).read_text())[key]
            ]
        merged["current-context"] = HOME_CLUSTER_ID
        self.merged_kubeconfig.write_text(yaml.safe_dump(merged))

    def _register_nodes(self, cluster_id: str, layout: ClusterLayout) -> None:
        client = self.client(cluster_id)
        for index in range(layout.nodes_per_cluster):
            pod_cidr = node_pod_cidr(layout.pod_cidr(cluster_id), index, layout.node.pods)
            manifest = fake_node_manifest(cluster_id, index, layout.node, pod_cidr)
            name = manifest["metadata"]["name"]  # type: ignore[index]
            try:
                existing = client.get(Node, name)
            except ApiError as err:
                if err.status.code != 404:
                    raise
                # Created with its status in one request: kwok initializes a Node's status only where
                # it finds none, so a later status write would race with kwok's defaults.
                client.create(cast(Node, Node.from_dict(manifest)))
                continue
            if existing.status is None or existing.status.capacity != manifest["status"]["capacity"]:  # type: ignore[index]
                client.patch(Node.Status, name, {"status": manifest["status"]}, patch_type=PatchType.MERGE)

    def _apply_kwok_usage(self, cluster_id: str) -> None:
        client = self.client(cluster_id)
        for manifest in kwok_usage():
            kind = str(manifest["kind"])
            resource = create_global_resource("kwok.x-k8s.io", "v1alpha1", kind, KWOK_USAGE_KINDS[kind])
            deadline = time.monotonic() + 30  # a CRD just created is served a moment later
            while True:
                try:
                    client.apply(resource.from_dict(manifest), force=True)
                    break
                except ApiError as err:
                    if err.status.code != 404:
                        raise
                    if time.monotonic() < deadline:
                        time.sleep(0.5)
                        continue
                    raise DevEnvironmentError(
                        f"{cluster_id}: kwok's {kind} kind is not served: the cluster predates it; "
                        "`liqo-stack dev down` and `liqo-stack dev up` recreate it"
                    ) from err

    def _wait_nodes_ready(self, cluster_id: str, expected: int, timeout: float = 120) -> None:
        client = self.client(cluster_id)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            nodes = list(client.list(Node))
            ready = [n for n in nodes if _node_ready(n)]
            if len(ready) >= expected:
                return
            time.sleep(0.5)
        raise DevEnvironmentError(f"{cluster_id}: fewer than {expected} Ready nodes after {timeout:.0f}s")

    # -- public verbs ----------------------------------------------------------------------
    def up(self, layout: ClusterLayout, progress: Progress = print) -> list[str]:
        """Start whatever of the layout is not running, the control planes side by side; return the cluster ids."""
        self.check_binaries()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        existing = set(self.existing_clusters())
        ids = layout.cluster_ids()
        progress = _one_line_at_a_time(progress)
        # A control plane's start mostly waits (its API server's start): three take about as long as one.
        # Each has its own ports (liqo_stack.dev.ports) and kwokctl workdir. Only kwokctl runs in the
        # threads: msgspec, under lightkube, crashed the process when two threads decoded a kind at once.
        running = [cluster_id for cluster_id in ids if cluster_id in existing and self._is_ready(cluster_id)]
        for cluster_id in running:
            progress(f"{cluster_id}: already running")
        with concurrent.futures.ThreadPoolExecutor(max(1, len(ids)), thread_name_prefix="control-plane") as pool:
            starts = [
                pool.submit(self._control_plane_up, cluster_id, layout, cluster_id in existing, progress)
                for cluster_id in ids
                if cluster_id not in running
            ]
            for start in starts:
                start.result()  # the first failure, once every start has ended
        for cluster_id in ids:
            self._write_kubeconfig(cluster_id)
            self._register_nodes(cluster_id, layout)
            with Heartbeat(progress, f"{cluster_id}: waiting for {layout.nodes_per_cluster} Ready nodes"):
                self._wait_nodes_ready(cluster_id, layout.nodes_per_cluster)
            self._apply_kwok_usage(cluster_id)
            if layout.metrics_servers:
                port = self.metrics_server(cluster_id).ensure(self.client(cluster_id))
                progress(f"{cluster_id}: metrics-server (kubectl top) on 127.0.0.1:{port}")
            shape = layout.node
            progress(
                f"{cluster_id}: {layout.nodes_per_cluster} nodes Ready ({shape.cpu} cpu, {shape.memory} each); "
                f"pods {layout.pod_cidr(cluster_id)}, services {layout.service_cidr(cluster_id)}"
            )
        for cluster_id in ids:  # last: the older its controller-manager, the less there is to wait
            with Heartbeat(progress, f"{cluster_id}: waiting for its API server to start its controllers"):
                self._start_exited_controllers(cluster_id, progress)
        self._write_merged_kubeconfig([c for c in self.existing_clusters() if self.kubeconfig(c).exists()])
        return ids

    def _control_plane_up(self, cluster_id: str, layout: ClusterLayout, exists: bool, progress: Progress) -> None:
        """Create the cluster, or start it again if stopped (kwokctl only: see `up`)."""
        started = time.monotonic()
        if exists:
            progress(f"{cluster_id}: stopped, starting ...")
            # under the port lock, as before: its ports, handed out long ago, are free until it binds them
            with Heartbeat(progress, f"{cluster_id}: starting the control plane"), ports.locked():
                try:
                    self._kwokctl(
                        "start", "cluster", "--name", cluster_id, "--wait", "3m",
                        stop_early=self._api_server_exit(cluster_id, "started again"),
                    )  # fmt: skip
                except ApiServerExitedError:
                    # its other components stopped too (the data kept): kwokctl would take a silent etcd
                    # still running for a started one, and the next `dev up` would fail the same way.
                    # kwokctl signals them and returns: waited for, as `down` does.
                    self._kwokctl("stop", "cluster", "--name", cluster_id, check=False)
                    self._reap(under=self.kwok_workdir / "clusters" / cluster_id)
                    raise
        else:
            progress(f"{cluster_id}: creating control plane (etcd, apiserver, controllers, scheduler, kwok) ...")
            # The API server exits for good when its etcd does not answer within ~20 s of its start ("error
            # creating storage factory"), as a loaded CI machine saw twice: the new cluster, empty, is deleted
            # and made again once, on new ports, after saying why; after a second such exit, deleted too.
            for again in ("", " again"):
                try:
                    with Heartbeat(progress, f"{cluster_id}: creating the control plane{again}"):
                        self._create_cluster(cluster_id, layout)
                    break
                except ApiServerExitedError as exited:
                    self._kwokctl("delete", "cluster", "--name", cluster_id)
                    if again:
                        raise
                    progress(f"{exited}; creating it again")
        progress(f"{cluster_id}: control plane up in {time.monotonic() - started:.1f}s")

    def delete(self, cluster_id: str, progress: Progress = print) -> None:
        """Delete one dev cluster (a second home a test added); the others run on."""
        if cluster_id not in self.existing_clusters():
            return
        progress(f"{cluster_id}: deleting ...")
        self.metrics_server(cluster_id).stop()
        self._kwokctl("delete", "cluster", "--name", cluster_id)
        self.kubeconfig(cluster_id).unlink(missing_ok=True)
        self._write_merged_kubeconfig([c for c in self.existing_clusters() if self.kubeconfig(c).exists()])

    def down(self, progress: Progress = print) -> None:
        """Delete every dev cluster and stop all of their processes, the links' proxy too."""
        if self.links.running():
            progress("links: stopping toxiproxy-server ...")
        self.links.down()
        for cluster_id in self.existing_clusters():
            progress(f"{cluster_id}: deleting ...")
            self.metrics_server(cluster_id).stop()  # not kwokctl's: it would otherwise wait for the reaper
            self._kwokctl("delete", "cluster", "--name", cluster_id)
            self.kubeconfig(cluster_id).unlink(missing_ok=True)
        self._reap()
        self.merged_kubeconfig.unlink(missing_ok=True)
        shutil.rmtree(self.kwok_workdir, ignore_errors=True)

    def _reap(self, grace: float = 10.0, under: Path | None = None) -> None:
        """kwokctl signals its processes and returns; wait for them, then stop any that linger.
        `under`: only those of that folder (one cluster's), else every one of the environment."""
        deadline = time.monotonic() + grace
        while self.processes(under) and time.monotonic() < deadline:
            time.sleep(0.2)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            lingering = self.processes(under)
            if not lingering:
                return
            for pid in lingering:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            time.sleep(1)
        leftovers = self.processes(under)
        if leftovers:
            raise DevEnvironmentError(f"processes of {under or self.kwok_workdir} survived SIGKILL: {leftovers}")

    def processes(self, under: Path | None = None) -> list[int]:
        """PIDs of processes whose command line points into this environment's kwok workdir, or into
        the folder `under` it (`clusters/home/`, not `clusters/home-2/`)."""
        marker = f"{under}/" if under is not None else str(self.kwok_workdir)
        found = []
        for proc_dir in Path("/proc").iterdir():
            if not proc_dir.name.isdigit():
                continue
            try:
                cmdline = (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                found.append(int(proc_dir.name))
        return found

    @contextlib.contextmanager
    def api_server_stopped(self, cluster_id: str, timeout: float = 60) -> Iterator[None]:
        """Kill one cluster's control plane (etcd keeps the data, kwok's kubelets keep the pods
        running), then start it again with the same command lines: how tests see a foreign cluster
        become unreachable. The controller-manager and scheduler go and come back with the API server,
        as a control plane that restarts does."""
        cluster_dir = self.kwok_workdir / "clusters" / cluster_id
        pids = [pid for c in CONTROL_PLANE if (pid := _recorded_pid(cluster_dir, c)) is not None]
        commands = self.component_commands(cluster_id, CONTROL_PLANE)
        # Their hand-out expired minutes ago: once they die, another session's hand_out could pick one,
        # and its listener, bound later, find the relaunched component on it (e2e/test_two_homes' webhook
        # port, held by another worker's kube-controller-manager).
        ports.hold_again(ports.secure_port(command) for command in commands.values())
        for pid in pids:  # killed, not shut down: a graceful API server drains for a minute
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        holds = {component: ports.PortHold(ports.secure_port(command)) for component, command in commands.items()}
        try:
            yield
        finally:
            # The machine's port lock from releasing the ports until the API server serves: a cluster
            # created meanwhile (kwokctl picks ports free at that moment) could otherwise take a port
            # between its release and the relaunched component binding it, seen on a loaded machine.
            with ports.locked():
                try:
                    self._start_control_plane_again(cluster_id, commands, holds, timeout)
                finally:  # also where the API server did not come back: nothing keeps the ports
                    for hold in holds.values():
                        hold.release()

    def _start_control_plane_again(
        self, cluster_id: str, commands: dict[str, list[str]], holds: dict[str, ports.PortHold], timeout: float
    ) -> None:
        """The API server first; the controllers once it serves: the controller-manager exits for good
        unless its API server is healthy within 10 s of its start, which a restarting API server on a
        loaded machine may not be."""
        cluster_dir = self.kwok_workdir / "clusters" / cluster_id
        holds["kube-apiserver"].release()
        api_server = self._relaunch(cluster_dir, "kube-apiserver", commands["kube-apiserver"])
        deadline = time.monotonic() + timeout
        while not (self._is_ready(cluster_id) and self._serves_every_kind(cluster_id)):
            if not _alive(api_server):  # e.g. its port taken: waiting cannot help
                log = cluster_dir / "logs" / "kube-apiserver.log"
                raise DevEnvironmentError(
                    f"{cluster_id}: kube-apiserver exited as it started again: {_last_line(log)} (see {log})"
                )
            if time.monotonic() > deadline:
                raise DevEnvironmentError(f"{cluster_id}: kube-apiserver did not come back in {timeout:.0f}s")
            time.sleep(0.2)
        for component in CONTROLLERS:
            holds[component].release()
            self._relaunch(cluster_dir, component, commands[component])

    def _start_exited_controllers(self, cluster_id: str, progress: Progress, timeout: float = 120) -> None:
        """Start again the controller-manager or scheduler if it exited, and wait until each has
        outlived its start-up check. kwokctl starts them with the API server, and the controller-manager
        exits for good unless the API server is healthy within 10 s: on a loaded machine (nine clusters
        starting at once) it was not, and the cluster ran on without controllers, its Deployments
        without pods and its foreground deletions never done. Started again once the API server is
        ready, it passes that check at once."""
        cluster_dir = self.kwok_workdir / "clusters" / cluster_id
        relaunched: set[str] = set()
        deadline = time.monotonic() + timeout
        while True:
            if self._is_ready(cluster_id):
                pids = {component: _recorded_pid(cluster_dir, component) for component in CONTROLLERS}
                exited = [component for component, pid in pids.items() if pid is None or not _alive(pid)]
                for component in exited:
                    log = cluster_dir / "logs" / f"{component}.log"
                    if component in relaunched:
                        raise DevEnvironmentError(
                            f"{cluster_id}: {component} exited again as it started: {_last_line(log)} (see {log})"
                        )
                    progress(f"{cluster_id}: {component} had exited ({_last_line(log)}); starting it again")
                    command = self.component_commands(cluster_id, (component,))[component]
                    self._relaunch(cluster_dir, component, command)
                    relaunched.add(component)
                in_check = [
                    component
                    for component, pid in pids.items()
                    if component not in relaunched and pid is not None and _age(pid) < CONTROLLER_MANAGER_GIVES_UP_AFTER
                ]
                if not exited and not in_check:
                    return
            if time.monotonic() > deadline:
                raise DevEnvironmentError(
                    f"{cluster_id}: its API server was not ready in {timeout:.0f}s to start its controllers "
                    f"again (logs in {cluster_dir / 'logs'}); `liqo-stack dev down` resets the clusters"
                )
            time.sleep(0.5)

    def component_commands(self, cluster_id: str, names: Collection[str]) -> dict[str, list[str]]:
        """The command line of each named component, as kwokctl recorded it in kwok.yaml."""
        recorded = yaml.safe_load_all((self.kwok_workdir / "clusters" / cluster_id / "kwok.yaml").read_text())
        components = next(doc["components"] for doc in recorded if isinstance(doc, dict) and "components" in doc)
        return {c["name"]: [c["binary"], *c.get("args", [])] for c in components if c["name"] in names}

    @staticmethod
    def _relaunch(cluster_dir: Path, component: str, command: list[str]) -> int:
        ports.hold_again([ports.secure_port(command)])  # free since it exited: nobody else's until it binds
        with (cluster_dir / "logs" / f"{component}.log").open("ab") as log:
            process = subprocess.Popen(
                command,
                cwd=cluster_dir,
                env=component_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        (cluster_dir / "pids" / f"{component}.pid").write_text(str(process.pid))
        return process.pid

    def env_exports(self) -> list[str]:
        """Shell lines that point kubectl and the tests at the running clusters."""
        ids = [c for c in self.existing_clusters() if self.kubeconfig(c).exists()]
        if not ids:
            raise DevEnvironmentError("no dev clusters are running: start them with `liqo-stack dev up`")
        lines = [f"export {env_name(c)}={_quote(self.kubeconfig(c))}" for c in ids]
        lines.append(f"export KUBECONFIG={_quote(self.merged_kubeconfig)}")
        lines.append(f'export PATH={_quote(self.bin_dir)}:"$PATH"')
        if self.links.running():  # toxiproxy-cli reads its server from TOXIPROXY_URL
            lines.append(f"export TOXIPROXY_URL={shlex.quote(self.links.url)}")
        return lines


def _one_line_at_a_time(progress: Progress) -> Progress:
    """`progress` called by several threads: no two lines interleave (print writes a line in two parts)."""
    lock = threading.Lock()

    def report(line: str) -> None:
        with lock:
            progress(line)

    return report


def _last_line(log: Path) -> str:
    with contextlib.suppress(OSError):
        lines = log.read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else "(empty log)"
    return "(no log)"


def _written_at(path: Path) -> int | None:
    """When the file was last written (ns), None if there is none."""
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _recorded_pid(cluster_dir: Path, component: str) -> int | None:
    """The PID that kwokctl (or `_relaunch`) recorded for the component."""
    try:
        return int((cluster_dir / "pids" / f"{component}.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _age(pid: int) -> float:
    """Seconds since the process started (0 if it is gone)."""
    try:
        started_ticks = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return uptime - started_ticks / os.sysconf("SC_CLK_TCK")


def _alive(pid: int) -> bool:
    """Some thread of the process still runs (and may hold its ports). A killed Go program's main
    thread turns zombie before its other threads are gone, so a zombie counts as gone only once it
    can be reaped: by us for a component we relaunched (our child), by its parent for kwokctl's."""
    proc = Path("/proc") / str(pid)
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        tasks = sum(1 for _ in (proc / "task").iterdir())
    except OSError:
        return False
    if state != "Z":
        return True
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)  # returns 0 until the whole thread group has exited
    except ChildProcessError:
        return tasks > 1  # not ours: gone once its other threads are
    return reaped == 0


def _node_ready(node: Node) -> bool:
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _quote(path: Path) -> str:
    text = str(path)
    return text if all(ch.isalnum() or ch in "/._-+" for ch in text) else "'" + text.replace("'", "'\\''") + "'"
