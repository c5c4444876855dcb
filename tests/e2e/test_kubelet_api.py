"""The kubelet API of the virtual nodes, end to end: the pinned kubectl against the home cluster,
for a pod offloaded to each foreign cluster; what it shows is the foreign cluster's answer (kwok
replays logs from files under the dev env's pod-logs folder and runs exec as a local shell).
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import os
import queue
import socket
import ssl
import struct
import subprocess
import termios
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Node

from liqo_stack.dev import paths
from liqo_stack.dev.clusters import POD_LOG, PREVIOUS_POD_LOG, DevEnvironment, cri_log_line
from liqo_stack.dev.external_runtime import ExternalRuntime
from runtime.virtualkubelet.node import WEBSOCKET_FEATURE
from tests.support.cli import kubectl
from tests.support.kube import VIRTUAL_NODES, free_port, node_ready, pod_on_each_virtual_node, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

CLUSTERS = list(VIRTUAL_NODES)
CONTAINER = "main"


class Lines:
    """A background kubectl whose output lines are read as they come."""

    def __init__(self, kubeconfig: Path, *args: str) -> None:
        environ = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        self.process = subprocess.Popen(
            [str(paths.bin_dir() / "kubectl"), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=environ,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()

    def _read(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, text: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"kubectl ended before {text!r}; it said {self.seen}")
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no {text!r} from kubectl after {timeout:.0f}s; it said {self.seen}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def append_log(dev_env: DevEnvironment, cluster_id: str, message: str) -> None:
    with (dev_env.pod_logs(cluster_id) / POD_LOG).open("a") as log:
        log.write(cri_log_line(message))


@pytest.fixture(scope="module")
def pods(offloaded: str, home: Client, runtime: ExternalRuntime) -> dict[str, str]:
    """One pod on each virtual node: foreign cluster id -> pod name (the same in the twin), once both
    virtual kubelets are ready (their kubelet API listens), as a user would wait for their rollout."""
    found = pod_on_each_virtual_node(home, offloaded, "shell", CONTAINER)
    kubelets = [f"kubelet-{cluster_id}" for cluster_id in CLUSTERS]
    wait_until(lambda: all(runtime.ready(kubelet) for kubelet in kubelets), 60, f"{', '.join(kubelets)} ready")
    return found


@pytest.fixture
def home_kubeconfig(dev_env: DevEnvironment) -> Path:
    return dev_env.kubeconfig("home")


def twin(offloaded: str) -> str:
    return f"{offloaded}-home"


# -- the Node --------------------------------------------------------------------------------------
@pytest.mark.parametrize("cluster_id", CLUSTERS)
def test_the_node_advertises_a_reachable_address_its_kubelet_port_and_websockets(
    runtime: ExternalRuntime, home: Client, cluster_id: str
) -> None:
    node = wait_until(lambda: node_ready(home, VIRTUAL_NODES[cluster_id]) and home.get(Node, VIRTUAL_NODES[cluster_id]))
    status = node.to_dict()["status"]
    assert status["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": runtime.kubelet_ports[cluster_id]}}
    assert status["declaredFeatures"] == [WEBSOCKET_FEATURE]


# -- logs ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cluster_id", CLUSTERS)
def test_kubectl_logs_shows_the_remote_containers_log(
    dev_env: DevEnvironment, pods: dict[str, str], offloaded: str, home_kubeconfig: Path, cluster_id: str
) -> None:
    name, marker = pods[cluster_id], f"logged-{uuid.uuid4().hex[:8]}"
    append_log(dev_env, cluster_id, marker)
    at_home = kubectl(home_kubeconfig, "-n", offloaded, "logs", name)
    direct = kubectl(dev_env.kubeconfig(cluster_id), "-n", twin(offloaded), "logs", name)
    assert at_home.returncode == 0, at_home.stderr
    assert at_home.stdout == direct.stdout and at_home.stdout.endswith(f"{marker}\n")

    tail = kubectl(home_kubeconfig, "-n", offloaded, "logs", name, "--tail=1")
    assert tail.stdout == f"{marker}\n"
    limited = kubectl(home_kubeconfig, "-n", offloaded, "logs", name, "--limit-bytes=7")
    assert limited.returncode == 0 and limited.stdout == direct.stdout[:7]
    stamped = kubectl(home_kubeconfig, "-n", offloaded, "logs", name, "--timestamps", "--tail=1")
    assert stamped.stdout.startswith(time.strftime("%Y-")) and stamped.stdout.endswith(f"Z {marker}\n")
    recent = kubectl(home_kubeconfig, "-n", offloaded, "logs", name, "--since-time=2999-01-01T00:00:00Z")
    assert recent.returncode == 0 and recent.stdout == ""
    previous = kubectl(home_kubeconfig, "-n", offloaded, "logs", name, "--previous")
    assert previous.returncode == 0 and previous.stdout == f"a container of {cluster_id}, before the restart\n"
    assert (dev_env.pod_logs(cluster_id) / PREVIOUS_POD_LOG).exists()


@pytest.mark.parametrize("cluster_id", CLUSTERS)
def test_kubectl_logs_follow_receives_lines_written_after_it_started(
    dev_env: DevEnvironment, pods: dict[str, str], offloaded: str, home_kubeconfig: Path, cluster_id: str
) -> None:
    before, after = f"before-{uuid.uuid4().hex[:8]}", f"after-{uuid.uuid4().hex[:8]}"
    append_log(dev_env, cluster_id, before)
    follow = Lines(home_kubeconfig, "-n", offloaded, "logs", "-f", pods[cluster_id])
    try:
        follow.wait_for(before)
        time.sleep(0.5)
        append_log(dev_env, cluster_id, after)
        follow.wait_for(after, timeout=15)
        assert follow.process.poll() is None  # still following
    finally:
        follow.stop()


# -- exec, attach, port-forward --------------------------------------------------------------------
@pytest.mark.parametrize("cluster_id", CLUSTERS)
def test_kubectl_exec_runs_in_the_remote_pod_with_stdin_and_the_exit_code(
    pods: dict[str, str], offloaded: str, home_kubeconfig: Path, cluster_id: str
) -> None:
    name = pods[cluster_id]
    both = kubectl(home_kubeconfig, "-n", offloaded, "exec", name, "--", "sh", "-c", "echo out; echo err >&2")
    assert both.returncode == 0, both.stderr
    assert both.stdout == "out\n" and both.stderr == "err\n"
    # head, not cat: kwok's exec never closes a command's stdin (directly against it either)
    echoed = kubectl(home_kubeconfig, "-n", offloaded, "exec", "-i", name, "--", "head", "-n1", stdin="through stdin\n")
    assert echoed.returncode == 0 and echoed.stdout == "through stdin\n"
    failed = kubectl(home_kubeconfig, "-n", offloaded, "exec", name, "--", "sh", "-c", "exit 3")
    assert failed.returncode == 3, failed.stderr


def test_kubectl_exec_with_a_terminal_gets_a_tty_of_its_size(
    pods: dict[str, str], offloaded: str, home_kubeconfig: Path
) -> None:
    controller, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
    # the size reaches the remote terminal through the resize channel, just after the start (read
    # until it shows, for up to 10 s); kwok may drop what a tty command writes just before it exits
    # (directly too), hence the last sleep
    script = (
        "test -t 0 && echo is-a-tty; for i in 1 2 3 4 5 6 7 8 9 10; do sleep 1;"
        ' size=$(stty size); test "$size" = "33 101" && break; done; echo "size $size"; sleep 1; exit 4'
    )
    command = ["-n", offloaded, "exec", "-it", pods["foreign-1"], "--", "sh", "-c", script]
    process = subprocess.Popen(
        [str(paths.bin_dir() / "kubectl"), *command],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env={**os.environ, "KUBECONFIG": str(home_kubeconfig)},
        start_new_session=True,
    )
    os.close(terminal)
    output = b""
    with pytest.raises(OSError):  # EIO once kubectl is gone
        while chunk := os.read(controller, 4096):
            output += chunk
    os.close(controller)
    assert process.wait(30) == 4
    text = output.decode(errors="replace")
    assert "is-a-tty" in text and "size 33 101" in text, text


def test_kubectl_attach_streams_the_remote_containers_output(
    dev_env: DevEnvironment, pods: dict[str, str], offloaded: str, home_kubeconfig: Path
) -> None:
    attached = Lines(home_kubeconfig, "-n", offloaded, "attach", pods["foreign-2"], "-c", CONTAINER)
    marker = f"attached-{uuid.uuid4().hex[:8]}"
    try:
        # kwok's attach streams what the container writes from now on: write until it shows
        for _ in range(10):
            append_log(dev_env, "foreign-2", marker)
            with contextlib.suppress(AssertionError):
                attached.wait_for(marker, timeout=2)
                break
        else:
            raise AssertionError(f"{marker} never reached kubectl attach; it said {attached.seen}")
    finally:
        attached.stop()


@pytest.mark.parametrize("cluster_id", CLUSTERS)
def test_kubectl_port_forward_carries_a_request_both_ways(
    pods: dict[str, str], offloaded: str, home_kubeconfig: Path, cluster_id: str
) -> None:
    local = free_port()
    forward = Lines(home_kubeconfig, "-n", offloaded, "port-forward", f"pod/{pods[cluster_id]}", f"{local}:8080")
    try:
        forward.wait_for("Forwarding from 127.0.0.1")
        with socket.create_connection(("127.0.0.1", local), timeout=20) as connection:
            connection.sendall(b"ping through the virtual node\n")
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = connection.recv(4096)
                if not chunk:
                    break
                answer += chunk
        assert answer == b"ping through the virtual node\n"  # the remote pod's port 8080 echoes (kwok: cat)
    finally:
        forward.stop()


def test_a_client_that_only_speaks_spdy_is_told_to_use_websockets(
    pods: dict[str, str], offloaded: str, home_kubeconfig: Path
) -> None:
    spdy = kubectl(
        home_kubeconfig,
        *("-n", offloaded, "exec", pods["foreign-1"], "--", "true"),
        timeout=30,
        KUBECTL_REMOTE_COMMAND_WEBSOCKETS="false",
    )
    assert spdy.returncode != 0 and "WebSocket" in spdy.stderr, spdy.stderr


# -- security --------------------------------------------------------------------------------------
HOME_CA = "ca.crt"  # in the home cluster's pki folder: signs the API server's and the kubelets' certificates


def kubelet_get(
    port: int, path: str, pki: Path, *, token: str | None = None, admin: bool = False, **headers: str
) -> tuple[int, str]:
    """GET on a virtual kubelet's port, its serving certificate verified against the home CA in
    `pki` (as the dev home API server does: --kubelet-certificate-authority); with `admin`, the
    client certificate the home API server presents to kubelets."""
    context = ssl.create_default_context(cafile=pki / HOME_CA)
    if admin:
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=20)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    body = response.read().decode()
    connection.close()
    return response.status, body


@pytest.fixture
def home_pki(dev_env: DevEnvironment) -> Path:
    return dev_env.pki_dir("home")


@pytest.mark.parametrize("cluster_id", CLUSTERS)
def test_the_kubelet_port_serves_a_certificate_the_home_cluster_signed_for_the_node(
    runtime: ExternalRuntime, home_pki: Path, cluster_id: str
) -> None:
    context = ssl.create_default_context(cafile=home_pki / HOME_CA)  # and the address checked
    with (
        socket.create_connection(("127.0.0.1", runtime.kubelet_ports[cluster_id]), timeout=20) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        certificate: Any = tls.getpeercert()
    subject = {key: value for rdn in certificate["subject"] for key, value in rdn}
    assert subject == {"commonName": f"system:node:{VIRTUAL_NODES[cluster_id]}", "organizationName": "system:nodes"}


def granted(kubeconfig: Path, namespace: str, service_account: str, node_subresource: str) -> None:
    """Wait until the home API server's authorizer has the new binding: the virtual kubelet keeps a
    denial for a while, so a first call made before that would be refused for the whole test."""
    who = f"--as=system:serviceaccount:{namespace}:{service_account}"
    wait_until(
        lambda: (
            kubectl(kubeconfig, "auth", "can-i", "get", "nodes", f"--subresource={node_subresource}", who).stdout
            == "yes\n"
        ),
        30,
        f"{service_account} may get nodes/{node_subresource}",
    )


@pytest.fixture(scope="module")
def tokens(offloaded: str, dev_env: DevEnvironment) -> Iterator[dict[str, str]]:
    """Bearer tokens of two home ServiceAccounts: `nobody` (no rights) and `debugger` (nodes/proxy)."""
    config = dev_env.kubeconfig("home")
    rbac = [
        ("create", "serviceaccount", "nobody", "-n", offloaded),
        ("create", "serviceaccount", "debugger", "-n", offloaded),
        ("create", "clusterrole", f"{offloaded}-kubelet", "--verb=get,create", "--resource=nodes/proxy"),
        ("create", "clusterrolebinding", f"{offloaded}-kubelet", f"--clusterrole={offloaded}-kubelet"),
    ]
    for args in rbac:
        extra = [f"--serviceaccount={offloaded}:debugger"] if args[1] == "clusterrolebinding" else []
        done = kubectl(config, *args, *extra)
        assert done.returncode == 0, done.stderr
    granted(config, offloaded, "debugger", "proxy")
    yield {
        who: kubectl(config, "-n", offloaded, "create", "token", who).stdout.strip() for who in ("nobody", "debugger")
    }
    for kind in ("clusterrolebinding", "clusterrole"):
        kubectl(config, "delete", kind, f"{offloaded}-kubelet")


@pytest.mark.parametrize("cluster_id", CLUSTERS)
def test_the_kubelet_port_refuses_anonymous_and_unauthorized_callers(
    home_pki: Path,
    runtime: ExternalRuntime,
    pods: dict[str, str],
    offloaded: str,
    tokens: dict[str, str],
    cluster_id: str,
) -> None:
    port, logs = runtime.kubelet_ports[cluster_id], f"/containerLogs/{offloaded}/{pods[cluster_id]}/{CONTAINER}"
    assert kubelet_get(port, logs, home_pki)[0] == 401
    assert kubelet_get(port, logs, home_pki, token="not-a-token")[0] == 401
    status, body = kubelet_get(port, logs, home_pki, token=tokens["nobody"])
    assert status == 403 and "nodes" in body and "proxy" in body
    status, body = kubelet_get(port, logs, home_pki, token=tokens["debugger"])
    assert status == 200 and f"a container of {cluster_id}, running" in body
    # the API server's own client certificate (--kubelet-client-certificate), signed by the home CA
    status, body = kubelet_get(port, logs, home_pki, admin=True)
    assert status == 200 and f"a container of {cluster_id}, running" in body
    assert kubelet_get(port, "/healthz", home_pki)[0] == 401
    assert kubelet_get(port, "/healthz", home_pki, admin=True) == (200, "ok")


def test_a_pod_not_on_the_node_is_not_found(
    home_pki: Path, runtime: ExternalRuntime, pods: dict[str, str], offloaded: str
) -> None:
    port = runtime.kubelet_ports["foreign-1"]
    elsewhere = f"/containerLogs/{offloaded}/{pods['foreign-2']}/{CONTAINER}"
    status, body = kubelet_get(port, elsewhere, home_pki, admin=True)
    assert status == 404 and "liqo-foreign-1" in body
    status, _ = kubelet_get(port, f"/containerLogs/{offloaded}/no-such-pod/{CONTAINER}", home_pki, admin=True)
    assert status == 404
    status, body = kubelet_get(
        port, f"/exec/{offloaded}/{pods['foreign-1']}/{CONTAINER}?command=true&output=1",
        home_pki, admin=True, Connection="Upgrade", Upgrade="SPDY/3.1",
    )  # fmt: skip
    assert status == 400 and "WebSocket" in body


# -- restart (last: it restarts a virtual kubelet) ---------------------------------------------------
def test_a_followed_log_ends_cleanly_when_the_virtual_kubelet_restarts(
    dev_env: DevEnvironment,
    runtime: ExternalRuntime,
    home: Client,
    pods: dict[str, str],
    offloaded: str,
    home_kubeconfig: Path,
) -> None:
    marker = f"before-restart-{uuid.uuid4().hex[:8]}"
    append_log(dev_env, "foreign-1", marker)
    follow = Lines(home_kubeconfig, "-n", offloaded, "logs", "-f", pods["foreign-1"])
    try:
        follow.wait_for(marker)
        runtime.kill("kubelet-foreign-1")
        assert follow.process.wait(20) is not None  # ended, not hanging
    finally:
        follow.stop()
        runtime.start("kubelet-foreign-1")
    again = f"after-restart-{uuid.uuid4().hex[:8]}"
    append_log(dev_env, "foreign-1", again)

    def served() -> bool:
        done = kubectl(home_kubeconfig, "-n", offloaded, "logs", pods["foreign-1"], "--tail=1", timeout=20)
        return bool(done.returncode == 0 and again in done.stdout)

    wait_until(served, 60, "logs served again after the restart")
