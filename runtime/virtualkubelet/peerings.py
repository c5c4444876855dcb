"""The peerings one virtual-kubelet process serves, each isolated from the others.

A process serves the foreign clusters it is given (`--foreign-cluster-id`, repeated), those whose
VirtualNodes carry its shard's label (`--shard`: cluster mode's shards), or, given neither, every
foreign cluster with a VirtualNode at home. It reads the VirtualNodes through the
process's shared home informers and keeps one task per foreign cluster:
- started once the cluster has a VirtualNode (a peering that `pulumi up` adds, or one that comes
  back after its removal, is served without a restart of anything);
- ended by the peering itself once every virtual node of it is removed (removal.py), or cancelled
  when the cluster has no VirtualNode left (its finalizer removed by hand: abandoned);
- restarted alone when it fails, with backoff (runtime/kube/supervising.py); the restart is an
  event on the VirtualNode, the metric `liqo_peering_restarts_total{cluster}`, its Nodes NotReady
  (reason `PeeringFailed`) until it runs again, then their condition `PeeringRestarted`.
Each peering has its own foreign client, informers and work queues (with their own workers), so a
foreign API server that is down, slow or failing holds up only its own peering's work, and one
peering's burst fills only its own queues: the others' status updates keep their workers.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightkube import AsyncClient
from prometheus_client import Counter, Gauge

from runtime.api import names
from runtime.api.resources import VirtualNodeResource
from runtime.kube import EngineMetrics, Event, WorkQueue, unless_gone
from runtime.kube.controlling import leads_now
from runtime.kube.shared import SharedWatches
from runtime.kube.supervising import Backoff, being_cancelled, cancel_once
from runtime.kube.warnings import Warnings
from runtime.virtualkubelet.kubelet import ServedPeering, serve_peering, served_nodes
from runtime.virtualkubelet.node import NODE_ADDRESS, address_family, declare_not_ready
from runtime.virtualkubelet.restarts import RESTARTED_REASON, PeeringRestarts

log = logging.getLogger(__name__)


def wanted_clusters(virtual_nodes: Mapping[str, Any], shard: Sequence[str]) -> dict[str, dict[str, bool]]:
    """Foreign cluster id -> its VirtualNodes (name -> held by a virtual kubelet: our finalizer), for
    the clusters to serve: those of the shard (every one if empty) with a VirtualNode that is not
    being deleted, or that is still held (only a virtual kubelet can finish its removal)."""
    found: dict[str, dict[str, bool]] = {}
    for vn in virtual_nodes.values():
        cluster_id = (vn.get("spec") or {}).get("clusterID") or (vn.metadata.labels or {}).get(
            names.REMOTE_CLUSTER_ID_LABEL
        )
        if not cluster_id or (shard and cluster_id not in shard):
            continue
        held = names.VIRTUAL_NODE_FINALIZER in (vn.metadata.finalizers or [])
        found.setdefault(cluster_id, {})[vn.metadata.name] = held
    return {
        cluster_id: nodes
        for cluster_id, nodes in found.items()
        if any(
            held or not virtual_nodes[f"{names.LIQO_NAMESPACE}/{name}"].metadata.deletionTimestamp
            for name, held in nodes.items()
        )
    }


HIGHEST_PORT = 65535


def port_free(port: int, address: str) -> bool:
    """Nothing listens on `port` at `address` (the kubelet APIs bind with SO_REUSEADDR, as here). Any
    other failure to bind (an address this host does not have) is raised: no port would do."""
    with socket.socket(address_family(address)) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return False
            raise OSError(err.errno, f"the kubelet API cannot listen on {address}: {err.strerror}") from err
    return True


@dataclass
class KubeletPorts:
    """Where each virtual node's kubelet API listens. `given`: a foreign cluster's first port (its
    pools take the next ones); `pools`/`pool_ports`: the one cluster of a process that names its node
    pools (cluster mode); the others take free ports from `base` up (None: no kubelet API)."""

    base: int | None
    address: str = NODE_ADDRESS
    given: Mapping[str, int] = field(default_factory=dict)
    pools: Sequence[str] = ()
    pool_ports: Sequence[int] = ()
    taken: dict[str, set[int]] = field(default_factory=dict)  # by foreign cluster, while it is served

    def assign(self, cluster_id: str, existing: Mapping[str, bool]) -> tuple[tuple[str, ...], dict[str, int | None]]:
        """The virtual nodes of `cluster_id` to serve (the primary first) and their ports: a given port for
        the primary, and for every other node the first port from `base` up (from the given one without a
        base) that no node of this process holds and nothing on the host listens on."""
        first = self.given.get(cluster_id)
        node_names, ports = served_nodes(existing, cluster_id, self.pools, first or self.base, self.pool_ports)
        if not self.pools:  # the pools' ports are named on the command line (cluster mode): kept as given
            held = {port for ports_of in self.taken.values() for port in ports_of}
            held |= {port for other, port in self.given.items() if other != cluster_id}  # theirs, served or not
            ports = dict.fromkeys(node_names)
            if first is not None:
                ports[node_names[0]] = first
                held.add(first)
            start = self.base or (first + 1 if first is not None else None)
            if start is not None:
                candidate = start
                for name in node_names:
                    if ports[name] is not None:
                        continue
                    while candidate > HIGHEST_PORT or candidate in held or not port_free(candidate, self.address):
                        if candidate >= HIGHEST_PORT:
                            raise OSError(
                                f"no free port for the kubelet API of {name} on {self.address} from {start} up: "
                                f"give the cluster a port (--kubelet-port-of {cluster_id}=PORT) or start lower "
                                "(--kubelet-port)"
                            )
                        candidate += 1
                    ports[name] = candidate
                    held.add(candidate)
        self.taken[cluster_id] = {port for port in ports.values() if port is not None}
        return node_names, ports

    def release(self, cluster_id: str) -> None:
        self.taken.pop(cluster_id, None)


class PeeringMetrics:
    def __init__(self, metrics: EngineMetrics) -> None:
        self.restarts = Counter(
            "liqo_peering_restarts_total",
            "times a peering failed and was restarted in its virtual-kubelet process",
            ["cluster"],
            registry=metrics.registry,
        )
        self.served = Gauge(
            "liqo_peering_served", "1 while this process serves the peering", ["cluster"], registry=metrics.registry
        )


class Peerings:
    def __init__(
        self,
        home: AsyncClient,
        *,
        home_cluster_id: str,
        metrics: EngineMetrics,
        shard: Sequence[str] = (),
        shard_label: str | None = None,
        ports: KubeletPorts | None = None,
        node_address: str = NODE_ADDRESS,
    ) -> None:
        """`shard`: the foreign clusters to serve (empty: every one with a VirtualNode at home);
        `shard_label`: only those whose VirtualNodes are labelled so (names.VIRTUAL_KUBELET_SHARD_LABEL)."""
        self.home = home
        self.home_cluster_id = home_cluster_id
        self.metrics = metrics
        self.stats = PeeringMetrics(metrics)
        self.shard = tuple(shard)
        self.ports = ports or KubeletPorts(base=None, address=node_address)
        self.node_address = node_address
        self.shared_home = SharedWatches(home)
        labels = {names.VIRTUAL_KUBELET_SHARD_LABEL: shard_label} if shard_label else None
        self.virtual_nodes = self.shared_home.informer(
            VirtualNodeResource, namespace=names.LIQO_NAMESPACE, labels=labels
        )
        self.virtual_nodes.add_handler(self._on_virtual_node)
        self.queue = WorkQueue(self.reconcile, workers=1, name="peerings", metrics=metrics)
        self.served: dict[str, ServedPeering] = {}
        self.serving_nodes: dict[str, tuple[str, ...]] = {}  # by foreign cluster: the nodes its peering serves
        self.restarts: dict[str, PeeringRestarts] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.warnings = Warnings(home, "liqo-virtual-kubelet")

    def _on_virtual_node(self, event: Event) -> None:
        cluster_id = (event.obj.get("spec") or {}).get("clusterID") or (event.obj.metadata.labels or {}).get(
            names.REMOTE_CLUSTER_ID_LABEL
        )
        if cluster_id:
            self.queue.add(cluster_id)

    def ready(self, leads: Callable[[], bool]) -> bool:
        """Every peering served now is ready (ServedPeering.ready), and the VirtualNodes are known."""
        return self.virtual_nodes.synced.is_set() and all(served.ready(leads) for served in self.served.values())

    async def reconcile(self, cluster_id: str) -> None:
        wanted = wanted_clusters(self.virtual_nodes.store, self.shard)
        task = self._tasks.get(cluster_id)
        if cluster_id in wanted and task is None:
            log.info("serving the peering with %s", cluster_id)
            self._tasks[cluster_id] = asyncio.create_task(self._serve(cluster_id), name=f"peering-{cluster_id}")
        elif task is not None and cluster_id in wanted and not self.ports.pools:
            new = sorted(set(wanted[cluster_id]) - set(self.serving_nodes.get(cluster_id, ())))
            # node pools declared since it started: served by the same peering, started again
            if new and cancel_once(task):
                log.info("%s has new virtual nodes %s: its peering starts again to serve them", cluster_id, new)
        elif task is not None and not any(
            (vn.get("spec") or {}).get("clusterID") == cluster_id for vn in self.virtual_nodes.store.values()
        ):
            # no VirtualNode left, yet the peering did not end it: its finalizer was removed by hand
            asked_now = cancel_once(task)  # reconciled again while it ends: asked once, said once
            if asked_now:
                log.warning("the VirtualNodes of %s are gone: it is no longer served", cluster_id)

    async def _serve(self, cluster_id: str) -> None:
        backoff = Backoff()
        restarts = self.restarts.setdefault(cluster_id, PeeringRestarts())
        self.stats.served.labels(cluster_id).set(1)
        try:
            while True:
                served = self.served[cluster_id] = ServedPeering(cluster_id)
                backoff.start()
                existing = wanted_clusters(self.virtual_nodes.store, (cluster_id,)).get(cluster_id, {})
                node_names: Sequence[str] = served_nodes(existing, cluster_id, self.ports.pools, None)[0]
                try:
                    # no port left for its kubelet APIs fails this peering alone, reported as any failure
                    node_names, ports = self.ports.assign(cluster_id, existing)
                    self.serving_nodes[cluster_id] = node_names
                    await serve_peering(
                        self.home,
                        served,
                        home_cluster_id=self.home_cluster_id,
                        node_names=node_names,
                        ports=ports,
                        shared_home=self.shared_home,
                        metrics=self.metrics.for_cluster(cluster_id),
                        node_address=self.node_address,
                        restarts=restarts,
                    )
                    log.info("the peering with %s ended: its virtual nodes were removed", cluster_id)
                    return
                except asyncio.CancelledError:
                    raise
                except Exception as err:
                    if being_cancelled():  # the peering ends, as asked, whatever its cleanup met
                        raise asyncio.CancelledError from err
                    delay = backoff.failed()
                    restarts.count += 1
                    restarts.last_error = f"{type(err).__name__}: {err}"
                    self.stats.restarts.labels(cluster_id).inc()
                    log.exception("the peering with %s failed; restarting it alone in %.0f s", cluster_id, delay)
                    await self._report(cluster_id, node_names, restarts, delay)
                finally:
                    self.served.pop(cluster_id, None)
                    self.serving_nodes.pop(cluster_id, None)
                    self.ports.release(cluster_id)
                await asyncio.sleep(delay)  # the backoff: a peering failing at once must not spin
        finally:
            self.stats.served.labels(cluster_id).set(0)
            self._tasks.pop(cluster_id, None)
            self.queue.add(cluster_id)  # it may be wanted again already (a VirtualNode made anew)

    async def _report(
        self, cluster_id: str, node_names: Sequence[str], restarts: PeeringRestarts, delay: float
    ) -> None:
        """An event on the cluster's primary VirtualNode, and (a replica that leads: a stand-by's failure
        must not turn the leader's Nodes NotReady) its Ready Nodes NotReady saying why until the peering
        runs again (their PeeringRestarted condition follows then)."""
        stored = self.virtual_nodes.store.get(f"{names.LIQO_NAMESPACE}/{node_names[0]}")
        if stored is None:
            return
        message = f"the peering failed ({restarts.last_error}); restarting it in {delay:.0f} s, the others go on"
        try:
            await self.warnings.warn(stored.to_dict(), RESTARTED_REASON, message[:1024], once=False)
        except Exception as err:  # the home API server away too: the log and the metric still say it
            log.warning("could not report the restart of %s: %s", cluster_id, err)
        for node_name in node_names if leads_now() else ():
            try:
                with unless_gone():  # a Node not made yet: nothing says it is Ready
                    await declare_not_ready(self.home, node_name, RESTARTED_REASON, message)
            except Exception as err:
                log.warning("could not turn %s NotReady after its peering failed: %s", node_name, err)

    async def run(self) -> None:
        reading = asyncio.create_task(self.virtual_nodes.run())
        try:
            await self.virtual_nodes.synced.wait()
            self.queue.start()
            wanted = wanted_clusters(self.virtual_nodes.store, self.shard)
            for cluster_id in wanted:
                self.queue.add(cluster_id)
            # a long wait otherwise silent: say what it waits for, and what ends it
            missing = [c for c in self.shard if c not in wanted]
            if missing or not wanted:
                which = ", ".join(missing) or "any foreign cluster"
                print(
                    f"waiting for the VirtualNodes of {which} (`pulumi up` makes them); each is served as it comes",
                    flush=True,
                )
            await asyncio.Future()  # until cancelled: peerings come and go with their VirtualNodes
        finally:
            await self.queue.shutdown()
            tasks = list(self._tasks.values())
            for task in tasks:
                cancel_once(task)
            await asyncio.gather(*tasks, return_exceptions=True)
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
