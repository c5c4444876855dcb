"""Offloading at scale: a burst of 10,000 pods over two foreign clusters, both virtual kubelets
restarted at 10,000, and the runtime's memory per offloaded pod.

    .venv/bin/python -m tests.bench.bench_scale [--pods 10000] [--keep]

Starts a home cluster and two foreign ones sized for the burst (2 nodes of 4,000 pods each: a
virtual node offers 90 % of its cluster, 7,200 pods, room for an uneven spread), installs the stack
with `pulumi up`, offloads namespace `bench` to both (Remote), and then:
- direct: N/2 pods created in each foreign cluster at once (each with the same client concurrency),
  seconds until all are Running; then deleted;
- offloaded: N pods created at home, seconds until all are Running at home, and how many token
  Secrets and reflected events exist by then (kwok starts pods without their volumes; a kubelet
  would wait for the token);
- memory: RSS of each runtime process before the burst and with N pods offloaded, the slope in KB
  per offloaded pod; and of the virtual kubelets again after their restart (no burst behind them);
- restart: both virtual kubelets stopped and started once; no pod lost or duplicated, no remote
  UID changed, and the writes the restart caused in each cluster (audit logs; Leases apart).
Unpinned: three clusters on two CPUs have no even split.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from typing import Any

from lightkube import AsyncClient
from lightkube.operators import exists
from lightkube.resources.core_v1 import Event as CoreEvent
from lightkube.resources.core_v1 import Pod, Secret

from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment, NodeShape
from liqo_stack.dev.external_runtime import ExternalRuntime
from runtime.api import names
from tests.bench.bench_offloading import (
    DIRECT,
    HOME,
    OFFLOADED,
    TWIN,
    audit_mark,
    audited_writes,
    bench_client,
    bounded,
    run_until_running,
    running_stack,
    runtime_rss_mb,
)

FOREIGN_IDS = ("foreign-1", "foreign-2")
LAYOUT = ClusterLayout(foreign=2, nodes_per_cluster=2, node=NodeShape(cpu="1000", memory="4Ti", pods=4000))


async def pods_of(client: AsyncClient, namespace: str, burst: str) -> list[Any]:
    return [pod async for pod in client.list(Pod, namespace=namespace, labels={"burst": burst}, chunk_size=1000)]


async def delete_burst(clients: dict[str, AsyncClient], namespace: str, burst: str) -> None:
    """Every pod of the burst in `namespace` of each cluster, until none is left."""
    for client in clients.values():
        found = await pods_of(client, namespace, burst)
        await bounded(client.delete(Pod, pod.metadata.name, namespace=namespace) for pod in found)
    deadline = time.monotonic() + 1200
    while any([await pods_of(client, namespace, burst) for client in clients.values()]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"pods of {burst} still in {namespace} after 1200 s")
        await asyncio.sleep(2)


async def count(client: AsyncClient, resource: Any, namespace: str, labels: dict[str, Any]) -> int:
    return len([obj async for obj in client.list(resource, namespace=namespace, labels=labels, chunk_size=1000)])


async def backlog(home: AsyncClient, foreign: dict[str, AsyncClient]) -> tuple[int, int, int]:
    """(token Secrets in the twins, foreign events in the twins, their reflected copies at home)."""
    tokens = events = 0
    for client in foreign.values():
        tokens += await count(client, Secret, TWIN, {names.SERVICE_ACCOUNT_TOKEN_LABEL: "true"})
        events += await count(client, CoreEvent, TWIN, {})
    reflected = await count(home, CoreEvent, OFFLOADED, {names.EVENT_REFLECTED_FROM_LABEL: exists()})
    return tokens, events, reflected


async def remote_uids(foreign: dict[str, AsyncClient], burst: str) -> dict[str, list[tuple[str, str]]]:
    """Pod name -> (cluster, UID) of every remote pod of the burst: more than one entry is a duplicate."""
    found: dict[str, list[tuple[str, str]]] = {}
    for cluster_id, client in foreign.items():
        for pod in await pods_of(client, TWIN, burst):
            found.setdefault(str(pod.metadata.name), []).append((cluster_id, str(pod.metadata.uid)))
    return found


async def wait_ready(runtime: ExternalRuntime, component: str, timeout: float = 120) -> None:
    """Until the restarted component's /readyz answers 200 (its informers synced)."""
    deadline = time.monotonic() + timeout
    while not runtime.ready(component):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{component} not ready {timeout:.0f} s after its restart")
        await asyncio.sleep(1)


