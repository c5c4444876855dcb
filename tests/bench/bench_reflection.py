"""Reflection benchmark: ConfigMaps (and custom objects) reflected into a foreign twin vs the same
created there directly.

    .venv/bin/python -m tests.bench.bench_reflection [--objects 1000] [--rounds 2] [--idle 60]
        [--idle-objects 5000] [--idle-pods 100] [--rss-pods 1000] [--pinning both|pinned|unpinned]
        [--workloads configmaps,custom]

Starts its own home and foreign cluster (state under $LIQO_STACK_STATE/bench-reflection, both API
servers auditing every write), installs the stack with `pulumi up`, runs the runtime as local
processes and offloads namespace `bench`. Then, in one run, alternating the two ways round by round:
- burst: N ConfigMaps created with the same client and concurrency, either directly in a foreign
  namespace (the plain script, timed until its last create returns) or at home in the offloaded
  namespace (timed until the last copy exists in the twin); the CPU seconds of every process;
- idle: with `--idle-objects` ConfigMaps reflected and `--idle-pods` pods offloaded and nothing
  changing, the writes each API server receives in `--idle` seconds, by client (node Lease
  heartbeats counted apart);
- memory: RSS of each runtime process with those objects reflected and `--rss-pods` pods offloaded.
Prints the figures and the ratio reflected / direct (target <= 1.2x at 1,000), with each cluster's
processes pinned to CPUs of their own and unpinned, alternated (tests/bench/pinning.py). The ConfigMap
reflector runs with as many workers as the script's concurrency.

The bursts run for each workload: ConfigMaps, and custom objects (issue 39: `widgets` of
`bench.liqo-stack.dev`, a CRD installed in both clusters with kubectl, opted in by the stack config
with the same workers, each object annotated `liqo.io/allow-reflection`), measured the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lightkube import AsyncClient
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import ConfigMap

from liqo_stack.dev.clusters import DevEnvironment
from runtime.api import names
from runtime.api.resources import VirtualNodeResource
from runtime.kube import Event, Informer
from tests.bench.bench_offloading import (
    CONCURRENCY,
    DIRECT,
    FOREIGN,
    HOME,
    OFFLOADED,
    PLAIN,
    Clusters,
    audit_mark,
    audited_writes,
    bounded,
    cpu_seconds,
    run_until_running,
    running_stack,
    runtime_rss_mb,
)
from tests.bench.pinning import add_pinning_option, cpu_plan, describe, pin, unpin
from tests.bench.profiling import Profile, profiled
from tests.bench.profiling import report as report_profile
from tests.support.crds import open_crd

TWIN = f"{OFFLOADED}-{HOME}"
TARGET_RATIO = 1.2
RSS_TARGET_MB = 200


@dataclass(frozen=True)
class Workload:
    """What a burst creates: `make(name, namespace, batch)` -> the object, labelled batch=<batch>."""

    title: str  # as the figures name it
    resource: type[Any]
    make: Callable[[str, str, str], Any]


def config_map(name: str, namespace: str, batch: str) -> Any:
    return ConfigMap.from_dict(
        {"metadata": {"name": name, "namespace": namespace, "labels": {"batch": batch}}, "data": {"key": name * 4}}
    )


# issue 39: a custom resource with a spec of the same size as the ConfigMaps' data
BENCH_GROUP = "bench.liqo-stack.dev"
WIDGETS = {"group": BENCH_GROUP, "version": "v1", "resource": "widgets"}
Widget = create_namespaced_resource(BENCH_GROUP, "v1", "Widget", "widgets")
WIDGET_CRD = open_crd(BENCH_GROUP, "Widget", "widgets", status=False)


def widget(name: str, namespace: str, batch: str) -> Any:
    meta = {
        "name": name,
        "namespace": namespace,
        "labels": {"batch": batch},
        "annotations": {names.ALLOW_REFLECTION_ANNOTATION: "true"},  # custom resources are AllowList by default
    }
    return Widget.from_dict(
        {"apiVersion": f"{BENCH_GROUP}/v1", "kind": "Widget", "metadata": meta, "spec": {"key": name * 4}}
    )


WORKLOADS = {
    "configmaps": Workload("ConfigMaps", ConfigMap, config_map),
    "custom": Workload(f"custom objects (widgets.{BENCH_GROUP})", Widget, widget),
}


def install_widgets(env: DevEnvironment) -> None:
    """The CRD in both clusters, as an operator's install would put it; then wait until the virtual
    kubelet says it reflects them (it starts by itself once the CRDs are there)."""
    for cluster_id in (HOME, FOREIGN):
        kubectl = [str(env.bin_dir / "kubectl"), "--kubeconfig", str(env.kubeconfig(cluster_id))]
        subprocess.run([*kubectl, "apply", "-f", "-"], input=json.dumps(WIDGET_CRD), text=True, check=True)
        crd = f"crd/widgets.{BENCH_GROUP}"
        subprocess.run([*kubectl, "wait", "--for=condition=Established", crd], check=True, capture_output=True)


async def widgets_reflected(clusters: Clusters) -> None:
    deadline = time.monotonic() + 120
    node = names.virtual_node_name(FOREIGN)
    while True:
        found = await clusters.home.get(VirtualNodeResource, node, namespace=names.LIQO_NAMESPACE)
        conditions = (found.get("status") or {}).get("conditions") or []
        wanted = names.CUSTOM_RESOURCES_REFLECTED_CONDITION
        if any(c["type"] == wanted and c["status"] == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{node}: {wanted} not True after 120 s: {conditions}")
        await asyncio.sleep(1)


async def create_all(client: AsyncClient, namespace: str, batch: str, count: int, workload: Workload) -> None:
    await bounded(client.create(workload.make(f"{batch}-{index}", namespace, batch)) for index in range(count))


async def direct(clusters: Clusters, batch: str, count: int, workload: Workload) -> float:
    started = time.perf_counter()
    await create_all(clusters.foreign, DIRECT, batch, count, workload)
    return time.perf_counter() - started


async def both(clusters: Clusters, batch: str, count: int, workload: Workload) -> float:
    """The floor of any reflection on this machine: the same objects created at home and directly in
    the foreign cluster at once (each reflected object costs one write in each)."""
    started = time.perf_counter()
    await asyncio.gather(
        create_all(clusters.home, PLAIN, batch, count, workload),
        create_all(clusters.foreign, DIRECT, batch, count, workload),
    )
    return time.perf_counter() - started


async def reflected(clusters: Clusters, batch: str, count: int, workload: Workload = WORKLOADS["configmaps"]) -> float:
    """Created at home; seconds until the last copy exists in the twin namespace."""
    seen: set[str] = set()
    done = asyncio.Event()

    def on_event(event: Event) -> None:
        if event.type != "DELETED":
            seen.add(event.key)
            if len(seen) == count:
                done.set()

    labels = {"batch": batch, names.ORIGIN_LABEL: HOME}
    copies = Informer(clusters.foreign, workload.resource, namespace=TWIN, labels=labels)
    copies.add_handler(on_event)
    watching = asyncio.create_task(copies.run())
    await copies.synced.wait()
    started = time.perf_counter()
    await create_all(clusters.home, OFFLOADED, batch, count, workload)
    await asyncio.wait_for(done.wait(), timeout=600)
    elapsed = time.perf_counter() - started
    watching.cancel()
    return elapsed


async def delete_batch(clusters: Clusters, batch: str, workload: Workload) -> None:
    kind = workload.resource
    await bounded([
        client.delete(kind, obj.metadata.name, namespace=namespace)
        for client, namespace in ((clusters.home, OFFLOADED), (clusters.home, PLAIN), (clusters.foreign, DIRECT))
        async for obj in client.list(kind, namespace=namespace, labels={"batch": batch})
    ])  # fmt: skip
    deadline = time.monotonic() + 300
    while [c async for c in clusters.foreign.list(kind, namespace=TWIN, labels={"batch": batch})]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"copies of {batch} still in {TWIN} after 300 s")
        await asyncio.sleep(1)


async def bursts(
    env: DevEnvironment, clusters: Clusters, runtime: Any, args: argparse.Namespace, workload: Workload
) -> None:
    """The rounds of one workload, each way and pinning alternated; its figures printed."""
    modes = ["pinned", "unpinned"] if args.pinning == "both" else [args.pinning]
    plan = cpu_plan([HOME, FOREIGN])
    results: dict[tuple[str, str], list[float]] = {(m, w): [] for m in modes for w in WAYS}
    cpu: dict[str, dict[str, float]] = {}
    profiles: dict[str, Profile] = {}
    for round_no in range(args.rounds):
        for mode in modes if round_no % 2 == 0 else modes[::-1]:
            if mode == "pinned":
                pin(env, runtime, plan)
            else:
                unpin(env, runtime)
            for way in list(WAYS) if round_no % 2 == 0 else list(WAYS)[::-1]:
                batch = f"{workload.resource.__name__.lower()}-r{round_no}-{mode[0]}{way[0]}"
                before = cpu_seconds(env, runtime)
                last = round_no == args.rounds - 1 and way == "reflected"
                with profiled(runtime, env.state_dir.parent / "profiles", enabled=args.profile and last) as found:
                    seconds = await WAYS[way](clusters, batch, args.objects, workload)
                profiles.update(found)
                cpu[way] = {n: t - before.get(n, 0.0) for n, t in cpu_seconds(env, runtime).items()}
                results[mode, way].append(seconds)
                print(
                    f"  {args.objects} {workload.title} round {round_no + 1} {mode:>8} {way:>9}: {seconds:6.2f} s",
                    flush=True,
                )
                await delete_batch(clusters, batch, workload)
    unpin(env, runtime)
    report_bursts(args, workload, modes, plan, results, cpu)
    if profiles:
        report_profile(profiles, f"the runtime during the last reflected burst of {args.objects} {workload.title}")


async def measure(env: DevEnvironment, clusters: Clusters, runtime: Any, args: argparse.Namespace) -> None:
    for key in args.workloads:
        if key == "custom":
            install_widgets(env)
            await widgets_reflected(clusters)
        await bursts(env, clusters, runtime, args, WORKLOADS[key])
    if args.quick:
        return

    print(f"[bench] {args.idle_objects} ConfigMaps reflected, {args.idle_pods} pods offloaded, idle ...", flush=True)
    await reflected(clusters, "idle", args.idle_objects)
    await run_until_running(clusters.home, OFFLOADED, "idle", args.idle_pods)
    await asyncio.sleep(10)  # statuses settle
    marks = {c: audit_mark(env.audit_log(c)) for c in (HOME, FOREIGN)}
    await asyncio.sleep(args.idle)
    idle = {c: audited_writes(mark) for c, mark in marks.items()}
    more = args.rss_pods - args.idle_pods
    print(f"[bench] {more} more pods offloaded for the memory figure ...", flush=True)
    if more > 0:
        await run_until_running(clusters.home, OFFLOADED, "rss", more)
    await asyncio.sleep(10)
    rss = runtime_rss_mb(runtime)

    parts = ", ".join(f"{c} {mb:.0f} MB" for c, mb in rss.items())
    pods = max(args.rss_pods, args.idle_pods)
    print(
        f"\n== runtime RSS with {args.idle_objects} reflected ConfigMaps and {pods} offloaded pods: "
        f"{sum(rss.values()):.0f} MB ({parts}; target < {RSS_TARGET_MB} MB)"
    )
    print(
        f"\n== writes during {args.idle:.0f} idle s with {args.idle_objects} reflected objects and "
        f"{args.idle_pods} offloaded pods (target: zero)"
    )
    for cluster_id, counts in idle.items():
        ours = {k: v for k, v in counts.items() if k.startswith("python-httpx")}
        heartbeats = sum(v for k, v in ours.items() if k.endswith(" leases"))
        print(f"  {cluster_id}: runtime {sum(ours.values()) - heartbeats} writes + {heartbeats} Lease heartbeats")
        for key, value in sorted(counts.items()):
            print(f"      {value:4d}  {key}")


WAYS = {"direct": direct, "reflected": reflected, "both": both}


def report_bursts(
    args: argparse.Namespace,
    workload: Workload,
    modes: list[str],
    plan: dict[str, set[int]],
    results: dict[tuple[str, str], list[float]],
    cpu: dict[str, dict[str, float]],
) -> None:
    print(f"\n== reflection: {args.objects} {workload.title}, concurrency {CONCURRENCY} (target <= {TARGET_RATIO}x)")
    print("  direct: created in the foreign cluster; reflected: created at home until every copy is in the twin;")
    print("  both: created at home and in the foreign cluster at once, no reflection (the floor on this machine)")
    if "pinned" in modes:
        print(f"  pinned: {describe(plan)} (the runtime with the cluster it works in)")
    for mode in modes:
        for way in WAYS:
            values = results[mode, way]
            rounds = ", ".join(f"{v:.2f}" for v in values)
            print(f"  {mode:>8} {way:>9}: median {statistics.median(values):6.2f} s (rounds: {rounds})")
        base = statistics.median(results[mode, "direct"])
        ratio = statistics.median(results[mode, "reflected"]) / base
        floor = statistics.median(results[mode, "both"]) / base
        print(f"  {mode:>8} ratio reflected / direct: {ratio:.2f}x (floor both / direct: {floor:.2f}x)")
    print("\n  CPU seconds during the last round of each way (2 cores):")
    names_by_cost = sorted(set().union(*(c.keys() for c in cpu.values())), key=lambda n: -cpu["reflected"].get(n, 0.0))
    print(f"      {'':<36} " + " ".join(f"{way:>9}" for way in WAYS))
    for name in names_by_cost[:10]:
        print(f"      {name:<36} " + " ".join(f"{cpu[way].get(name, 0.0):9.1f}" for way in WAYS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=1000, help="ConfigMaps per burst")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per way, alternated")
    parser.add_argument("--idle", type=float, default=60, help="idle seconds counted")
    parser.add_argument("--idle-objects", type=int, default=5000, help="ConfigMaps reflected during the idle count")
    add_pinning_option(parser)
    parser.add_argument("--idle-pods", type=int, default=100, help="pods offloaded during the idle count")
    parser.add_argument("--rss-pods", type=int, default=1000, help="pods offloaded for the memory figure")
    parser.add_argument("--keep", action="store_true", help="leave the clusters running afterwards")
    parser.add_argument("--profile", action="store_true", help="py-spy profile of the runtime, last reflected burst")
    parser.add_argument("--quick", action="store_true", help="the bursts only: no idle count, no memory figure")
    parser.add_argument(
        "--workloads",
        type=lambda text: [w for w in text.split(",") if w],
        default=list(WORKLOADS),
        help="bursts of: " + ", ".join(WORKLOADS) + " (comma-separated; default both)",
    )
    args = parser.parse_args()
    if unknown := set(args.workloads) - set(WORKLOADS):
        parser.error(f"--workloads: unknown {sorted(unknown)}; choose from {', '.join(WORKLOADS)}")

    # the reflectors get the concurrency the plain script has (docs/reflection.md: reflection.<kind>.workers)
    workers = {
        "reflection": {
            "resources": {"configmap": {"workers": CONCURRENCY}},
            "customResources": [{**WIDGETS, "workers": CONCURRENCY}],
        }
    }
    # a twin holds the bursts and the idle ConfigMaps: past the default object limit (docs/security.md#objects)
    limits = {"count/configmaps": str(2 * (args.idle_objects + args.objects))}
    with running_stack("bench-reflection", args.keep, extra_config=workers, object_limits=limits) as (env, runtime):
        asyncio.run(measure(env, Clusters(env), runtime, args))


if __name__ == "__main__":
    main()
