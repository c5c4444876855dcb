"""Which peerings a virtual-kubelet process serves, where their kubelet APIs listen, how a failing
one is restarted, and the command lines of many peerings or agents in one process."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from runtime.__main__ import main
from runtime.api import names
from runtime.api.resources import VirtualNodeResource
from runtime.kube.supervising import MAX_BACKOFF_SECONDS, Backoff, backoff_seconds
from runtime.virtualkubelet import peerings
from runtime.virtualkubelet.peerings import KubeletPorts, port_free, wanted_clusters


def virtual_node(name: str, cluster_id: str, *, held: bool = True, deleting: bool = False) -> Any:
    metadata: dict[str, Any] = {"name": name, "namespace": names.LIQO_NAMESPACE}
    if held:
        metadata["finalizers"] = [names.VIRTUAL_NODE_FINALIZER]
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    return VirtualNodeResource.from_dict({"metadata": metadata, "spec": {"clusterID": cluster_id}})


def store(*nodes: Any) -> dict[str, Any]:
    return {f"{names.LIQO_NAMESPACE}/{node.metadata.name}": node for node in nodes}


def test_every_cluster_with_a_virtual_node_is_served_and_a_shard_only_its_own() -> None:
    found = store(virtual_node("liqo-a", "a", held=False), virtual_node("liqo-b", "b"))
    assert wanted_clusters(found, ()) == {"a": {"liqo-a": False}, "b": {"liqo-b": True}}
    assert set(wanted_clusters(found, ("b", "c"))) == {"b"}


def test_a_virtual_node_being_deleted_is_served_while_held_and_released_then() -> None:
    """Only a virtual kubelet finishes a removal (drain, twins): held, it is served; let go, it is not."""
    assert set(wanted_clusters(store(virtual_node("liqo-a", "a", deleting=True)), ())) == {"a"}
    assert wanted_clusters(store(virtual_node("liqo-a", "a", held=False, deleting=True)), ()) == {}


def test_kubelet_ports_are_given_or_taken_free_and_never_shared() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        busy = listener.getsockname()[1]
        ports = KubeletPorts(base=busy, given={"given": 20000})
        _, first = ports.assign("a", {"liqo-a": True, "liqo-a-gpu": True})
        assert busy not in first.values(), "a port something listens on is skipped"
        _, second = ports.assign("b", {"liqo-b": True})
        assert not set(first.values()) & set(second.values()), "each node its own port"
        given = ports.assign("given", {"liqo-given": True, "liqo-given-x": True})[1]
        assert given["liqo-given"] == 20000, "the primary at its given port"
        taken_before = set(first.values()) | set(second.values())
        assert given["liqo-given-x"] not in taken_before | {20000}, "a pool's node never on another's port"
        ports.release("a")
        _, again = ports.assign("c", {"liqo-c": True})
        assert set(again.values()) <= set(first.values()), "a port let go is taken again"
    assert KubeletPorts(base=None).assign("a", {"liqo-a": True})[1] == {"liqo-a": None}, "no kubelet API"


def test_a_pool_never_takes_the_port_given_to_another_cluster() -> None:
    """The dev env gives foreign-1 and foreign-2 consecutive ports: foreign-1's second node (a pool)
    must not take foreign-2's, even before foreign-2 is served."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        base = holder.getsockname()[1]
    ports = KubeletPorts(base=base, given={"foreign-1": base, "foreign-2": base + 1})
    _, pooled = ports.assign("foreign-1", {"liqo-foreign-1-gpu": True, "liqo-foreign-1-general": True})
    assert base + 1 not in pooled.values() and len(set(pooled.values())) == 2


def test_a_failing_part_waits_longer_each_time_up_to_a_minute_and_afresh_after_a_steady_run() -> None:
    assert [backoff_seconds(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff_seconds(30) == MAX_BACKOFF_SECONDS
    backoff = Backoff()
    assert [backoff.failed() for _ in range(3)] == [1.0, 2.0, 4.0]
    backoff.started -= 1000  # it ran steadily since its last start
    assert backoff.failed() == 1.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["virtual-kubelet", "--home-cluster-id", "h", "--pool", "gpu"], "--pool: name the one foreign cluster"),
        (
            ["virtual-kubelet", "--home-cluster-id", "h", "--foreign-cluster-id", "a", "--foreign-cluster-id", "a"],
            "each cluster may be named once",
        ),
        (["virtual-kubelet", "--home-cluster-id", "h", "--kubelet-port-of", "a=x"], "not FOREIGN_CLUSTER_ID=PORT"),
        (["foreign-agent", "--cluster", "a=/k", "--cluster", "b=/k"], "without leader election"),
        (["foreign-agent", "--cluster-id", "a", "--cluster", "b=/k", "--no-leader-elect"], "give --cluster-id"),
        (["foreign-agent", "--cluster", "nokubeconfig", "--no-leader-elect"], "not FOREIGN_CLUSTER_ID=KUBECONFIG"),
    ],
)
def test_bad_command_lines_name_the_flag(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and message in capsys.readouterr().err


def _has_ipv6_loopback() -> bool:
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="this host has no IPv6 loopback")
def test_ports_are_found_free_on_an_ipv6_node_address() -> None:
    """A node address in an IPv6 cluster (cluster mode: the pod's IP): a port is free or held there as
    on IPv4, not taken for held because an IPv4 socket cannot bind it (every port was, and the search
    for a free one never ended)."""
    with socket.create_server(("::1", 0), family=socket.AF_INET6) as listener:
        busy = listener.getsockname()[1]
        assert not port_free(busy, "::1")
        _, chosen = KubeletPorts(base=busy, address="::1").assign("a", {"liqo-a": True})
        assert chosen["liqo-a"] not in (None, busy) and port_free(chosen["liqo-a"], "::1")


def test_no_free_port_left_says_what_to_do_instead_of_searching_on(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        busy = listener.getsockname()[1]
        monkeypatch.setattr(peerings, "HIGHEST_PORT", busy)  # the last port there is, and it is held
        with pytest.raises(OSError, match=r"no free port for the kubelet API of liqo-a .*--kubelet-port-of a=PORT"):
            KubeletPorts(base=busy, address="127.0.0.1").assign("a", {"liqo-a": True})
    # a pool after a primary given the last port: the search starts past it, and says so too
    ports = KubeletPorts(base=None, address="127.0.0.1", given={"a": peerings.HIGHEST_PORT})
    with pytest.raises(OSError, match="no free port for the kubelet API of liqo-a-gpu"):
        ports.assign("a", {"liqo-a": True, "liqo-a-gpu": True})


def test_a_node_address_this_host_lacks_is_said_not_taken_for_every_port_held() -> None:
    with pytest.raises(OSError, match=r"the kubelet API cannot listen on 192\.0\.2\.1"):
        KubeletPorts(base=20000, address="192.0.2.1").assign("a", {"liqo-a": True})  # TEST-NET-1: nobody's
