"""Scale-out: what each added foreign cluster costs, at 1, 8 and 16 of them, with the peerings served
by one process against one process each, and a cost model to 100.

    .venv/bin/python -m tests.bench.bench_scaleout [--sizes 1,8,16] [--window 30] [--pods 100] [--keep]

Fresh clusters (home and the largest size of foreign ones, one kwok node each, every API server
writing an audit log of writes); the time until all are Ready. Then, for each size N in turn, the
stack peers foreign-1 ... foreign-N (`pulumi up`) and namespace `scale` is offloaded to every
cluster (Remote). At each size the runtime runs in two layouts, one after the other, in this run:
"one process" (one virtual-kubelet process serving the N peerings, one process for the N agents:
the default) and "one each" (N virtual kubelets and N agents). For each layout:
- idle, over `--window` seconds: each runtime process's RSS and CPU, its open connections to each
  API server, and the writes the home API server receives per second (its audit log);
- the same with a Deployment of `--pods` replicas Running, spread over the N virtual nodes;
- one new pod: seconds from its create to Running at home (median of 3).
At the largest size it also checks that the replicas ran on every virtual node and that a ConfigMap
reached every twin. Then the cost of each added cluster (a least-squares line through the sizes)
and that line at 100 clusters. Unpinned: every cluster and the runtime share the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Pod

from liqo_stack.dev import paths
from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment, NodeShape, foreign_cluster_id
from liqo_stack.dev.external_runtime import SHARED_AGENT, SHARED_KUBELET, ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names
from runtime.api.namespaceoffloading import ready_twin
from tests.bench.bench_offloading import (
    HOME,
    REPO,
    audit_mark,
    audited_writes,
    bench_client,
    cpu_seconds,
    fresh_clusters,
    run_until_running,
    runtime_rss_mb,
)
from tests.support.kube import free_port, get_or_none, node_ready, offload, status_of, wait_until
from tests.support.sockets import api_ports, established_by_port

NAMESPACE = "scale"
APP = "spread"
MODEL_SIZE = 100
NODE = NodeShape(cpu="64", memory="256Gi", pods=500)


LAYOUTS = {"one process": True, "one each": False}  # name -> ExternalRuntime(one_process=...)


@dataclass
class Point:
    """The figures at one number of foreign clusters, in one layout."""

    clusters: int
    layout: str
    rss: dict[str, dict[str, float]] = field(default_factory=dict)  # "idle" / "pods" -> component -> MB
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)  # ... -> component -> CPU % over the window
    connections: dict[str, dict[str, int]] = field(default_factory=dict)  # ... -> component -> to all servers
    home_connections: dict[str, dict[str, int]] = field(default_factory=dict)  # ... -> component -> to home's
    home_writes: dict[str, float] = field(default_factory=dict)  # ... -> writes per second
    home_writers: dict[str, Counter[str]] = field(default_factory=dict)  # ... -> "client: verb resource" -> count
    one_pod_seconds: float = 0.0


def connections(env: DevEnvironment, runtime: ExternalRuntime, cluster_ids: list[str]) -> dict[str, int]:
    """Per runtime process: its open connections to all the clusters' API servers together."""
    ports = api_ports(env, cluster_ids)
    found = {}
    for component in runtime.components:
        pid = runtime.pid(component)
        if pid is not None:
            by_port = established_by_port(pid)
            found[component] = sum(by_port.get(port, 0) for port in ports)
    return found


def twins_ready(status: dict[str, Any]) -> set[str]:
    return {c for c in status.get("remoteNamespacesConditions") or {} if ready_twin(status, c)}


