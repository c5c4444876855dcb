"""Namespaces by label selector at scale: 500 matching namespaces at once reach Ready, and what the
runtime holds for them.

    .venv/bin/python -m tests.bench.bench_selector [--small 5] [--large 500] [--keep]

Fresh clusters (home and two foreign ones), the stack installed with `pulumi up`, the runtime running.
One NamespaceOffloadingSelector (`bench-selected=true`, every cluster), then:
- `--small` namespaces labelled at once: seconds until every one is offloaded and Ready; then the RSS
  and the open TCP connections to each API server of the controller-manager and of each virtual
  kubelet (the informers' watches share HTTP/2 connections, up to the server's streams per
  connection: runtime/kube/multiplexing.py);
- more namespaces labelled at once up to `--large`: the same figures.
Open connections are counted from /proc (the process's sockets, ESTABLISHED, by remote port).
Unpinned: three clusters and the runtime share the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment, NodeShape
from liqo_stack.dev.external_runtime import ExternalRuntime
from runtime.api import OffloadingPhase, names
from runtime.api.resources import NamespaceOffloadingResource, NamespaceOffloadingSelectorResource
from tests.bench.bench_offloading import HOME, bench_client, bounded, running_stack, runtime_rss_mb
from tests.support.sockets import api_ports, established_by_port

FOREIGN_IDS = ("foreign-1", "foreign-2")
LAYOUT = ClusterLayout(foreign=2, nodes_per_cluster=1, node=NodeShape(cpu="64", memory="256Gi", pods=500))
LABEL = "bench-selected"
SETTLED = {OffloadingPhase.READY.value, OffloadingPhase.NO_CLUSTER_SELECTED.value}


def connections(env: DevEnvironment, runtime: ExternalRuntime) -> dict[str, dict[str, int]]:
    """Per component of the home side: open connections to each cluster's API server."""
    ports = api_ports(env, [HOME, *FOREIGN_IDS])
    found = {}
    for component in ("controller-manager", *(f"kubelet-{c}" for c in FOREIGN_IDS)):
        pid = runtime.pid(component)
        if pid is None:
            continue
        by_port = established_by_port(pid)
        found[component] = {cluster: by_port.get(port, 0) for port, cluster in ports.items()}
    return found


async def label_namespaces(home: AsyncClient, first: int, last: int) -> None:
    await bounded(
        home.create(Namespace(metadata=ObjectMeta(name=f"sel-{i:04d}", labels={LABEL: "true"})))
        for i in range(first, last)
    )


async def wait_all_ready(home: AsyncClient, count: int, timeout: float) -> float:
    """Seconds until `count` namespaces are offloaded by the selector and Ready."""
    started = time.perf_counter()
    last = -1
    while True:
        ready = 0
        async for offloading in home.list(NamespaceOffloadingResource, namespace="*", chunk_size=1000):
            owner = (offloading.metadata.labels or {}).get(names.OFFLOADING_SELECTOR_LABEL)
            if owner == "bench" and (offloading.get("status") or {}).get("offloadingPhase") in SETTLED:
                ready += 1
        if ready != last:
            print(f"  {ready}/{count} Ready after {time.perf_counter() - started:.1f} s", flush=True)
            last = ready
        if ready >= count:
            return time.perf_counter() - started
        if time.perf_counter() - started > timeout:
            raise TimeoutError(f"{ready} of {count} namespaces Ready after {timeout:.0f} s")
        await asyncio.sleep(1)


def snapshot(env: DevEnvironment, runtime: ExternalRuntime) -> dict[str, Any]:
    rss = runtime_rss_mb(runtime)
    return {"rss": rss, "connections": connections(env, runtime)}


async def measure(env: DevEnvironment, runtime: ExternalRuntime, args: argparse.Namespace) -> None:
    home = bench_client(env, HOME)
    await home.create(
        NamespaceOffloadingSelectorResource.from_dict(
            {
                "apiVersion": names.API_VERSION,
                "kind": "NamespaceOffloadingSelector",
                "metadata": {"name": "bench"},
                "spec": {"namespaceSelector": {"matchLabels": {LABEL: "true"}}},
            }
        )
    )
    figures: dict[int, tuple[float, dict[str, Any]]] = {}
    done = 0
    for size in (args.small, args.large):
        print(f"[bench] {size - done} more namespaces labelled at once ({size} in all) ...", flush=True)
        await label_namespaces(home, done, size)
        seconds = await wait_all_ready(home, size, args.timeout)
        await asyncio.sleep(args.settle)  # the virtual kubelets' scopes sync after the offloadings are Ready
        figures[size] = (seconds, snapshot(env, runtime))
        done = size

    print(f"\n== namespaces matching one selector, offloaded to {len(FOREIGN_IDS)} foreign clusters (unpinned)")
    for size, (seconds, _) in figures.items():
        added = size - (args.small if size == args.large else 0)
        print(f"  {added:>4} labelled at once ({size:>4} in all): all Ready after {seconds:7.1f} s")
    print("\n== per process: RSS (MB) and open connections to each API server, at each size")
    components = sorted(figures[args.small][1]["connections"])
    header = "  ".join(f"{size:>4} ns: RSS, conns home/f-1/f-2" for size in figures)
    print(f"  {'component':<22} {header}")
    for component in components:
        cells = []
        for size in figures:
            state = figures[size][1]
            conns = state["connections"].get(component, {})
            counts = "/".join(str(conns.get(c, 0)) for c in (HOME, *FOREIGN_IDS))
            cells.append(f"{state['rss'].get(component, 0.0):8.1f} MB, {counts:>16}")
        print(f"  {component:<22} " + "  ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=5, help="namespaces labelled first")
    parser.add_argument("--large", type=int, default=500, help="namespaces in all, the rest labelled at once")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for each size to be Ready")
    parser.add_argument("--settle", type=float, default=20, help="seconds after Ready before measuring")
    parser.add_argument("--keep", action="store_true", help="leave the clusters running afterwards")
    args = parser.parse_args()
    with running_stack("bench-selector", args.keep, LAYOUT, foreign_ids=FOREIGN_IDS) as (env, runtime):
        asyncio.run(measure(env, runtime, args))


if __name__ == "__main__":
    main()
