"""Run a runtime component: `python -m runtime controller-manager|foreign-agent ...`.

In `cluster` mode this is the container's command; in `external` mode (dev env, tests) the same
command runs as a local process. SIGTERM/SIGINT stop it gracefully (queued work drains, then the
leader Lease is released). With leader election (the default) replicas of a component stand by with
warm informers (and serve webhooks, probes) while one leads; a leader that loses its Lease exits.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import ipaddress
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from lightkube import AsyncClient, KubeConfig

from runtime.api import names
from runtime.api.leaderelection import LeaderElectionTiming
from runtime.api.namespaceoffloading import PodOffloadingStrategy
from runtime.api.ondemand import DEFAULT_GRACE_PERIOD_SECONDS, OnDemandDefaults
from runtime.api.selectors import SelectorSyntaxError, parse_term
from runtime.controllers import (
    AdvertisementController,
    CaBundleController,
    NamespaceMapController,
    NamespaceOffloadingController,
    NamespaceSelectorController,
    OnDemandController,
    ShadowPodController,
)
from runtime.kube import EngineMetrics, ProbeServer
from runtime.kube.client import RuntimeClient, async_client
from runtime.kube.controlling import gate_on
from runtime.kube.leaderelection import LeaderElector, default_identity
from runtime.kube.memory import GcPauses, release_free_memory_every
from runtime.kube.supervising import restarting
from runtime.virtualkubelet.node import KUBELET_PORT, NODE_ADDRESS
from runtime.virtualkubelet.peerings import KubeletPorts, Peerings


def _ip_address(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IP address: {value!r}") from None


def _shard_name(value: str) -> str:
    if not names.is_pool_name(value):
        raise argparse.ArgumentTypeError(f"not a shard name (lowercase letters, digits, '-'): {value!r}")
    return value


def _cluster_selector(value: str) -> str:
    try:
        parse_term(value)
    except SelectorSyntaxError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value


def _cluster_port(value: str) -> tuple[str, int]:
    """`ID=PORT`: where the first virtual node of foreign cluster ID serves the kubelet API."""
    cluster_id, _, port = value.partition("=")
    if not cluster_id or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"not FOREIGN_CLUSTER_ID=PORT (a port 1-65535): {value!r}")
    return cluster_id, int(port)


def _cluster_kubeconfig(value: str) -> tuple[str, str]:
    cluster_id, _, kubeconfig = value.partition("=")
    if not cluster_id or not kubeconfig:
        raise argparse.ArgumentTypeError(f"not FOREIGN_CLUSTER_ID=KUBECONFIG: {value!r}")
    return cluster_id, kubeconfig


def _pool(value: str) -> tuple[str, int | None]:
    """`NAME` or `NAME=PORT`: a node pool and, if given, its kubelet API port."""
    name, _, port = value.partition("=")
    if not names.is_pool_name(name):
        raise argparse.ArgumentTypeError(f"not a pool name (lowercase letters, digits, '-'): {name!r}")
    if not port:
        return name, None
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"not a port (1-65535): {port!r} in {value!r}")
    return name, int(port)


def client_from(kubeconfig: str | None, field_manager: str) -> RuntimeClient:
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_service_account()
    return async_client(config, field_manager=field_manager)


def _exit_on_lost_leadership() -> None:
    # At once, without draining queues or running finalizers: the new leader may already write.
    logging.critical("lost the leader Lease: exiting so that the supervisor restarts this replica as a stand-by")
    logging.shutdown()
    os._exit(1)


async def serve(
    main: Coroutine[Any, Any, None],
    probes: ProbeServer,
    client: AsyncClient,
    args: argparse.Namespace,
    elector: LeaderElector | None = None,
) -> None:
    """Runs `main` with the probes (and, with an elector, only its leader's work queues); with
    --metrics-secure-port, /metrics over TLS for callers that `client`'s cluster authenticates and
    authorizes (cluster mode). Freed memory goes back to the OS every 30 s (runtime.kube.memory)."""
    gate_on(elector.is_leader if elector else None)  # before the task: it and its tasks inherit the gate
    task = asyncio.ensure_future(main)
    campaign = asyncio.ensure_future(elector.campaign(_exit_on_lost_leadership)) if elector else None
    trimming = asyncio.ensure_future(release_free_memory_every())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    secure = None
    if args.metrics_secure_port is not None:
        # Imported here: aiohttp adds ~10 MB to a process (measured: docs/performance.md#memory).
        from runtime.kube.securemetrics import SecureMetricsServer

        secure = SecureMetricsServer(client, probes.metrics.registry, args.metrics_address, args.metrics_secure_port)
        await secure.start()
    probes.start()
    logging.info("probes on http://%s:%d (/healthz, /readyz%s)", *probes.address, "" if secure else ", /metrics")
    try:
        await task
    except asyncio.CancelledError:
        logging.info("stopped")
    finally:
        trimming.cancel()
        if campaign is not None and elector is not None:
            campaign.cancel()
            await asyncio.gather(campaign, return_exceptions=True)
            await elector.release()  # after the queues drained: a successor starts at once
        probes.stop()
        if secure is not None:
            await secure.stop()


LEADER_ELECTION_FLAGS = (
    "--leader-elect-lease-duration",
    "--leader-elect-renew-deadline",
    "--leader-elect-retry-period",
)


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {value!r}")
    return seconds


def add_leader_election_flags(command: argparse.ArgumentParser) -> None:
    """client-go's leader election settings; replicas of a component compete for one Lease."""
    defaults = LeaderElectionTiming()
    command.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="stand by until this replica holds the component's Lease; only the leader writes",
    )
    lease, renew, retry = LEADER_ELECTION_FLAGS
    command.add_argument(
        lease,
        type=_seconds,
        default=defaults.lease_duration,
        help="seconds a stand-by waits after the leader's last renewal before taking over",
    )
    command.add_argument(
        renew,
        type=_seconds,
        default=defaults.renew_deadline,
        help="seconds the leader keeps trying to renew before it gives up (and exits)",
    )
    command.add_argument(retry, type=_seconds, default=defaults.retry_period, help="seconds between attempts")
    command.add_argument(
        "--leader-elect-namespace", default=names.LEADER_ELECTION_NAMESPACE, help="where the Lease lives"
    )
    command.add_argument(
        "--leader-elect-identity", default="", help="this replica's name in the Lease (default: hostname_uuid)"
    )