class Scaling:
    """The bench's clusters, stack and runtime, grown one size after the other."""

    def __init__(self, env: DevEnvironment, state: Path) -> None:
        self.env = env
        project = state / "project"
        project.mkdir(parents=True, exist_ok=True)
        for name in ("Pulumi.yaml", "__main__.py"):
            (project / name).write_bytes((REPO / name).read_bytes())
        self.pulumi = PulumiEnvironment(state_dir=state / "pulumi", bin_dir=paths.bin_dir())
        self.stack = self.pulumi.stack_for_directory(project, "scale")
        self.state = state
        self.port = free_port()
        self.runtime: ExternalRuntime | None = None
        self.offloaded = False
        self.home = env.client(HOME)

    def peer(self, foreign_ids: list[str]) -> None:
        config = {
            "home": {"clusterId": HOME, "kubeconfigPath": str(self.env.kubeconfig(HOME))},
            "foreignClusters": [{"clusterId": c, "kubeconfigPath": str(self.env.kubeconfig(c))} for c in foreign_ids],
            "runtime": {"mode": "external", "webhookPort": self.port},
        }
        self.pulumi.set_liqo_config(self.stack, config)
        print(f"[bench] pulumi up: {len(foreign_ids)} foreign clusters ...", flush=True)
        self.stack.up(on_output=lambda line: None)

    def start(self, foreign_ids: list[str], layout: str) -> ExternalRuntime:
        """The runtime in `layout`, once every virtual node is Ready and every twin too."""
        if self.runtime is not None:
            self.runtime.stop_all()
        kubeconfigs = {c: self.env.kubeconfig(c) for c in (HOME, *foreign_ids)}
        state = self.state / layout.replace(" ", "-")
        self.runtime = ExternalRuntime(
            kubeconfigs, HOME, webhook_port=self.port, state_dir=state, one_process=LAYOUTS[layout]
        )
        self.runtime.stop_all()  # a previous, interrupted run's processes
        self.runtime.start_all()
        runtime = self.runtime
        for cluster_id in foreign_ids:
            node = names.virtual_node_name(cluster_id)

            def ready(node: str = node) -> bool:
                runtime.check_alive()
                return node_ready(self.home, node)

            wait_until(ready, 120, f"{node} Ready")
        if not self.offloaded:  # selecting every cluster: each one peered later gets its twin too
            offload(self.home, NAMESPACE, {"podOffloadingStrategy": "Remote"})
            self.offloaded = True
        wait_until(
            lambda: twins_ready(status_of(self.home, NAMESPACE)) >= set(foreign_ids), 180, "a twin in every cluster"
        )
        return runtime


def spread_deployment(replicas: int) -> Any:
    container = {"name": "app", "image": "nginx:1.27", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
    spread = {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": APP}},
    }
    return Deployment.from_dict({
        "metadata": {"name": APP, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {"labels": {"app": APP}},
                "spec": {"containers": [container], "topologySpreadConstraints": [spread]},
            },
        },
    })  # fmt: skip


def running_by_node(home: Any) -> Counter[str]:
    pods = [p for p in home.list(Pod, namespace=NAMESPACE, labels={"app": APP})]
    return Counter(p.spec.nodeName for p in pods if p.status and p.status.phase == "Running")


async def window(
    env: DevEnvironment, runtime: ExternalRuntime, cluster_ids: list[str], seconds: float
) -> tuple[dict[str, float], dict[str, float], dict[str, int], float, Counter[str]]:
    """RSS, CPU %, connections per runtime process, and the home API server's writes, over `seconds`."""
    mark = audit_mark(env.audit_log(HOME))
    before, started = cpu_seconds(env, runtime), time.monotonic()
    await asyncio.sleep(seconds)  # the window itself: what idles in it is the figure
    after, elapsed = cpu_seconds(env, runtime), time.monotonic() - started
    prefix = "runtime "
    cpu = {
        name.removeprefix(prefix): 100 * (after[name] - before.get(name, 0.0)) / elapsed
        for name in after
        if name.startswith(prefix)
    }
    writes = audited_writes(mark)
    total = sum(writes.values()) / elapsed
    return runtime_rss_mb(runtime), cpu, connections(env, runtime, cluster_ids), total, writes


