"""Engine benchmark: an informer over N objects with lightkube (our client) vs kubernetes_asyncio.

    .venv/bin/python tests/bench/bench_informer.py [--objects 10000] [--events 200]

Starts its own dev cluster (state under $LIQO_STACK_STATE/bench), creates N ConfigMaps, then for
each client, in a child process of its own and in the same run: time, CPU and memory to list
them into a store, and event-to-handler latency for `--events` creations watched live. Prints
the figures and the ratios lightkube / alternative.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.bench.stages import percentile

NAMESPACE = "bench"
CREATED_ANNOTATION = "bench.liqo.io/created"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- child: one client ------------------------------------------------------------------------
async def lightkube_child(kubeconfig: str, expected: int, events: int) -> dict[str, Any]:
    from lightkube import AsyncClient, KubeConfig
    from lightkube.resources.core_v1 import ConfigMap

    from runtime.kube import Event, Informer

    client = AsyncClient(KubeConfig.from_file(kubeconfig))
    informer = Informer(client, ConfigMap, namespace=NAMESPACE, page_size=500)
    latencies: list[float] = []

    def handler(event: Event) -> None:
        if informer.synced.is_set() and event.type == "ADDED":
            stamp = (event.obj.metadata.annotations or {}).get(CREATED_ANNOTATION)
            if stamp:
                latencies.append(time.time() - float(stamp))

    informer.add_handler(handler)
    rss0, cpu0, t0 = rss_mb(), cpu_seconds(), time.perf_counter()
    task = asyncio.create_task(informer.run())
    await informer.synced.wait()
    result = {
        "listed": len(informer.store),
        "list_seconds": time.perf_counter() - t0,
        "list_cpu_seconds": cpu_seconds() - cpu0,
        "store_rss_mb": rss_mb() - rss0,
    }
    print("READY", flush=True)
    while len(latencies) < events:
        await asyncio.sleep(0.05)
    task.cancel()
    await client.close()
    return {**result, "latencies": latencies}


async def kubernetes_asyncio_child(kubeconfig: str, expected: int, events: int) -> dict[str, Any]:
    from kubernetes_asyncio import client, config, watch

    await config.load_kube_config(config_file=kubeconfig)
    api: Any = client.CoreV1Api()
    rss0, cpu0, t0 = rss_mb(), cpu_seconds(), time.perf_counter()
    store: dict[str, Any] = {}
    cont = None
    while True:
        page = await api.list_namespaced_config_map(NAMESPACE, limit=500, _continue=cont)
        for item in page.items:
            store[item.metadata.name] = item
        cont = page.metadata._continue
        if not cont:
            break
    version = page.metadata.resource_version
    result = {
        "listed": len(store),
        "list_seconds": time.perf_counter() - t0,
        "list_cpu_seconds": cpu_seconds() - cpu0,
        "store_rss_mb": rss_mb() - rss0,
    }
    print("READY", flush=True)
    latencies: list[float] = []
    w = watch.Watch()
    async for event in w.stream(api.list_namespaced_config_map, NAMESPACE, resource_version=version):
        obj = event["object"]
        store[obj.metadata.name] = obj
        stamp = (obj.metadata.annotations or {}).get(CREATED_ANNOTATION)
        if event["type"] == "ADDED" and stamp:
            latencies.append(time.time() - float(stamp))
        if len(latencies) >= events:
            break
    w.stop()
    await api.api_client.close()
    return {**result, "latencies": latencies}


CHILDREN = {"lightkube": lightkube_child, "kubernetes_asyncio": kubernetes_asyncio_child}


# -- parent: cluster, objects, alternation, report --------------------------------------------
async def create_configmaps(kubeconfig: str, names: list[str], concurrency: int, stamped: bool) -> None:
    from lightkube import AsyncClient, KubeConfig
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ConfigMap

    client = AsyncClient(KubeConfig.from_file(kubeconfig))
    gate = asyncio.Semaphore(concurrency)
    payload = {f"key-{i}": "x" * 64 for i in range(8)}  # ~1 KB of data, like a small app config

    async def one(name: str) -> None:
        async with gate:
            annotations = {CREATED_ANNOTATION: repr(time.time())} if stamped else None
            meta = ObjectMeta(name=name, namespace=NAMESPACE, annotations=annotations, labels={"app": "bench"})
            await client.create(ConfigMap(metadata=meta, data=payload))

    await asyncio.gather(*(one(n) for n in names))
    await client.close()


def run_child(name: str, kubeconfig: str, objects: int, events: int, round_no: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        name,
        "--kubeconfig",
        kubeconfig,
        "--objects",
        str(objects),
        "--events",
        str(events),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY"
    names = [f"live-{name.replace('_', '-')}-{round_no}-{i}" for i in range(events)]
    for chunk in range(0, events, 10):  # a steady trickle, not a burst
        asyncio.run(create_configmaps(kubeconfig, names[chunk : chunk + 10], 10, stamped=True))
    out, _ = proc.communicate(timeout=300)
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--child", choices=sorted(CHILDREN))
    parser.add_argument("--kubeconfig")
    args = parser.parse_args()
    if args.child:
        result = asyncio.run(CHILDREN[args.child](args.kubeconfig, args.objects, args.events))
        print(json.dumps(result), flush=True)
        return

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from liqo_stack.dev import paths
    from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment

    env = DevEnvironment(state_dir=paths.state_root() / "bench", bin_dir=paths.bin_dir())
    env.down(progress=lambda m: None)
    env.up(ClusterLayout(foreign=0, nodes_per_cluster=1), progress=lambda m: print(f"[cluster] {m}", flush=True))
    try:
        kubeconfig = str(env.kubeconfig("home"))
        subprocess.run(
            [str(env.bin_dir / "kubectl"), "--kubeconfig", kubeconfig, "create", "namespace", NAMESPACE], check=True
        )
        started = time.perf_counter()
        asyncio.run(create_configmaps(kubeconfig, [f"cm-{i}" for i in range(args.objects)], 32, stamped=False))
        print(f"created {args.objects} ConfigMaps in {time.perf_counter() - started:.1f}s", flush=True)
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in CHILDREN}
        for round_no in range(2):  # alternate, so drift in the machine hits both alike
            for name in CHILDREN:
                results[name].append(run_child(name, kubeconfig, args.objects, args.events, round_no))
        report(results, args.objects)
    finally:
        env.down(progress=lambda m: None)


def report(results: dict[str, list[dict[str, Any]]], objects: int) -> None:
    summary: dict[str, dict[str, float]] = {}
    for name, runs in results.items():
        latencies = [x * 1000 for run in runs for x in run["latencies"]]
        summary[name] = {
            "list_seconds": statistics.median(r["list_seconds"] for r in runs),
            "list_cpu_seconds": statistics.median(r["list_cpu_seconds"] for r in runs),
            "store_rss_mb": statistics.median(r["store_rss_mb"] for r in runs),
            "latency_p50_ms": percentile(latencies, 0.5),
            "latency_p99_ms": percentile(latencies, 0.99),
        }
    ours, other = summary["lightkube"], summary["kubernetes_asyncio"]
    print(f"\ninformer over {objects} ConfigMaps (~1 KB each), median of 2 alternated rounds per client")
    print(f"{'figure':18} {'lightkube':>12} {'k8s_asyncio':>12} {'ratio':>8}")
    for key in ours:
        ratio = ours[key] / other[key] if other[key] else float("nan")
        print(f"{key:18} {ours[key]:12.2f} {other[key]:12.2f} {ratio:8.2f}")


if __name__ == "__main__":
    main()
