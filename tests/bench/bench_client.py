"""Client benchmark: the runtime's client (runtime/kube/client.py) and transport vs lightkube's own.

    .venv/bin/python -m tests.bench.bench_client [--requests 2000] [--watches 30] [--rounds 3]

Three ways: `httpx2`, lightkube's AsyncClient as it comes; `aiohttp`, the same with the runtime's
aiohttp transport (runtime/kube/transport.py); `runtime`, the runtime's client, whose one-shot
requests skip httpx2 as well. Starts its own dev cluster (state under $LIQO_STACK_STATE/bench-client).
Each round, for each way in turn (the order alternated): one lightkube AsyncClient holding `--watches` open watches
(as a virtual kubelet does, most of them quiet), then `--requests` requests, 16 at a time (the
runtime's workers): a quarter of that many ConfigMaps created, patched, read and deleted. Prints
this process's CPU per request and the wall time of each way, and their ratios.
Then, in a child process per transport (a clean heap), the RSS each open watch connection adds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from lightkube import AsyncClient, KubeConfig
from lightkube.config.client_adapter import verify_cluster
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace
from lightkube.types import PatchType

from liqo_stack.dev import paths
from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment
from runtime.kube.client import async_client
from runtime.kube.transport import AiohttpTransport
from tests.bench.bench_informer import cpu_seconds, rss_mb
from tests.bench.bench_offloading import bounded

NAMESPACE = "bench"
QUIET = "bench-quiet"  # what the watches look at: nothing changes there
WORKERS = 16


def with_aiohttp_transport(config: KubeConfig) -> AsyncClient:
    """lightkube's AsyncClient over the runtime's transport: every request built and read by httpx2."""
    single = config.get()
    assert single is not None and single.user is not None
    context = verify_cluster(single.cluster, single.user, single.abs_file)
    return AsyncClient(single, field_manager="bench", transport=AiohttpTransport(context))


TRANSPORTS: dict[str, Callable[[KubeConfig], AsyncClient]] = {
    "httpx2": lambda config: AsyncClient(config, field_manager="bench"),
    "aiohttp": with_aiohttp_transport,
    "runtime": lambda config: async_client(config, field_manager="bench"),
}


async def one_way(client: AsyncClient, requests: int, watches: int, tag: str) -> dict[str, float]:
    """CPU ms per request and seconds per phase for one client."""

    async def watch(index: int) -> None:
        async for _ in client.watch(ConfigMap, namespace=QUIET, labels={"watch": str(index)}):
            pass

    watching = [asyncio.create_task(watch(i)) for i in range(watches)]
    await asyncio.sleep(1)  # the watches connected
    names = [f"{tag}-{i}" for i in range(requests // 4)]
    phases: dict[str, Callable[[str], Awaitable[Any]]] = {
        "create": lambda n: client.create(ConfigMap(metadata=ObjectMeta(name=n, namespace=NAMESPACE), data={"a": n})),
        "patch": lambda n: client.patch(
            ConfigMap, n, {"data": {"b": n}}, namespace=NAMESPACE, patch_type=PatchType.MERGE
        ),
        "get": lambda n: client.get(ConfigMap, n, namespace=NAMESPACE),
        "delete": lambda n: client.delete(ConfigMap, n, namespace=NAMESPACE),
    }
    figures: dict[str, float] = {}
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    for phase, call in phases.items():
        started = time.perf_counter()
        await bounded((call(n) for n in names), WORKERS)
        figures[f"{phase} s"] = time.perf_counter() - started
    figures["CPU ms/request"] = (cpu_seconds() - cpu0) * 1000 / (4 * len(names))
    figures["wall s"] = time.perf_counter() - wall0
    for task in watching:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*watching)
    return figures


async def measure(config: KubeConfig, args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {name: [] for name in TRANSPORTS}
    for round_no in range(args.rounds):
        order = list(TRANSPORTS) if round_no % 2 == 0 else list(TRANSPORTS)[::-1]
        for name in order:
            client = TRANSPORTS[name](config)
            figures = await one_way(client, args.requests, args.watches, f"{name}-{round_no}")
            await client.close()
            results[name].append(figures)
            print(f"  round {round_no + 1} {name:>8}: {figures['CPU ms/request']:.3f} CPU ms/request,"
                  f" {figures['wall s']:.2f} s", flush=True)  # fmt: skip
    return results


async def connection_memory(transport: str, kubeconfig: str, watches: int) -> float:
    """KB of RSS per open watch connection (child process: nothing else on its heap)."""
    client = TRANSPORTS[transport](KubeConfig.from_file(kubeconfig))
    await client.get(Namespace, QUIET)  # the first connection and what it imports, before the count

    async def watch(index: int) -> None:
        async for _ in client.watch(ConfigMap, namespace=QUIET, labels={"memory": str(index)}):
            pass

    before = rss_mb() * 1024
    tasks = [asyncio.create_task(watch(i)) for i in range(watches)]
    await asyncio.sleep(3)  # every watch connected
    per_connection = (rss_mb() * 1024 - before) / watches
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await client.close()
    return per_connection


def connection_memory_in_child(transport: str, kubeconfig: str, watches: int) -> float:
    command = [sys.executable, "-m", "tests.bench.bench_client", "--connection-memory", transport]
    command += ["--kubeconfig", kubeconfig, "--watches", str(watches)]
    return float(json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout))


def report(results: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> None:
    print(
        f"\n== {args.requests} requests (create, patch, get, delete), {WORKERS} at a time, {args.watches} watches open"
    )
    print("  median over rounds (range)")
    keys = list(next(iter(results.values()))[0])
    medians: dict[str, dict[str, float]] = {}
    for name, rounds in results.items():
        medians[name] = {k: statistics.median(r[k] for r in rounds) for k in keys}
        cells = ", ".join(
            f"{k} {medians[name][k]:.3f} ({min(r[k] for r in rounds):.3f}-{max(r[k] for r in rounds):.3f})"
            for k in keys
        )
        print(f"  {name:>8}: {cells}")
    for way, base in (("aiohttp", "httpx2"), ("runtime", "httpx2"), ("runtime", "aiohttp")):
        ratio = {k: medians[way][k] / medians[base][k] for k in keys}
        print(f"  {way} / {base}: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratio.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--watches", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running afterwards")
    parser.add_argument("--connection-memory", choices=sorted(TRANSPORTS), help=argparse.SUPPRESS)  # the child
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.connection_memory:
        print(json.dumps(asyncio.run(connection_memory(args.connection_memory, args.kubeconfig, args.watches))))
        return
    env = DevEnvironment(state_dir=paths.state_root() / "bench-client", bin_dir=paths.bin_dir())
    env.down(progress=lambda m: None)
    env.up(ClusterLayout(foreign=0, nodes_per_cluster=1), progress=lambda m: print(f"[cluster] {m}", flush=True))
    try:
        kube = env.client("home")
        for name in (NAMESPACE, QUIET):
            kube.create(Namespace(metadata=ObjectMeta(name=name)))
        config = KubeConfig.from_file(env.kubeconfig("home"))
        results = asyncio.run(measure(config, args))
        report(results, args)
        print(f"\n== RSS per open watch connection ({args.watches} watches, a child process per transport)")
        for name in TRANSPORTS:
            print(f"  {name:>8}: {connection_memory_in_child(name, str(env.kubeconfig('home')), args.watches):.0f} KB")
    finally:
        if not args.keep:
            env.down(progress=lambda m: None)


if __name__ == "__main__":
    main()