async def one_pod(client: AsyncClient, rounds: int = 3) -> float:
    seconds = [await run_until_running(client, NAMESPACE, f"single-{i}", 1) for i in range(rounds)]
    for i in range(rounds):
        await client.delete(Pod, f"single-{i}-0", namespace=NAMESPACE, grace_period=0)
    return statistics.median(seconds)


async def measure_size(scaling: Scaling, size: int, args: argparse.Namespace, last: bool) -> list[Point]:
    foreign_ids = [foreign_cluster_id(i) for i in range(1, size + 1)]
    scaling.peer(foreign_ids)
    return [await measure_layout(scaling, foreign_ids, layout, args, last) for layout in LAYOUTS]


async def measure_layout(
    scaling: Scaling, foreign_ids: list[str], layout: str, args: argparse.Namespace, last: bool
) -> Point:
    size = len(foreign_ids)
    runtime = scaling.start(foreign_ids, layout)
    env, home = scaling.env, scaling.home
    cluster_ids = [HOME, *foreign_ids]
    point = Point(size, layout)
    await asyncio.sleep(args.settle)  # start-up work (lists, first syncs) out of the idle figures
    rss, cpu, conns, writes, writers = await window(env, runtime, cluster_ids, args.window)
    point.rss["idle"], point.cpu["idle"], point.connections["idle"] = rss, cpu, conns
    point.home_connections["idle"] = connections(env, runtime, [HOME])
    point.home_writes["idle"], point.home_writers["idle"] = writes, writers

    home.apply(spread_deployment(args.pods), field_manager="bench", force=True)
    wait_until(lambda: sum(running_by_node(home).values()) == args.pods, 600, f"{args.pods} replicas Running")
    by_node = running_by_node(home)
    print(f"[bench] {size} clusters, {layout}: replicas per node {dict(sorted(by_node.items()))}", flush=True)
    if last:
        missing = [c for c in foreign_ids if by_node.get(names.virtual_node_name(c), 0) == 0]
        assert not missing, f"no replica ran on the virtual nodes of {missing}"
        home.apply(
            ConfigMap(metadata=ObjectMeta(name="everywhere", namespace=NAMESPACE), data={"k": "v"}),
            field_manager="bench",
            force=True,
        )
        twin = status_of(home, NAMESPACE).get("remoteNamespaceName")

        def reflected_everywhere() -> bool:
            return all(get_or_none(env.client(c), ConfigMap, "everywhere", twin) for c in foreign_ids)

        wait_until(reflected_everywhere, 120, f"the ConfigMap in all {size} twins")
        print(f"[bench] a ConfigMap reached the twin {twin} in all {size} foreign clusters", flush=True)
    await asyncio.sleep(args.settle)
    rss, cpu, conns, writes, writers = await window(env, runtime, cluster_ids, args.window)
    point.rss["pods"], point.cpu["pods"], point.connections["pods"] = rss, cpu, conns
    point.home_connections["pods"] = connections(env, runtime, [HOME])
    point.home_writes["pods"], point.home_writers["pods"] = writes, writers

    point.one_pod_seconds = await one_pod(bench_client(env, HOME))
    home.delete(Deployment, APP, namespace=NAMESPACE)
    wait_until(lambda: not list(home.list(Pod, namespace=NAMESPACE)), 600, "the replicas gone")
    return point


def kubelet_side(values: dict[str, float]) -> float:
    """The virtual kubelets' figure, all of them together (one process, or one per peering)."""
    return sum(v for component, v in values.items() if component == SHARED_KUBELET or component.startswith("kubelet-"))


def agent_side(values: dict[str, float]) -> float:
    return sum(v for component, v in values.items() if component == SHARED_AGENT or component.startswith("agent-"))