def elector_for(client: AsyncClient, args: argparse.Namespace, lease_name: str) -> LeaderElector | None:
    if not args.leader_elect:
        return None
    timing = LeaderElectionTiming(
        args.leader_elect_lease_duration, args.leader_elect_renew_deadline, args.leader_elect_retry_period
    )
    return LeaderElector(
        client,
        namespace=args.leader_elect_namespace,
        name=lease_name,
        identity=args.leader_elect_identity or default_identity(),
        timing=timing,
    )


async def controller_manager(home: AsyncClient, args: argparse.Namespace, probes: ProbeServer) -> None:
    """The NamespaceOffloading controller and the admission webhooks, which read its informer."""
    # Imported here: aiohttp adds ~10 MB to a process; only this one serves webhooks.
    from runtime.api.namespaceoffloading import stack_move_unfit_after
    from runtime.tls import issue_with
    from runtime.webhooks import WebhookServer, shared_ca

    # registered before the first await: /readyz answers from the start, and must not pass before
    # the webhooks listen (the Service sends admission calls to ready replicas)
    serving = asyncio.Event()
    probes.add_readiness("webhooks serving", serving.is_set)
    offloading = NamespaceOffloadingController(home, args.home_cluster_id)
    selectors = NamespaceSelectorController(home, offloading.offloadings)
    defaults = OnDemandDefaults(
        args.on_demand_pod_offloading_strategy, args.on_demand_cluster_selector, args.on_demand_grace_period
    )
    on_demand = OnDemandController(
        home, offloading.offloadings, selectors.namespaces, offloading.nodes, defaults, metrics=probes.metrics
    )
    service = f"{names.WEBHOOK_SERVICE}.{names.LIQO_NAMESPACE}.svc"
    # one CA for every replica: the webhook Service may reach any of them (not only the leader)
    certificate = await issue_with(await shared_ca(home), [args.webhook_address, "127.0.0.1", "localhost", service])
    ca_bundle = CaBundleController(home, certificate.ca_pem)
    webhooks = WebhookServer(
        lambda namespace: offloading.offloadings.store.get(f"{namespace}/{names.NAMESPACE_OFFLOADING_NAME}"),
        args.webhook_address,
        args.webhook_port,
        certificate.ssl_context(),
        home_cluster_id=args.home_cluster_id,
        stack_unfit_policy=lambda: stack_move_unfit_after(offloading.virtual_nodes.store.values()),
        registry=probes.metrics.registry,
    )
    probes.add_readiness("informers synced", offloading.offloadings.synced.is_set)
    probes.add_readiness("webhook CA in the webhook configurations", ca_bundle.synced)
    await webhooks.start()
    serving.set()
    try:
        await asyncio.gather(offloading.run(), selectors.run(), on_demand.run(), ca_bundle.run())
    finally:
        await webhooks.stop()


