"""Links bench: offloading through a link with no latency against the `wan` profile, in one run, and
the recovery time after a silent drop of a client's open connections under each liveness check.

    .venv/bin/python -m tests.bench.bench_links [--bursts 100,1000] [--rounds 2] [--singles 20] [--recovery 3]

Starts its own home and foreign cluster (state under $LIQO_STACK_STATE/bench-links) and a Toxiproxy
link to the foreign API server (liqo_stack/dev/links.py); the stack reaches the foreign cluster
through it (`apiServerAddress`), so the virtual kubelet does too. Then, alternating the link's
profile (`none`: the proxy alone; `wan`: 50 +/- 10 ms each way) round by round:
- bursts: N bare pods created in the offloaded home namespace, time until all are Running at home,
  and the most connections the virtual kubelet held to the link meanwhile (sampled every 0.2 s);
- single pods: one at a time, time until Running at home, p50/p99 and the added latency.
Then, in this process against the home API server: a ConfigMap informer whose open connections are
dropped without a word (nftables, as tests/support/links.py), and the seconds until an event made
after the drop reaches it, with both checks of runtime/kube/liveness.py, with each alone, and with
neither (capped at --recovery-cap seconds). Needs root for nftables.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import statistics
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace

from liqo_stack.dev import paths
from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import SHARED_KUBELET, ExternalRuntime
from liqo_stack.dev.links import LinkNetwork
from runtime.kube import Informer, liveness, multiplexing, transport
from runtime.kube.client import async_client
from tests.bench.bench_offloading import (
    FOREIGN,
    HOME,
    OFFLOADED,
    Clusters,
    delete_all,
    fresh_clusters,
    install,
    run_until_running,
)
from tests.bench.stages import percentile
from tests.support.links import SilentDrop, client_ports, local_ports_to
from tests.support.sockets import api_ports, established_by_port

PROFILES = ("none", "wan")
# the checks of runtime/kube/liveness.py, each on or off: patched in this process for the recovery figures
MECHANISMS = {
    "PING + keepalive": (True, True),
    "HTTP/2 PING alone": (True, False),
    "TCP keepalive + user timeout alone": (False, True),
    "neither (before this change)": (False, False),
}


def link_connections(runtime: ExternalRuntime, link_port: int) -> int:
    pid = runtime.pid(SHARED_KUBELET)
    return 0 if pid is None else established_by_port(pid)[link_port]


async def burst_through(
    clusters: Clusters, runtime: ExternalRuntime, link_port: int, size: int, name: str
) -> tuple[float, int]:
    """Seconds until `size` offloaded pods are Running at home, and the most connections meanwhile."""
    most = 0

    async def sample() -> None:
        nonlocal most
        while True:
            most = max(most, link_connections(runtime, link_port))
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample())
    try:
        seconds = await run_until_running(clusters.home, OFFLOADED, name, size)
    finally:
        sampler.cancel()
    await delete_all(clusters, name)
    return seconds, most


async def offloading(
    clusters: Clusters, runtime: ExternalRuntime, network: LinkNetwork, link_port: int, args: argparse.Namespace
) -> None:
    sizes = [int(s) for s in args.bursts.split(",") if s]
    bursts: dict[tuple[int, str], list[tuple[float, int]]] = {}
    singles: dict[str, list[float]] = {p: [] for p in PROFILES}
    for size in sizes:
        for round_no in range(args.rounds):
            for profile in PROFILES if round_no % 2 == 0 else PROFILES[::-1]:
                network.set_profile(profile)
                figures = await burst_through(clusters, runtime, link_port, size, f"b{size}-{round_no}-{profile}")
                bursts.setdefault((size, profile), []).append(figures)
                seconds, most = figures
                print(f"  {size:>5} pods, round {round_no + 1}, {profile:>4}: {seconds:7.2f} s, {most} connections")
    for index in range(args.singles):
        for profile in PROFILES if index % 2 == 0 else PROFILES[::-1]:
            network.set_profile(profile)
            name = f"s{index}-{profile}"
            singles[profile].append(await run_until_running(clusters.home, OFFLOADED, name, 1))
            await delete_all(clusters, name)
    network.set_profile("none")
    after = link_connections(runtime, link_port)
    await asyncio.sleep(args.settle)  # what the bursts opened idles out (transport.IDLE_CONNECTION_SECONDS)
    idle = link_connections(runtime, link_port)

    print("\n== offloaded bursts through the link: time until every pod is Running at home")
    print("  wan: 50 +/- 10 ms each way; ratio wan / none (target <= 1.3 at 1,000 pods); connections: the most")
    print("  the virtual kubelet held to the foreign API server (through the link) during the bursts (target <= 10)")
    for size in sizes:
        none, wan = ([s for s, _ in bursts[(size, p)]] for p in PROFILES)
        most = max(c for p in PROFILES for _, c in bursts[(size, p)])
        ratio = statistics.median(wan) / statistics.median(none)
        print(
            f"  {size:>5} pods: none {statistics.median(none):7.2f} s ({min(none):.1f}-{max(none):.1f}),"
            f" wan {statistics.median(wan):7.2f} s ({min(wan):.1f}-{max(wan):.1f}): {ratio:.2f}x;"
            f" at most {most} connections"
        )
    print(f"  right after the single pods: {after} connections; idle {args.settle:.0f} s later: {idle}")
    if singles["none"]:
        print("\n== single pod, time until Running at home")
        for q, label in ((0.5, "p50"), (0.99, "p99")):
            plain, slow = (percentile(singles[p], q) * 1000 for p in PROFILES)
            print(f"  {label}: none {plain:6.0f} ms, wan {slow:6.0f} ms, added {slow - plain:+6.0f} ms")


@contextlib.contextmanager
def mechanisms(ping: bool, keepalive: bool) -> Iterator[None]:
    """The liveness checks of this process on or off (the runtime's own processes keep theirs)."""
    with contextlib.ExitStack() as stack:
        if not ping:
            stack.enter_context(mock.patch.object(multiplexing, "PING_AFTER_IDLE_SECONDS", 1e9))
        if not keepalive:
            stack.enter_context(mock.patch.object(multiplexing, "apply_socket_options", lambda sock: None))
            stack.enter_context(mock.patch.object(transport, "live_socket", _plain_socket))
        yield


def _plain_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    """aiohttp's socket, without the liveness options."""
    sock = socket.socket(family=addr_info[0], type=addr_info[1], proto=addr_info[2])
    sock.setblocking(False)
    return sock


async def one_recovery(env: DevEnvironment, admin: AsyncClient, namespace: str, cap: float) -> float | None:
    """Seconds from a silent drop of an informer's connections until it sees an event made after."""
    config = KubeConfig.from_file(env.kubeconfig(HOME)).get()
    assert config is not None
    (server_port,) = api_ports(env, [HOME])
    client = async_client(config, field_manager="bench-links")
    informer = Informer(client, ConfigMap, namespace=namespace, labels={"bench": "links"})
    seen: set[str] = set()
    informer.add_handler(lambda event: seen.add(event.obj.metadata.name))
    task = asyncio.create_task(informer.run())
    name = f"after-{time.monotonic_ns()}"
    try:
        await asyncio.wait_for(informer.synced.wait(), 30)
        # an event first: the watch is streaming (a connection of its own), not only listed
        before = ObjectMeta(name=f"before-{name}", namespace=namespace, labels={"bench": "links"})
        await admin.create(ConfigMap(metadata=before))
        while before.name not in seen:
            await asyncio.sleep(0.05)
        with SilentDrop(server_port, local_ports_to(os.getpid(), server_port) & client_ports(client)):
            started = time.monotonic()
            await admin.create(
                ConfigMap(metadata=ObjectMeta(name=name, namespace=namespace, labels={"bench": "links"}))
            )
            while name not in seen:
                if time.monotonic() - started > cap:
                    return None
                await asyncio.sleep(0.05)
            return time.monotonic() - started
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()


async def recovery(env: DevEnvironment, samples: int, cap: float) -> None:
    admin = AsyncClient(KubeConfig.from_file(env.kubeconfig(HOME)), field_manager="bench-links")
    namespace = f"bench-links-{os.getpid()}"
    await admin.create(Namespace(metadata=ObjectMeta(name=namespace)))
    results: dict[str, list[float | None]] = {}
    try:
        for index in range(samples):
            for label, (ping, keepalive) in MECHANISMS.items():
                with mechanisms(ping, keepalive):
                    figure = await one_recovery(env, admin, namespace, cap)
                results.setdefault(label, []).append(figure)
                print(f"  recovery {index + 1}, {label}: {'-' if figure is None else f'{figure:.1f} s'}", flush=True)
    finally:
        await admin.delete(Namespace, namespace)
        await admin.close()
    print("\n== after a silent drop of every open connection: seconds until an event made after it is seen")
    print(f"  (target 30 s; client-go's HTTP/2 health check: 30 + 15 = 45 s; '-': not within {cap:.0f} s)")
    for label, figures in results.items():
        found = [f for f in figures if f is not None]
        cells = ", ".join("-" if f is None else f"{f:.1f}" for f in figures)
        summary = f"median {statistics.median(found):.1f} s" if found else "never"
        print(f"  {label:>36}: {summary} ({cells})")
    print(
        f"  cost: one PING frame and its answer per HTTP/2 connection every {liveness.PING_AFTER_IDLE_SECONDS:.0f} s"
        f" of silence (no API request, no write); TCP probes every {liveness.KEEPALIVE_INTERVAL_SECONDS} s after"
        f" {liveness.KEEPALIVE_IDLE_SECONDS} s idle, in the kernel"
    )


async def measure(
    env: DevEnvironment, runtime: ExternalRuntime, network: LinkNetwork, link_port: int, args: argparse.Namespace
) -> None:
    clusters = Clusters(env)
    if args.bursts or args.singles:
        print("[bench] offloading through the link ...", flush=True)
        await offloading(clusters, runtime, network, link_port, args)
    if args.recovery:
        print("[bench] recovery after a silent drop ...", flush=True)
        await recovery(env, args.recovery, args.recovery_cap)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bursts", default="100,1000", help="burst sizes, comma-separated ('' to skip)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per burst size and profile, alternated")
    parser.add_argument("--singles", type=int, default=20, help="single-pod samples per profile")
    parser.add_argument("--recovery", type=int, default=3, help="silent-drop samples per mechanism (0: skip)")
    parser.add_argument(
        "--recovery-cap", type=float, default=60.0, help="seconds after which a drop counts as never healed"
    )
    parser.add_argument("--settle", type=float, default=95.0, help="seconds before the idle connections are counted")
    parser.add_argument("--keep", action="store_true", help="leave the clusters running afterwards")
    args = parser.parse_args()
    state, env = fresh_clusters("bench-links")
    network = LinkNetwork(state / "links", paths.bin_dir())
    (foreign_port,) = api_ports(env, [FOREIGN])
    addresses = network.up({FOREIGN: f"127.0.0.1:{foreign_port}"}, profile="none")
    link_port = int(addresses[FOREIGN].rsplit(":", 1)[1])
    linked = {
        "clusterId": FOREIGN,
        "kubeconfigPath": str(env.kubeconfig(FOREIGN)),
        "apiServerAddress": addresses[FOREIGN],
    }
    extra: dict[str, object] = {"foreignClusters": [linked]}
    runtime = install(env, state, extra_config=extra)
    try:
        asyncio.run(measure(env, runtime, network, link_port, args))
    finally:
        runtime.stop_all()
        network.down()
        if not args.keep:
            env.down(progress=lambda m: None)


if __name__ == "__main__":
    main()
