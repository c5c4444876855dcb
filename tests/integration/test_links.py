"""The dev env's links through a real toxiproxy-server from the tools' cache (an optional pin, which
scripts/test.sh builds): latency as the profiles set it, a partition and its heal, and a foreign API
server reached through its link with TLS passed through."""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
import yaml
from lightkube import Client, KubeConfig
from lightkube.resources.core_v1 import Namespace

from liqo_stack.dev import paths
from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.links import SERVER_BINARY, LinkNetwork, latency

READ_TIMEOUT = 0.5  # seconds: a reply through a healthy link takes milliseconds, or 100 under wan


@pytest.fixture(scope="module")
def toxiproxy_bin() -> Path:
    """The cache's bin folder, with toxiproxy built: missing is a failure, never a skip."""
    bin_dir = paths.bin_dir()
    if not (bin_dir / SERVER_BINARY).exists():
        pytest.fail(f"{bin_dir / SERVER_BINARY} is not built: `python3 tools/build.py toxiproxy`")
    return bin_dir


@pytest.fixture
def echo_server() -> Iterator[str]:
    """A TCP echo server on loopback, a thread per connection: `127.0.0.1:port`."""
    listener = socket.create_server(("127.0.0.1", 0))

    def echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed: the test is over
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


@pytest.fixture
def link(tmp_path: Path, toxiproxy_bin: Path) -> Iterator[LinkNetwork]:
    network = LinkNetwork(tmp_path / "links", toxiproxy_bin)
    yield network
    network.down()


def connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    conn = socket.create_connection((host, int(port)), timeout=5)
    conn.settimeout(READ_TIMEOUT)
    return conn


def round_trip(conn: socket.socket, payload: bytes = b"ping") -> float:
    """Seconds from sending `payload` to reading it back."""
    started = time.monotonic()
    conn.sendall(payload)
    received = b""
    while len(received) < len(payload):
        chunk = conn.recv(4096)
        assert chunk, "the link closed the connection"
        received += chunk
    assert received == payload
    return time.monotonic() - started


def unhindered(conn: socket.socket) -> bool:
    """No latency on the link: the best of three round trips under 50 ms (a 50 ms toxic each way makes every
    one at least 100 ms; one trip alone can take longer on a loaded machine)."""
    return min(round_trip(conn) for _ in range(3)) < 0.05


def test_latency_partition_and_heal_through_a_link(link: LinkNetwork, echo_server: str) -> None:
    address = link.up({"echo": echo_server}, "none")["echo"]
    conn = connect(address)
    assert unhindered(conn)  # the proxy alone adds next to nothing

    link.add_toxics("echo", latency(50))
    assert min(round_trip(conn) for _ in range(5)) >= 0.100  # 50 ms each way, on an open connection
    link.remove_toxics("echo", "latency")

    link.set_profile("wan")  # 50 +/- 10 ms each way
    conn.settimeout(5)  # a loaded machine may be slow; the link must not be faster
    trips = [round_trip(conn) for _ in range(10)]
    assert min(trips) >= 0.080 and statistics.mean(trips) >= 0.090, trips
    link.set_profile("none")
    conn.settimeout(READ_TIMEOUT)
    assert unhindered(conn)

    # blackhole: silence both ways on open and new connections; nothing is closed
    link.partition("echo")
    fresh = connect(address)  # the proxy still accepts
    for each in (conn, fresh):
        each.sendall(b"lost")
        with pytest.raises(TimeoutError):
            each.recv(4096)
    link.heal("echo")
    # the bytes sent meanwhile were dropped: Toxiproxy closes what lived through the partition
    assert conn.recv(4096) == b"" and fresh.recv(4096) == b""
    conn = connect(address)
    assert unhindered(conn)

    # refuse: the API server looks down; open connections closed, new ones refused
    link.partition("echo", mode="refuse")
    assert conn.recv(4096) == b""
    with pytest.raises(ConnectionRefusedError):
        connect(address)
    link.heal("echo")
    conn = connect(address)
    assert unhindered(conn)

    link.cut_connections("echo")
    assert conn.recv(4096) == b""
    assert unhindered(connect(address))

    pid = link.server.pid()
    link.down()
    assert pid is not None and link.server.pid() is None and not Path(f"/proc/{pid}").exists()


def test_the_home_reaches_a_foreign_api_server_through_its_link(dev_env: DevEnvironment, toxiproxy_bin: Path) -> None:
    """What `liqo-stack dev up --links --link-profile wan` sets up, on the session's clusters, and the
    partition by hand of docs/dev-clusters.md; through the kubeconfig the stack composes with
    `apiServerAddress` (the cluster's CA, the proxy's port)."""
    try:
        address = dev_env.start_links("wan", ["foreign-1"])["foreign-1"]
        assert address != dev_env.api_server_address("foreign-1")
        kubeconfig = yaml.safe_load(dev_env.kubeconfig("foreign-1").read_text())
        kubeconfig["clusters"][0]["cluster"]["server"] = f"https://{address}"
        through_link = Client(KubeConfig.from_dict(kubeconfig), timeout=httpx2.Timeout(2))
        direct = dev_env.client("foreign-1")

        # TLS passes through: the certificate names 127.0.0.1, and is verified against the cluster's CA
        assert through_link.get(Namespace, "default").metadata is not None
        started = time.monotonic()
        through_link.get(Namespace, "default")
        assert time.monotonic() - started >= 0.08  # a round trip at least, on the open connection

        exports = "\n".join(dev_env.env_exports())
        assert f"export TOXIPROXY_URL={dev_env.links.url}" in exports

        def toxiproxy_cli(*args: str) -> str:
            return subprocess.run(
                [str(toxiproxy_bin / "toxiproxy-cli"), *args],
                env={**os.environ, "TOXIPROXY_URL": dev_env.links.url},
                capture_output=True,
                text=True,
                check=True,
            ).stdout

        shown = toxiproxy_cli("inspect", "foreign-1")
        assert "profile-latency-upstream" in shown and "profile-latency-downstream" in shown, shown

        # the partition by hand, as the docs show it
        toxiproxy_cli("toxic", "add", "-t", "timeout", "-a", "timeout=0", "-u", "-n", "cut-up", "foreign-1")
        toxiproxy_cli("toxic", "add", "-t", "timeout", "-a", "timeout=0", "-d", "-n", "cut-down", "foreign-1")
        with pytest.raises(httpx2.TimeoutException):
            through_link.get(Namespace, "default")
        assert direct.get(Namespace, "default").metadata is not None  # only the link is cut
        toxiproxy_cli("toxic", "remove", "-n", "cut-up", "foreign-1")
        toxiproxy_cli("toxic", "remove", "-n", "cut-down", "foreign-1")
        assert through_link.get(Namespace, "default").metadata is not None  # a new connection after the heal

        with dev_env.links.partitioned("foreign-1"), pytest.raises(httpx2.TimeoutException):
            through_link.get(Namespace, "default")
        assert through_link.get(Namespace, "default").metadata is not None

        # `dev up` again with another profile: the same link (the credentials name it), no latency left
        assert dev_env.start_links("none", ["foreign-1"]) == {"foreign-1": address}
        assert dev_env.links.toxics("foreign-1") == []
    finally:
        dev_env.links.down()