def as_floats(counts: dict[str, int]) -> dict[str, float]:
    return {k: float(v) for k, v in counts.items()}


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares: y = a + b x."""
    if len(xs) < 2:
        return ys[0], 0.0
    slope, intercept = statistics.linear_regression(xs, ys)
    return intercept, slope


def report(points: list[Point], ready_seconds: float, largest: int) -> None:
    print(f"\n== {largest} foreign clusters and home started, all Ready: {ready_seconds:.1f} s")
    for state, label in (("idle", "idle"), ("pods", "with the Deployment's pods Running")):
        print(f"\n== {label} (all the virtual kubelets together, all the agents together; CPU % of one core)")
        columns = ("VK RSS MB", "VK CPU %", "VK conns", "agents RSS", "agents CPU", "agents conn", "CM RSS", "home w/s")
        print(f"  {'clusters':>8}  {'layout':<12}" + " ".join(f"{c:>11}" for c in columns))
        for p in points:
            rss, cpu = p.rss[state], p.cpu[state]
            conns = as_floats(p.connections[state])
            cells = [kubelet_side(rss), kubelet_side(cpu), kubelet_side(conns)]
            cells += [agent_side(rss), agent_side(cpu), agent_side(conns)]
            cells += [rss.get("controller-manager", 0.0), p.home_writes[state]]
            print(f"  {p.clusters:>8}  {p.layout:<12}" + " ".join(f"{c:>11.2f}" for c in cells))
    print("\n== one new pod, create -> Running at home (median of 3), at each size")
    print("  " + ", ".join(f"{p.clusters} ({p.layout}): {p.one_pod_seconds:.2f} s" for p in points))
    last = points[-1]
    writers = last.home_writers["idle"]
    print(f"\n== the home API server's writes at idle with {last.clusters} clusters ({last.layout}), by client")
    for key, count in writers.most_common(12):
        print(f"  {count:>6}  {key}")

    for layout in LAYOUTS:
        ours = [p for p in points if p.layout == layout]
        xs = [float(p.clusters) for p in ours]
        print(f"\n== {layout}: a + b x N foreign clusters (least squares over {len(ours)} sizes), at N = {MODEL_SIZE}")
        for state in ("idle", "pods"):
            rows = {
                "virtual kubelets' RSS, MB (the home side)": [kubelet_side(p.rss[state]) for p in ours],
                "runtime RSS, MB (all processes)": [sum(p.rss[state].values()) for p in ours],
                "runtime CPU, % of a core (all processes)": [sum(p.cpu[state].values()) for p in ours],
                "virtual kubelets' connections": [
                    kubelet_side({k: float(v) for k, v in p.connections[state].items()}) for p in ours
                ],
                "  of which to the home API server": [kubelet_side(as_floats(p.home_connections[state])) for p in ours],
                "runtime connections to API servers": [float(sum(p.connections[state].values())) for p in ours],
                "home API server writes per second": [p.home_writes[state] for p in ours],
            }
            print(f"  {state}:")
            for name, ys in rows.items():
                a, b = fit(xs, ys)
                print(f"    {name:<44} {a:9.2f} + {b:8.2f} x N  -> {a + b * MODEL_SIZE:10.1f} at {MODEL_SIZE}")


async def run(args: argparse.Namespace) -> None:
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    largest = sizes[-1]
    layout = ClusterLayout(foreign=largest, nodes_per_cluster=1, node=NODE)
    started = time.monotonic()
    state, env = fresh_clusters("bench-scaleout", layout)
    ready_seconds = time.monotonic() - started
    scaling = Scaling(env, state)
    points = []
    try:
        for size in sizes:
            points += await measure_size(scaling, size, args, last=size == largest)
        report(points, ready_seconds, largest)
    finally:
        if scaling.runtime is not None:
            scaling.runtime.stop_all()
        if not args.keep:
            env.down(progress=lambda m: None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,8,16", help="numbers of foreign clusters, comma-separated")
    parser.add_argument("--window", type=float, default=30, help="seconds each idle figure is measured over")
    parser.add_argument("--settle", type=float, default=15, help="seconds before each window")
    parser.add_argument("--pods", type=int, default=100, help="replicas of the spread Deployment")
    parser.add_argument("--keep", action="store_true", help="leave the clusters running afterwards")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
