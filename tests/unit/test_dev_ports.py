"""Ports handed out to the dev clusters' components and the tests' later listeners: free, never twice
while held (ten minutes unless asked), so that clusters created at once on one machine never pick the
same one (liqo_stack/dev/ports.py)."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from liqo_stack.dev import paths, ports
from liqo_stack.dev.external_runtime import ports_in_use


@pytest.fixture
def record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache of its own: the machine's record of handed-out ports is left alone. And a window of ports of
    its own, far below those handed out to clusters from the top: the test workers' clusters, starting
    beside these tests, neither take the ports a test picks nor leave them in TIME_WAIT."""
    monkeypatch.setenv("LIQO_STACK_CACHE", str(tmp_path))
    monkeypatch.setattr(ports, "HIGHEST_PORT", 15199)
    monkeypatch.setattr(ports, "LOWEST_PORT", 15000)
    yield paths.port_lock().with_name("ports-handed-out.json")


def _held_until(record: Path, held: dict[int, float]) -> None:
    record.write_text(json.dumps({str(port): until for port, until in held.items()}))


def _held_from_now(record: Path, held: range) -> None:
    """`held` handed out just now, for the usual ten minutes."""
    _held_until(record, {port: time.time() + ports.HANDED_OUT_FOR_SECONDS for port in held})


def test_two_clusters_asking_one_after_the_other_get_disjoint_free_ports(record: Path) -> None:
    first, second = ports.hand_out(6), ports.hand_out(6)
    assert len(set(first)) == 6 and len(set(second)) == 6
    assert not set(first) & set(second)
    assert all(ports.LOWEST_PORT <= port <= ports.HIGHEST_PORT for port in first + second)
    assert set(json.loads(record.read_text())) == {str(port) for port in first + second}


def test_a_port_held_again_is_not_handed_out_and_keeps_a_longer_hold(record: Path) -> None:
    """A component about to be killed and relaunched: its port, handed out long ago, is held again."""
    expired, longer = ports.HIGHEST_PORT, ports.HIGHEST_PORT - 1
    now = time.time()
    _held_until(record, {expired: now - 1, longer: now + 3 * 3600})
    ports.hold_again([expired, longer, None])  # None: a component without a port of its own
    kept = json.loads(record.read_text())
    assert kept[str(expired)] >= now + ports.HANDED_OUT_FOR_SECONDS
    assert kept[str(longer)] == now + 3 * 3600, "a longer hold is not shortened"
    assert not {expired, longer} & set(ports.hand_out(2))


def test_a_port_something_listens_on_is_skipped(record: Path) -> None:
    with socket.socket() as listener:
        listening = next(p for p in range(ports.HIGHEST_PORT - 50, ports.LOWEST_PORT, -1) if ports.is_unbound(p))
        listener.bind((ports.LOOPBACK, listening))
        listener.listen()
        # every port above it handed out just now: the next candidate is the one in use
        _held_from_now(record, range(listening + 1, ports.HIGHEST_PORT + 1))
        (chosen,) = ports.hand_out(1)
    assert chosen < listening


def test_a_port_handed_out_more_than_ten_minutes_ago_is_handed_out_again(record: Path) -> None:
    abandoned = next(p for p in range(ports.HIGHEST_PORT - 50, ports.LOWEST_PORT, -1) if ports.is_unbound(p))
    now = time.time()
    held = {port: now + ports.HANDED_OUT_FOR_SECONDS for port in range(abandoned + 1, ports.HIGHEST_PORT + 1)}
    held[abandoned] = now - 1  # handed out ten minutes ago for a creation that failed
    _held_until(record, held)
    assert ports.hand_out(1) == [abandoned]
    kept = json.loads(record.read_text())
    assert kept[str(abandoned)] >= now + ports.HANDED_OUT_FOR_SECONDS  # handed out again: held from now
    assert len(kept) == len(held)


def test_an_unreadable_record_is_started_afresh(record: Path) -> None:
    record.write_text("{not json")
    chosen = ports.hand_out(2)
    assert set(json.loads(record.read_text())) == {str(port) for port in chosen}


def test_a_held_port_refuses_connections_and_is_not_handed_out(record: Path) -> None:
    """A stopped API server's port (PortHold): refused as a port nobody listens on, which Kubernetes'
    clients give up on at once (a reset is retried), and passed by when ports are handed out."""
    held = next(p for p in range(ports.HIGHEST_PORT - 50, ports.LOWEST_PORT, -1) if ports.is_unbound(p))
    hold = ports.PortHold(held)
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((ports.LOOPBACK, held), timeout=5).close()
        _held_from_now(record, range(held + 1, ports.HIGHEST_PORT + 1))
        (chosen,) = ports.hand_out(1)
        assert chosen < held
    finally:
        hold.release()
    assert ports.is_unbound(held)  # released: free for the component's relaunch


def test_ports_are_handed_out_under_the_lock_already_held(record: Path) -> None:
    """Ports handed out by code already under the lock (a fresh-clone run once hung so, every worker waiting
    for one that waited for itself): the process does not wait for itself (a thread gives up after 10 s and
    fails the test instead of hanging it)."""
    handed: list[int] = []

    def nested() -> None:
        with ports.locked(), ports.locked():
            handed.extend(ports.hand_out(1))

    worker = threading.Thread(target=nested, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "a port handed out under the lock waited for the lock"
    assert len(handed) == 1
    with ports.locked():  # released after all: the next taker gets it
        assert ports.hand_out(1) != handed


def test_a_port_held_for_a_listener_bound_later_outlives_ten_minutes_until_given_back(
    record: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tests' session webhook port: bound only when the shared runtime starts, often more than ten
    minutes later. Held for longer, it was once handed out again meanwhile to another runtime."""
    now = time.time()
    (session,) = ports.hand_out(1, hold_for=3 * 3600)
    monkeypatch.setattr(time, "time", lambda: now + ports.HANDED_OUT_FOR_SECONDS + 60)
    assert session not in ports.hand_out(5), "held for three hours, not ten minutes"
    ports.give_back([session])
    assert str(session) not in json.loads(record.read_text())
    assert session in ports.hand_out(1 + ports.HIGHEST_PORT - session)  # handed out again at once


def test_who_holds_a_port_is_named_listener_and_connection_alike() -> None:
    """What a runtime that could not bind its port says, to name what to stop."""
    with socket.socket() as listener:
        listener.bind((ports.LOOPBACK, 0))
        listener.listen()
        port = listener.getsockname()[1]
        held = ports.holders(port)
        assert len(held) == 1 and held[0].startswith(f"{os.getpid()} ") and held[0].endswith("(LISTEN)"), held
        with socket.create_connection((ports.LOOPBACK, port)):
            accepted, _ = listener.accept()
            with accepted:  # the accepted side's local port is the listener's too
                states = sorted(h.rpartition("(")[2] for h in ports.holders(port))
                assert states == ["ESTABLISHED)", "LISTEN)"], ports.holders(port)
    assert all("LISTEN" not in h for h in ports.holders(port)), "closed: no listener named"


def test_the_ports_a_dead_component_could_not_bind_are_read_from_its_log() -> None:
    tail = [
        "OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 32734): address already in use",
        "RuntimeError: the kubelet API cannot listen on 127.0.0.1:10251: address already in use; stop what holds it",
        "OSError: [Errno 98] error while attempting to bind on address ('::1', 9443, 0, 0): address already in use",
        "ValueError: port 8080 is fine",
    ]
    assert ports_in_use(tail) == [9443, 10251, 32734]