async def measure(env: DevEnvironment, runtime: ExternalRuntime, args: argparse.Namespace) -> None:
    home = bench_client(env, HOME)
    foreign = {c: bench_client(env, c) for c in FOREIGN_IDS}
    rss_before = runtime_rss_mb(runtime)

    print(f"[bench] direct: {args.pods // 2} pods in each foreign cluster at once ...", flush=True)
    started = time.perf_counter()
    half = args.pods // len(FOREIGN_IDS)
    await asyncio.gather(*(run_until_running(client, DIRECT, "direct", half) for client in foreign.values()))
    direct = time.perf_counter() - started
    print(f"  direct: {direct:.1f} s; deleting ...", flush=True)
    await delete_burst(foreign, DIRECT, "direct")

    print(f"[bench] offloaded: {args.pods} pods at home ...", flush=True)
    offloaded = await run_until_running(home, OFFLOADED, "scale", args.pods)
    print(f"  offloaded: {offloaded:.1f} s", flush=True)
    at_running = await backlog(home, foreign)  # what a real kubelet would still wait for (tokens)
    await asyncio.sleep(10)  # statuses settle
    rss_after = runtime_rss_mb(runtime)

    home_names = {str(p.metadata.name) for p in await pods_of(home, OFFLOADED, "scale")}
    before = await remote_uids(foreign, "scale")
    spread = Counter(cluster for entries in before.values() for cluster, _ in entries)

    print("[bench] restarting both virtual kubelets ...", flush=True)
    marks = {c: audit_mark(env.audit_log(c)) for c in (HOME, *FOREIGN_IDS)}
    restart_started = time.perf_counter()
    for cluster_id in FOREIGN_IDS:
        runtime.stop(f"kubelet-{cluster_id}")
        runtime.start(f"kubelet-{cluster_id}")
    for cluster_id in FOREIGN_IDS:
        await wait_ready(runtime, f"kubelet-{cluster_id}")
    ready_after = time.perf_counter() - restart_started
    await asyncio.sleep(args.settle)
    writes = {c: audited_writes(mark) for c, mark in marks.items()}
    rss_restarted = runtime_rss_mb(runtime)
    after = await remote_uids(foreign, "scale")
    running_home = [p for p in await pods_of(home, OFFLOADED, "scale") if p.status and p.status.phase == "Running"]

    print(f"\n== {args.pods} pods over {len(FOREIGN_IDS)} foreign clusters (unpinned)")
    print(f"  direct ({half} in each foreign cluster at once): {direct:7.1f} s")
    print(f"  offloaded (all at home):                  {offloaded:7.1f} s   ratio {offloaded / direct:.2f}x")
    print(f"  spread over the virtual nodes: {dict(spread)}")
    lost = home_names - set(before)
    duplicated = {name: entries for name, entries in before.items() if len(entries) > 1}
    print(f"  home pods {len(home_names)}, remote pods {sum(spread.values())}: {len(lost)} without a remote pod,")
    print(f"  {len(duplicated)} with more than one")
    tokens, events, reflected = at_running
    print(f"  when all were Running at home: {tokens} token Secrets in the twins (one per pod is due),")
    print(f"  {reflected} of {events} foreign events reflected home")

    print("\n== memory per process (RSS MB): before the burst, with the pods offloaded, slope per pod it handles")
    for component in rss_after:
        was, now = rss_before.get(component, 0.0), rss_after[component]
        cluster = component.partition("-")[2]  # kubelet-<cluster>, agent-<cluster>: that cluster's pods
        handled = spread.get(cluster, args.pods)
        slope_kb = (now - was) * 1024 / handled
        print(f"  {component:<22} {was:7.1f} -> {now:7.1f} MB   {slope_kb:5.1f} KB per pod ({handled} pods)")
    total_before, total_after = sum(rss_before.values()), sum(rss_after.values())
    print(f"  {'whole runtime':<22} {total_before:7.1f} -> {total_after:7.1f} MB")
    print("  restarted with the pods offloaded (no burst behind them):")
    for component in (f"kubelet-{c}" for c in FOREIGN_IDS):
        was, now = rss_before.get(component, 0.0), rss_restarted.get(component, 0.0)
        handled = spread.get(component.partition("-")[2], args.pods)
        print(f"  {component:<22} {was:7.1f} -> {now:7.1f} MB   {(now - was) * 1024 / handled:5.1f} KB per pod")

    changed = {name for name, entries in after.items() if before.get(name) != entries}
    gone = set(before) - set(after)
    print(f"\n== both virtual kubelets restarted: ready again after {ready_after:.1f} s, then {args.settle:.0f} s")
    print(f"  remote pods: {len(after)} ({len(gone)} gone, {len(changed)} changed UID or cluster)")
    print(f"  home pods Running: {len(running_home)} of {len(home_names)}")
    for cluster_id, counts in writes.items():
        ours = {k: v for k, v in counts.items() if k.startswith("python-httpx") and not k.endswith(" leases")}
        print(f"  {cluster_id}: {sum(ours.values())} runtime writes other than Leases {json.dumps(ours)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=10000, help="pods in the burst")
    parser.add_argument("--settle", type=float, default=30, help="seconds watched after the restarts")
    parser.add_argument("--keep", action="store_true", help="leave the clusters running afterwards")
    args = parser.parse_args()

    # a token Secret per offloaded pod in each twin: past the default object limit (docs/security.md#objects)
    limits = {"count/secrets": str(2 * args.pods)}
    with running_stack("bench-scale", args.keep, LAYOUT, foreign_ids=FOREIGN_IDS, object_limits=limits) as (
        env,
        runtime,
    ):
        asyncio.run(measure(env, runtime, args))


if __name__ == "__main__":
    main()
