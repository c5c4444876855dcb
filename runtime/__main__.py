"""Run a runtime component: `python -m runtime controller-manager|foreign-agent ...`.

In `cluster` mode this is the container's command; in `external` mode (dev env, tests) the same
command runs as a local process. SIGTERM/SIGINT stop it gracefully (queued work drains).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import signal
import sys
from collections.abc import Coroutine
from typing import Any

from lightkube import AsyncClient, KubeConfig

from runtime.api import names
from runtime.controllers import (
    AdvertisementController,
    CaBundleController,
    NamespaceMapController,
    NamespaceOffloadingController,
    ShadowPodController,
)
from runtime.kube import EngineMetrics, ProbeServer
from runtime.virtualkubelet.kubelet import VirtualKubelet, foreign_kubeconfig
from runtime.virtualkubelet.node import FIELD_MANAGER, KUBELET_PORT, NODE_ADDRESS


def _ip_address(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IP address: {value!r}") from None


def client_from(kubeconfig: str | None, field_manager: str) -> AsyncClient:
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_service_account()
    return AsyncClient(config, field_manager=field_manager)


async def serve(
    main: Coroutine[Any, Any, None], probes: ProbeServer, client: AsyncClient, args: argparse.Namespace
) -> None:
    """Runs `main` with the probes; with --metrics-secure-port, /metrics over TLS for callers that
    `client`'s cluster authenticates and authorizes (cluster mode)."""
    task = asyncio.ensure_future(main)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    secure = None
    if args.metrics_secure_port is not None:
        # Imported here: aiohttp and cryptography add ~20 MB to a process (measured in the README).
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
        probes.stop()
        if secure is not None:
            await secure.stop()


async def controller_manager(home: AsyncClient, args: argparse.Namespace, probes: ProbeServer) -> None:
    """The NamespaceOffloading controller and the admission webhooks, which read its informer."""
    # Imported here: aiohttp and cryptography add ~18 MB to a process; only this one serves TLS.
    from runtime.webhooks import WebhookServer, issue_certificate

    offloading = NamespaceOffloadingController(home, args.home_cluster_id)
    service = f"{names.WEBHOOK_SERVICE}.{names.LIQO_NAMESPACE}.svc"
    certificate = issue_certificate([args.webhook_address, "127.0.0.1", "localhost", service])
    ca_bundle = CaBundleController(home, certificate.ca_pem)
    webhooks = WebhookServer(
        lambda namespace: offloading.offloadings.store.get(f"{namespace}/{names.NAMESPACE_OFFLOADING_NAME}"),
        args.webhook_address,
        args.webhook_port,
        certificate.ssl_context(),
        home_cluster_id=args.home_cluster_id,
    )
    probes.add_readiness("informers synced", offloading.offloadings.synced.is_set)
    probes.add_readiness("webhook CA in the webhook configurations", ca_bundle.synced)
    await webhooks.start()
    try:
        await asyncio.gather(offloading.run(), ca_bundle.run())
    finally:
        await webhooks.stop()


async def virtual_kubelet(home: AsyncClient, args: argparse.Namespace, probes: ProbeServer) -> None:
    """The virtual node, its pods, the reflection of what they use (runtime.reflection) and its kubelet API."""
    kubeconfig = await foreign_kubeconfig(home, args.foreign_cluster_id)
    foreign = AsyncClient(KubeConfig.from_dict(kubeconfig), field_manager=FIELD_MANAGER)
    kubelet = VirtualKubelet(
        home,
        foreign,
        home_cluster_id=args.home_cluster_id,
        foreign_cluster_id=args.foreign_cluster_id,
        metrics=probes.metrics,
        node_address=args.node_address,
        kubelet_port=args.kubelet_port or None,
    )
    probes.add_readiness("informers synced", kubelet.synced.is_set)
    if not args.kubelet_port:
        await kubelet.run()
        return
    # Imported here: aiohttp and cryptography add ~20 MB to a process (measured in the README).
    from runtime.virtualkubelet.kubeletapi import ForeignEndpoint, KubeletApiServer
    from runtime.virtualkubelet.servingcert import serving_certificate

    certificate = await serving_certificate(home, kubelet.node.node_name, [args.node_address])
    api = KubeletApiServer(
        home,
        ForeignEndpoint.from_kubeconfig(kubeconfig),
        node_name=kubelet.node.node_name,
        remote_of=kubelet.remote_of,
        pods_on_node=kubelet.offloaded_pods,
        address=args.node_address,
        port=args.kubelet_port,
        tls=certificate.ssl_context(),
    )
    await api.start()
    try:
        await kubelet.run()
    finally:
        await api.stop()


async def foreign_agent(client: AsyncClient, cluster_id: str, probes: ProbeServer) -> None:
    """Twin namespaces, the pods ShadowPods ask for, and the resources advertised to each home."""
    maps = NamespaceMapController(client, cluster_id)
    shadows = ShadowPodController(client, cluster_id)
    advertisements = AdvertisementController(client, cluster_id)
    probes.add_readiness("informers synced", lambda: maps.maps.synced.is_set() and shadows.shadows.synced.is_set())
    await asyncio.gather(maps.run(), shadows.run(), advertisements.run())


def main(argv: list[str] | None = None) -> int:
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
    agent = commands.add_parser("foreign-agent", help="foreign side: NamespaceMap")
    agent.add_argument("--kubeconfig", help="of this foreign cluster (default: in-cluster service account)")
    agent.add_argument("--cluster-id", required=True)
    kubelet = commands.add_parser("virtual-kubelet", help="home side: the virtual node of one foreign cluster")
    kubelet.add_argument("--kubeconfig", help="of the home cluster (default: in-cluster service account)")
    kubelet.add_argument("--home-cluster-id", required=True)
    kubelet.add_argument("--foreign-cluster-id", required=True)
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
        help="where the kubelet API (logs, exec, attach, port-forward) listens; the Node advertises it, so "
        "each virtual kubelet on a host needs its own; 0 serves no kubelet API",
    )
    args = parser.parse_args(argv)
    if args.command == "virtual-kubelet" and not 0 <= args.kubelet_port <= 65535:
        parser.error(f"--kubelet-port must be between 1 and 65535 (0: no kubelet API), got {args.kubelet_port}")

    if args.metrics_secure_port is not None and not 0 <= args.metrics_secure_port <= 65535:
        parser.error(f"--metrics-secure-port must be between 0 and 65535, got {args.metrics_secure_port}")
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    metrics = EngineMetrics()
    elsewhere = "" if args.metrics_secure_port is None else f"https://<pod>:{args.metrics_secure_port}/metrics"
    probes = ProbeServer(metrics, args.probe_address, args.probe_port, metrics_elsewhere=elsewhere)
    if args.command == "controller-manager":
        home = client_from(args.kubeconfig, "liqo-controller-manager")
        asyncio.run(serve(controller_manager(home, args, probes), probes, home, args))
    elif args.command == "virtual-kubelet":
        home = client_from(args.kubeconfig, "liqo-virtual-kubelet")
        asyncio.run(serve(virtual_kubelet(home, args, probes), probes, home, args))
    else:
        client = client_from(args.kubeconfig, "liqo-foreign-agent")
        asyncio.run(serve(foreign_agent(client, args.cluster_id, probes), probes, client, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