async def virtual_kubelet(
    home: AsyncClient, args: argparse.Namespace, probes: ProbeServer, leads: Callable[[], bool]
) -> None:
    """The virtual nodes of the foreign clusters this process serves (runtime.virtualkubelet.peerings)."""
    ports = KubeletPorts(
        base=args.kubelet_port or None,
        address=args.node_address,
        given=dict(args.kubelet_port_of),
        pools=[pool for pool, _ in args.pool],
        pool_ports=[port for _, port in args.pool] if all(port for _, port in args.pool) else (),
    )
    peerings = Peerings(
        home,
        home_cluster_id=args.home_cluster_id,
        metrics=probes.metrics,
        shard=args.foreign_cluster_id,
        shard_label=args.shard,
        ports=ports,
        node_address=args.node_address,
    )
    probes.add_readiness("peerings synced", lambda: peerings.ready(leads))
    await peerings.run()


async def foreign_agent(client: AsyncClient, cluster_id: str, probes: ProbeServer) -> None:
    """Twin namespaces, the pods ShadowPods ask for, and the resources advertised to each home."""
    maps = NamespaceMapController(client, cluster_id)

    def twin_origin(namespace: str) -> str | None:
        twin = maps.namespaces.store.get(namespace)
        return (twin.metadata.labels or {}).get(names.ORIGIN_LABEL) if twin is not None else None

    shadows = ShadowPodController(
        client, cluster_id, twin_origin=twin_origin, twins=maps.namespaces, quotas=maps.quotas
    )
    assert shadows.grants is not None
    advertisements = AdvertisementController(
        client,
        cluster_id,
        offloaded_pods=shadows.pods,
        advertisements=shadows.grants.advertisements,
        quotas=shadows.grants.quotas,
    )
    probes.add_readiness(  # by cluster: an agent process may serve several (a restarted agent replaces its own)
        f"informers synced ({cluster_id})", lambda: maps.maps.synced.is_set() and shadows.shadows.synced.is_set()
    )
    await asyncio.gather(maps.run(), shadows.run(), advertisements.run())


