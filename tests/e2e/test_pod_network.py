"""Pod IPs at home (docs/reflection.md): unique across foreign clusters that use the same pod range.

The session's foreign-1 and foreign-2 hand out pod IPs from the same range; the stack declares
both ranges, so foreign-2's is remapped at home from the remapping pool, as the plan shows.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from typing import Any

import pytest
from lightkube import Client
from pulumi import automation as auto

from liqo_stack.dev.clusters import ClusterLayout
from tests.support.kube import VIRTUAL_NODES, deploy_running, remote_pod

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]


def test_no_two_pods_share_an_ip_at_home_and_each_maps_back_to_its_remote_pod(
    installed: auto.Stack,
    offloaded: str,
    home: Client,
    foreign: dict[str, Client],
    session_layout: ClusterLayout,
) -> None:
    assert session_layout.pod_cidr("foreign-1") == session_layout.pod_cidr("foreign-2")
    plan: dict[str, Any] = installed.outputs()["foreignClusters"].value
    assert plan["foreign-1"]["podNetwork"]["remapped"] is False
    seen_at_home = plan["foreign-2"]["podNetwork"]["seenAtHomeAs"]
    assert plan["foreign-2"]["podNetwork"]["remapped"] is True
    remote_range = ipaddress.ip_network(session_layout.pod_cidr("foreign-2"))
    home_range = ipaddress.ip_network(seen_at_home)

    pods = deploy_running(home, offloaded, "spread", replicas=10, timeout=120)
    twin = f"{offloaded}-home"
    remote_ips: dict[str, set[str]] = {cluster_id: set() for cluster_id in VIRTUAL_NODES}
    for pod in pods:
        cluster_id = next(c for c, node in VIRTUAL_NODES.items() if node == pod.spec.nodeName)
        remote = remote_pod(foreign[cluster_id], twin, pod.metadata.name)
        assert remote is not None and remote.status is not None and remote.status.podIP
        remote_ips[cluster_id].add(remote.status.podIP)
        remote_ip = ipaddress.ip_address(remote.status.podIP)
        if cluster_id == "foreign-2":  # the same offset, in the range the plan shows
            offset = int(remote_ip) - int(remote_range.network_address)
            expected = str(ipaddress.ip_address(int(home_range.network_address) + offset))
        else:
            expected = str(remote_ip)
        assert pod.status.podIP == expected, (pod.metadata.name, cluster_id)
        assert [entry.ip for entry in pod.status.podIPs] == [expected]
    assert all(remote_ips.values()), f"pods on both virtual nodes: {remote_ips}"
    # both clusters hand out IPs from the same range (kwok recycles freed IPs at random, so which
    # IPs collide in a given run varies); at home, no two pods share one
    assert all(ipaddress.ip_address(ip) in remote_range for ips in remote_ips.values() for ip in ips)
    shared = [ip for ip, count in Counter(p.status.podIP for p in pods).items() if count > 1]
    assert not shared, f"pod IPs shared at home: {shared}"
