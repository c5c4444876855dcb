"""Pod CIDRs of peered clusters, and the range in which the home cluster sees an overlapping one.

docs/reflection.md: the pod IP shown at home is the remote IP "remapped according to the network fabric
configuration" when the clusters' pod CIDRs overlap. Which foreign cluster needs a remapped range,
and which range it gets, is decided here, once, for both the stack's plan and the runtime (through
the VirtualNode's `podCIDR` / `remappedPodCIDR`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Carrier-grade NAT space: rarely a pod CIDR, and outside the 10/8 ranges dev clusters use.
DEFAULT_REMAPPING_POOL = "100.64.0.0/10"


class PodNetworkError(ValueError):
    """A CIDR plan that cannot work; the message starts with the config path to change."""


def parse_network(text: str) -> Network:
    """A network address with its prefix (10.0.0.0/16); host bits set are refused, not dropped."""
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError as err:
        raise ValueError(f"{text!r} is not a CIDR network address, e.g. 10.0.0.0/16 ({err})") from None


@dataclass(frozen=True)
class ForeignPodNetwork:
    cluster_id: str
    pod_cidr: str | None  # what the foreign cluster's pods use; None: not declared, never remapped
    remapped_pod_cidr: str | None = None  # declared by hand; else allocated when needed
    path: str = ""  # its config path, for errors (e.g. "foreignClusters[1]")


def _overlapping(network: Network, others: Sequence[Network]) -> Network | None:
    return next((other for other in others if other.version == network.version and network.overlaps(other)), None)


def _allocate(size: int, version: int, pool: Network, avoid: Sequence[Network]) -> Network | None:
    if pool.version != version or pool.prefixlen > size:
        return None
    return next((block for block in pool.subnets(new_prefix=size) if _overlapping(block, avoid) is None), None)


def remapped_pod_cidrs(
    home_pod_cidr: str | None, foreign: Sequence[ForeignPodNetwork], pool: str = DEFAULT_REMAPPING_POOL
) -> dict[str, str | None]:
    """Per foreign cluster id: the range its pods are shown in at home, or None (shown as they are).

    In the given order, a cluster keeps its own range unless that overlaps the home range or a range
    already seen at home; then it gets the first free block of its own size from `pool`, avoiding
    every declared range. Declared remappings are taken as given, and checked.
    """
    pool_net = parse_network(pool)
    home = [parse_network(home_pod_cidr)] if home_pod_cidr else []
    declared = [parse_network(f.pod_cidr) for f in foreign if f.pod_cidr]
    explicit = {f.cluster_id: parse_network(f.remapped_pod_cidr) for f in foreign if f.remapped_pod_cidr}
    seen_at_home: list[Network] = [*home, *explicit.values()]
    result: dict[str, str | None] = {}
    for cluster in foreign:
        if cluster.cluster_id in explicit:
            result[cluster.cluster_id] = str(explicit[cluster.cluster_id])
            continue
        if not cluster.pod_cidr:
            result[cluster.cluster_id] = None
            continue
        own = parse_network(cluster.pod_cidr)
        if _overlapping(own, seen_at_home) is None:
            seen_at_home.append(own)
            result[cluster.cluster_id] = None
            continue
        block = _allocate(own.prefixlen, own.version, pool_net, [*seen_at_home, *declared])
        if block is None:
            raise PodNetworkError(
                f"{cluster.path or cluster.cluster_id}: its podCIDR {own} overlaps another cluster's and "
                f"network.remappingPool {pool_net} has no free /{own.prefixlen} left; "
                "give a larger pool or set remappedPodCIDR"
            )
        seen_at_home.append(block)
        result[cluster.cluster_id] = str(block)
    _check_declared(home, foreign, explicit, result)
    return result


def _check_declared(
    home: list[Network],
    foreign: Sequence[ForeignPodNetwork],
    explicit: dict[str, Network],
    result: dict[str, str | None],
) -> None:
    shown = {
        f.cluster_id: parse_network(result[f.cluster_id] or f.pod_cidr or "")
        for f in foreign
        if result[f.cluster_id] or f.pod_cidr
    }
    for cluster in foreign:
        remapped = explicit.get(cluster.cluster_id)
        if remapped is None:
            continue
        where = f"{cluster.path or cluster.cluster_id}.remappedPodCIDR"
        if not cluster.pod_cidr:
            raise PodNetworkError(f"{where}: set podCIDR too, the range that is remapped")
        own = parse_network(cluster.pod_cidr)
        if own.prefixlen != remapped.prefixlen or own.version != remapped.version:
            raise PodNetworkError(f"{where}: {remapped} must have the prefix length of podCIDR {own}")
        others = [net for cid, net in shown.items() if cid != cluster.cluster_id]
        clash = _overlapping(remapped, [*home, *others])
        if clash is not None:
            raise PodNetworkError(f"{where}: {remapped} overlaps {clash}, already seen at home")


def ranges_seen_by(
    destination: ForeignPodNetwork,
    home: ForeignPodNetwork,
    foreign: Sequence[ForeignPodNetwork],
    pool: str = DEFAULT_REMAPPING_POOL,
) -> dict[str, tuple[str, str]]:
    """Per other cluster (home by `home.cluster_id`, and every foreign one but `destination`): the range
    the home cluster shows its pods in, and the range `destination` reaches them in (docs/reflection.md:
    reflected endpoints are "remapped for the destination").

    `destination` looks at the others as the home cluster looks at the foreign clusters
    (`remapped_pod_cidrs`, with its own range in the place of home's): the home range first, then
    the others in config order, each kept unless it overlaps one seen there before, else a block
    of `pool`. Clusters whose range is not declared are left out (their addresses are copied as they are).
    """
    at_home = remapped_pod_cidrs(home.pod_cidr, foreign, pool)
    shown_at_home = {f.cluster_id: at_home[f.cluster_id] or f.pod_cidr for f in foreign}
    shown_at_home[home.cluster_id] = home.pod_cidr
    others = [ForeignPodNetwork(o.cluster_id, o.pod_cidr, None, o.path) for o in (home, *foreign)]
    others = [o for o in others if o.cluster_id != destination.cluster_id]
    there = remapped_pod_cidrs(destination.pod_cidr, others, pool)
    return {
        o.cluster_id: (str(shown), there[o.cluster_id] or str(o.pod_cidr))
        for o in others
        if o.pod_cidr and (shown := shown_at_home.get(o.cluster_id))
    }


def translate_address(address: str, ranges: Sequence[tuple[str, str]]) -> str:
    """`address` as the home cluster shows it, moved to the same offset of the paired range: the
    first (from, to) pair whose `from` holds it; unchanged when none does."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address  # an FQDN slice's address: nothing to remap
    for source, target in ranges:
        source_net, target_net = parse_network(source), parse_network(target)
        if ip.version == source_net.version and ip in source_net:
            offset = int(ip) - int(source_net.network_address)
            return str(ipaddress.ip_address(int(target_net.network_address) + offset))
    return address