async def foreign_agents(clients: Mapping[str, AsyncClient], probes: ProbeServer) -> None:
    """The agents of several foreign clusters in one process (external mode), each restarted alone
    when it fails: one cluster's API server down or failing holds up only its own agent."""
    await asyncio.gather(
        *(
            restarting(
                f"the foreign agent of {cluster_id}", functools.partial(foreign_agent, client, cluster_id, probes)
            )
            for cluster_id, client in clients.items()
        )
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line of every component (the stack's Deployments are checked against it)."""
    parser = argparse.ArgumentParser(prog="python -m runtime", description=__doc__)
    parser.add_argument("--probe-address", default="127.0.0.1", help="where /healthz, /readyz, /metrics listen")
    parser.add_argument("--probe-port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--metrics-secure-port",
        type=int,
        help="serve /metrics here over TLS, to callers with a token allowed `get` on /metrics "
        "(TokenReview + SubjectAccessReview), instead of in the clear on the probe port; 0 picks a free port",
    )
    parser.add_argument("--metrics-address", default="0.0.0.0", help="where the secure /metrics listens")
    parser.add_argument("--log-level", default="INFO")
    commands = parser.add_subparsers(dest="command", required=True)
    manager = commands.add_parser("controller-manager", help="home side: NamespaceOffloading")
    manager.add_argument("--kubeconfig", help="of the home cluster (default: in-cluster service account)")
    manager.add_argument("--home-cluster-id", required=True)
    manager.add_argument("--webhook-address", default="127.0.0.1", help="where the admission webhooks listen")
    manager.add_argument("--webhook-port", type=int, default=9443)
    manager.add_argument(
        "--on-demand-pod-offloading-strategy",
        type=PodOffloadingStrategy,
        choices=list(PodOffloadingStrategy),
        default=PodOffloadingStrategy.LOCAL_AND_REMOTE,
        help=f"on-demand offloading's podOffloadingStrategy where no {names.ON_DEMAND_STRATEGY_ANNOTATION} says",
    )
    manager.add_argument(
        "--on-demand-cluster-selector",
        action="append",
        default=[],
        type=_cluster_selector,
        metavar="SELECTOR",
        help="on-demand offloading's foreign clusters, by virtual node labels (repeat: ORed); default: every one",
    )
    manager.add_argument(
        "--on-demand-grace-period",
        type=_seconds,
        default=DEFAULT_GRACE_PERIOD_SECONDS,
        help="seconds an on-demand offloading stays without pods on virtual nodes before it is removed",
    )
    agent = commands.add_parser("foreign-agent", help="foreign side: NamespaceMap, ShadowPods, advertisements")
    agent.add_argument("--kubeconfig", help="of this foreign cluster (default: in-cluster service account)")
    agent.add_argument("--cluster-id", help="this foreign cluster's id")
    agent.add_argument(
        "--cluster",
        action="append",
        default=[],
        type=_cluster_kubeconfig,
        metavar="ID=KUBECONFIG",
        help="serve this foreign cluster too, from this process (repeat; external mode: one process for every "
        "agent, each isolated and restarted alone; needs --no-leader-elect)",
    )
    kubelet = commands.add_parser(
        "virtual-kubelet", help="home side: the virtual nodes of the foreign clusters (all, or a shard of them)"
    )
    kubelet.add_argument("--kubeconfig", help="of the home cluster (default: in-cluster service account)")
    kubelet.add_argument("--home-cluster-id", required=True)
    kubelet.add_argument(
        "--foreign-cluster-id",
        action="append",
        default=[],
        metavar="ID",
        help="a foreign cluster this process serves (repeat for a shard of them); none: every foreign cluster "
        "with a VirtualNode at home, each served from when its VirtualNode appears",
    )
    kubelet.add_argument(
        "--shard",
        type=_shard_name,
        help=f"serve the foreign clusters whose VirtualNodes are labelled {names.VIRTUAL_KUBELET_SHARD_LABEL}=SHARD "
        "(cluster mode, liqo:runtime.peeringsPerProcess); also names the leader Lease",
    )
    kubelet.add_argument(
        "--node-address",
        default=NODE_ADDRESS,
        type=_ip_address,
        help="the virtual kubelet's own IP: the Node's InternalIP and the hostIP of its pods "
        "(cluster mode: its pod IP, from the downward API)",
    )
    kubelet.add_argument(
        "--kubelet-port",
        type=int,
        default=KUBELET_PORT,
        help="where the kubelet APIs (logs, exec, attach, port-forward) listen: each virtual node takes the first "
        "free port from here up (the Node advertises it); 0 serves no kubelet API",
    )
    kubelet.add_argument(
        "--kubelet-port-of",
        action="append",
        default=[],
        type=_cluster_port,
        metavar="ID=PORT",
        help="the kubelet API port of foreign cluster ID's first virtual node (its node pools take the next ones)",
    )
    kubelet.add_argument(
        "--pool",
        action="append",
        default=[],
        type=_pool,
        metavar="NAME[=PORT]",
        help="a node pool the foreign cluster is offered as (repeat for each; its virtual node is "
        "liqo-<foreign id>-<NAME>), and where its kubelet API listens (default: the ports after "
        "--kubelet-port, in order); none: one virtual node, liqo-<foreign id>",
    )
    for command in (manager, agent, kubelet):
        add_leader_election_flags(command)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "virtual-kubelet" and not 0 <= args.kubelet_port <= 65535:
        parser.error(f"--kubelet-port must be between 1 and 65535 (0: no kubelet API), got {args.kubelet_port}")
    if args.command == "virtual-kubelet":
        if args.pool and len(args.foreign_cluster_id) != 1:
            parser.error("--pool: name the one foreign cluster whose node pools these are (--foreign-cluster-id)")
        if len(set(args.foreign_cluster_id)) != len(args.foreign_cluster_id):
            parser.error(f"--foreign-cluster-id: each cluster may be named once, got {args.foreign_cluster_id}")
        pools = [pool for pool, _ in args.pool]
        if len(set(pools)) != len(pools):
            parser.error(f"--pool: each pool may be named once, got {pools}")
        ports = [port for _, port in args.pool if port]
        if ports and (len(ports) != len(pools) or len(set(ports)) != len(ports)):
            parser.error(f"--pool: give every pool its own port or none, got {[f'{n}={p}' for n, p in args.pool]}")
    if args.command == "foreign-agent":
        if bool(args.cluster_id) == bool(args.cluster) or (args.kubeconfig and args.cluster):
            parser.error(
                "foreign-agent: give --cluster-id (with --kubeconfig, or in the cluster) or --cluster ID=KUBECONFIG"
            )
        ids = [cluster_id for cluster_id, _ in args.cluster]
        if len(set(ids)) != len(ids):
            parser.error(f"--cluster: each foreign cluster may be named once, got {ids}")
        if args.cluster and args.leader_elect:
            parser.error(
                "--cluster: an agent process serving clusters by name runs without leader election "
                "(--no-leader-elect); in a cluster each agent runs in its own"
            )
    if args.metrics_secure_port is not None and not 0 <= args.metrics_secure_port <= 65535:
        parser.error(f"--metrics-secure-port must be between 0 and 65535, got {args.metrics_secure_port}")
    timing = LeaderElectionTiming(
        args.leader_elect_lease_duration, args.leader_elect_renew_deadline, args.leader_elect_retry_period
    )
    for problem in timing.problems(LEADER_ELECTION_FLAGS):
        parser.error(problem)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # lightkube's HTTP client (httpx2) logs every request at INFO: ~23,000 lines for a 1,000-object burst
        logging.getLogger("httpx2").setLevel(logging.WARNING)

    metrics = EngineMetrics()
    pauses = GcPauses()
    metrics.registry.register(pauses)
    gc.callbacks.append(pauses)
    elsewhere = "" if args.metrics_secure_port is None else f"https://<pod>:{args.metrics_secure_port}/metrics"
    probes = ProbeServer(metrics, args.probe_address, args.probe_port, metrics_elsewhere=elsewhere)
    if args.command == "controller-manager":
        home = client_from(args.kubeconfig, "liqo-controller-manager")
        metrics.count_requests(home, args.home_cluster_id)
        elector = elector_for(home, args, names.CONTROLLER_MANAGER_LEASE)
        asyncio.run(serve(controller_manager(home, args, probes), probes, home, args, elector))
    elif args.command == "virtual-kubelet":
        home = client_from(args.kubeconfig, "liqo-virtual-kubelet")
        metrics.count_requests(home, args.home_cluster_id)
        given = args.foreign_cluster_id
        one = len(given) == 1 and not args.shard
        lease = names.virtual_kubelet_lease(given[0]) if one else names.virtual_kubelet_shard_name(args.shard or "all")
        elector = elector_for(home, args, lease)
        leads = elector.is_leader.is_set if elector else lambda: True
        asyncio.run(serve(virtual_kubelet(home, args, probes, leads), probes, home, args, elector))
    elif args.cluster:
        clients = {cluster_id: client_from(kubeconfig, "liqo-foreign-agent") for cluster_id, kubeconfig in args.cluster}
        for cluster_id, client in clients.items():
            metrics.count_requests(client, cluster_id)
        first = next(iter(clients.values()))  # the secure /metrics' reviews: asked of the first cluster
        asyncio.run(serve(foreign_agents(clients, probes), probes, first, args))
    else:
        client = client_from(args.kubeconfig, "liqo-foreign-agent")
        metrics.count_requests(client, args.cluster_id)
        elector = elector_for(client, args, names.FOREIGN_AGENT_LEASE)
        asyncio.run(serve(foreign_agent(client, args.cluster_id, probes), probes, client, args, elector))
    return 0


if __name__ == "__main__":
    sys.exit(main())
