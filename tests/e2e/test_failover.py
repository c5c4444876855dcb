"""Replicas with leader election, as processes against the dev clusters (issue 16).

A second virtual kubelet for each foreign cluster stands by (it writes nothing) while the first
leads; SIGKILL of the leaders during a burst of pods: the stand-bys take over within the lease
time, every pod ends Running at home, and no remote pod is deleted, duplicated or recreated. The
same for the controller-manager during namespace offloading.

The burst size is LIQO_FAILOVER_BURST (default 40, to keep CI's run short on 2 cores; the closing
figure of issue 16 was measured with 200). Failover times are printed (`-s` shows them).
"""

from __future__ import annotations

import base64
import functools
import os
import re
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from lightkube import Client
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace, Pod

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.workloads import apply_deployment, example_deployment
from runtime.api import names
from runtime.api.leaderelection import JITTER_FACTOR, LeaderElectionTiming
from runtime.api.resources import ShadowPodResource
from tests.support.kube import VIRTUAL_NODES, home_pods, listener_port, node_ready, offload, wait_phase, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

BURST = int(os.environ.get("LIQO_FAILOVER_BURST", "40"))
TIMING = LeaderElectionTiming()  # the runtime's defaults: what a user gets
# kill -> the stand-by leads: it judges expiry from when it last saw the record change (its own clock,
# as client-go), which is up to one jittered retry after the leader's last renewal; the Lease then
# runs lease_duration, and the stand-by notices at its next retry; its first write follows at once.
TAKEOVER_BOUND = TIMING.lease_duration + 2 * JITTER_FACTOR * TIMING.retry_period + 3
WRITES = ("POST", "PUT", "PATCH", "DELETE")
_REQUESTS = re.compile(r'^liqo_api_requests_total\{cluster="([^"]*)",method="([^"]*)",resource="([^"]*)"\} (\S+)$')


# -- reading a replica from outside -----------------------------------------------------------------
def probe_url(runtime: ExternalRuntime, component: str) -> str:
    def found() -> str | None:
        match = re.search(r"probes on (http://[\d.]+:\d+)", runtime.log(component).read_text(errors="replace"))
        return match.group(1) if match else None

    url: str = wait_until(found, 60, f"{component} serving its probes")
    return url


def requests_of(url: str) -> dict[tuple[str, str, str], float]:
    """(cluster, method, resource) -> requests the process sent."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:  # a busy process answers late
        text = response.read().decode()
    counts = {}
    for line in text.splitlines():
        if match := _REQUESTS.match(line):
            cluster, method, resource, value = match.groups()
            counts[(cluster, method, resource)] = float(value)
    return counts


def writes(counts: dict[tuple[str, str, str], float], *, leases: bool = True) -> float:
    return sum(
        v for (_, method, resource), v in counts.items() if method in WRITES and (leases or resource != "leases")
    )


def campaign_rounds(url: str, rounds: int) -> None:
    """Until the stand-by at `url` has read the Lease `rounds` more times: each read is one round of its
    campaign, in which it judges whether to take over, so a stand-by that was going to write would
    have written by then."""
    start = requests_of(url).get(("home", "GET", "leases"), 0)
    wait_until(
        lambda: requests_of(url).get(("home", "GET", "leases"), 0) >= start + rounds,
        rounds * JITTER_FACTOR * TIMING.retry_period + 30,
        f"{rounds} more campaign rounds",
    )


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=30) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def holder(home: Client, lease: str) -> str | None:
    spec = home.get(Lease, lease, namespace=names.LEADER_ELECTION_NAMESPACE).spec
    return spec.holderIdentity if spec else None


LEADER_ELECTION = True  # the module's runtime: every component elects a leader (tests/e2e/conftest.py)


# -- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def patient(dev_env: DevEnvironment, foreign_ids: list[str]) -> dict[str, Client]:
    """Clients that wait a minute for an answer: listing a burst of pods from API servers sharing 2
    cores with the burst itself can take longer than lightkube's default 10 s."""
    return {c: dev_env.client(c, timeout=httpx2.Timeout(60)) for c in ["home", *foreign_ids]}


@pytest.fixture(scope="module")
def standby_kubelets(runtime: ExternalRuntime) -> Iterator[dict[str, str]]:
    """A second virtual kubelet per foreign cluster, with a kubelet API port of its own."""
    replicas = {
        cluster_id: runtime.add_replica(f"kubelet-{cluster_id}", ["--kubelet-port", str(listener_port())])
        for cluster_id in VIRTUAL_NODES
    }
    for replica in replicas.values():
        runtime.start(replica)
    yield replicas


# -- virtual kubelets -------------------------------------------------------------------------------
def test_only_the_leader_virtual_kubelet_writes(
    offloaded: str, home: Client, runtime: ExternalRuntime, standby_kubelets: dict[str, str]
) -> None:
    for cluster_id, replica in standby_kubelets.items():
        url = probe_url(runtime, replica)
        wait_until(functools.partial(ready, url), 60, f"{replica} ready as a stand-by (informers warm)")
        assert holder(home, names.virtual_kubelet_lease(cluster_id)) == runtime.identity(f"kubelet-{cluster_id}")
    apply_deployment(home, example_deployment("while-standing-by", offloaded, 6))
    wait_until(lambda: len(running_at_home(home, offloaded, "while-standing-by")) == 6, 120, "6 pods Running")
    for replica in standby_kubelets.values():  # a few more rounds of the stand-bys' campaign
        campaign_rounds(probe_url(runtime, replica), 2)
    for replica in standby_kubelets.values():
        counts = requests_of(probe_url(runtime, replica))
        assert writes(counts) == 0, f"{replica} wrote while standing by: {counts}"
        assert counts.get(("home", "GET", "leases"), 0) > 0  # it does campaign


def running_at_home(home: Client, namespace: str, app: str) -> list[Any]:
    """[] when the API server, busy with the burst on 2 shared cores, does not answer in time: polled again."""
    try:
        pods = home_pods(home, namespace, app)
    except httpx2.TimeoutException:
        return []
    return [
        p
        for p in pods
        if p.status and p.status.phase == "Running" and not (p.metadata and p.metadata.deletionTimestamp)
    ]


def remote_pods(foreign: dict[str, Client], twin: str, app: str) -> dict[str, tuple[str, str]]:
    """Remote pod name -> (cluster, uid), over both foreign clusters."""
    found: dict[str, tuple[str, str]] = {}
    for cluster_id, client in foreign.items():
        for pod in client.list(Pod, namespace=twin, labels={"app": app}):
            assert pod.metadata and pod.metadata.name and pod.metadata.uid
            assert pod.metadata.name not in found, f"{pod.metadata.name} runs in two clusters"
            found[pod.metadata.name] = (cluster_id, pod.metadata.uid)
    return found


def shadow_pods(foreign: dict[str, Client], twin: str) -> dict[str, str]:
    return {
        s.metadata.name: s.metadata.uid
        for client in foreign.values()
        for s in client.list(ShadowPodResource, namespace=twin)
    }


def test_killing_the_leader_virtual_kubelets_during_a_burst(
    offloaded: str, patient: dict[str, Client], runtime: ExternalRuntime, standby_kubelets: dict[str, str]
) -> None:
    home, foreign = patient["home"], {c: client for c, client in patient.items() if c != "home"}
    twin, app = f"{offloaded}-home", "burst"
    urls = {cluster_id: probe_url(runtime, replica) for cluster_id, replica in standby_kubelets.items()}
    for url in urls.values():
        wait_until(functools.partial(ready, url), 60, "stand-by ready")
    apply_deployment(home, example_deployment(app, offloaded, BURST))
    wait_until(lambda: len(running_at_home(home, offloaded, app)) >= BURST // 4, 300, f"{BURST // 4} pods Running")

    before_home = {p.metadata.name: p.metadata.uid for p in home_pods(home, offloaded, app) if p.metadata}
    before_remote = remote_pods(foreign, twin, app)
    before_shadows = shadow_pods(foreign, twin)
    assert all(writes(requests_of(url)) == 0 for url in urls.values())
    leaders = [f"kubelet-{cluster_id}" for cluster_id in standby_kubelets]
    killed = time.monotonic()
    for leader in leaders:
        runtime.kill(leader)

    # kill -> the stand-by's first write other than its Lease (the Node, pods' status, ShadowPods)
    took_over: dict[str, float] = {}
    deadline = killed + TAKEOVER_BOUND + 30
    while len(took_over) < len(urls) and time.monotonic() < deadline:
        for cluster_id, url in urls.items():
            if cluster_id not in took_over and writes(requests_of(url), leases=False) > 0:
                took_over[cluster_id] = time.monotonic() - killed
        time.sleep(0.1)
    print(f"\nfailover (SIGKILL -> new leader virtual kubelet writing), burst of {BURST}: {took_over}")
    assert set(took_over) == set(urls), f"no takeover within {TAKEOVER_BOUND + 30:.0f}s: {took_over}"
    assert max(took_over.values()) <= TAKEOVER_BOUND, took_over
    for cluster_id, replica in standby_kubelets.items():
        assert holder(home, names.virtual_kubelet_lease(cluster_id)) == runtime.identity(replica)

    wait_until(lambda: len(running_at_home(home, offloaded, app)) == BURST, 300 + BURST, f"{BURST} pods Running")
    after_home = {p.metadata.name: p.metadata.uid for p in home_pods(home, offloaded, app) if p.metadata}
    assert len(after_home) == BURST
    assert {name: after_home.get(name) for name in before_home} == before_home  # none replaced at home
    after_remote = remote_pods(foreign, twin, app)
    assert set(after_remote) == set(after_home)  # one remote pod per home pod, none extra
    changed = {
        name: (was, after_remote.get(name)) for name, was in before_remote.items() if after_remote.get(name) != was
    }
    assert changed == {}, f"remote pods deleted or recreated across the failover: {changed}"
    after_shadows = shadow_pods(foreign, twin)
    assert {n: u for n, u in after_shadows.items() if n in before_shadows} == before_shadows
    # Lease and the node heartbeat back with the new leaders: the virtual nodes stay Ready
    for node in VIRTUAL_NODES.values():
        wait_until(functools.partial(node_ready, home, node), 60, f"{node} Ready")

    # the supervisor restarts the killed replicas: they stand by, writing nothing
    for leader in leaders:
        runtime.start(leader)
    for leader in leaders:
        url = probe_url_after_restart(runtime, leader)
        wait_until(functools.partial(ready, url), 60, f"{leader} ready as a stand-by")
        campaign_rounds(url, 1)
        assert writes(requests_of(url)) == 0


def probe_url_after_restart(runtime: ExternalRuntime, component: str) -> str:
    """The last probe address in the log: the restarted process's, not the killed one's."""

    def found() -> str | None:
        text = runtime.log(component).read_text(errors="replace")
        matches = re.findall(r"probes on (http://[\d.]+:\d+)", text)
        return matches[-1] if matches and ready(matches[-1]) else None

    url: str = wait_until(found, 60, f"{component} serving its probes again")
    return url


def serves_trusted_webhooks(home: Client, port: int) -> bool:
    """A TLS handshake with 127.0.0.1:port verified against the pod webhook's caBundle succeeds."""
    config = home.get(MutatingWebhookConfiguration, names.POD_MUTATING_WEBHOOK_CONFIGURATION)
    [webhook] = config.webhooks or []
    context = ssl.create_default_context(cadata=base64.b64decode(webhook.clientConfig.caBundle or "").decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1"),
    ):
        return True


def uid_of(client: Client, namespace: str) -> str | None:
    found = client.get(Namespace, namespace)
    return found.metadata.uid if found.metadata else None


# -- controller-manager -----------------------------------------------------------------------------
def test_killing_the_leader_controller_manager_during_namespace_offloading(
    home: Client, foreign: dict[str, Client], runtime: ExternalRuntime, unique_name: str
) -> None:
    """The stand-by serves its webhooks (on a port of its own) and writes nothing; once the leader is
    killed with offloadings half done, it completes them; no twin namespace is recreated."""
    standby_port = listener_port()
    standby = runtime.add_replica("controller-manager", ["--webhook-port", str(standby_port)])
    runtime.start(standby)
    url = probe_url(runtime, standby)
    wait_until(lambda: "standing by" in runtime.log(standby).read_text(errors="replace"), 60, "stand-by campaigning")
    # its webhooks serve, with a certificate the API server trusts (the caBundle the leader keeps)
    wait_until(functools.partial(ready, url), 60, "stand-by ready (its CA is the one in the webhook configurations)")
    assert serves_trusted_webhooks(home, standby_port)
    campaign_rounds(url, 3)
    assert holder(home, names.CONTROLLER_MANAGER_LEASE) == runtime.identity("controller-manager")
    assert writes(requests_of(url)) == 0

    namespaces = [f"{unique_name[:50]}-{i}" for i in range(4)]
    offload(home, namespaces[0], {"podOffloadingStrategy": "Remote"})
    wait_phase(home, namespaces[0], "Ready", 60)
    twins_before = {c: uid_of(client, f"{namespaces[0]}-home") for c, client in foreign.items()}
    assert writes(requests_of(url)) == 0  # the leader did that work
    for namespace in namespaces[1:]:
        offload(home, namespace, {"podOffloadingStrategy": "Remote"})
    killed = time.monotonic()
    runtime.kill("controller-manager")
    took_over = wait_until(
        lambda: writes(requests_of(url), leases=False) > 0 and time.monotonic() - killed,
        TAKEOVER_BOUND + 30,
        "takeover",
    )
    print(f"\nfailover (SIGKILL -> new leader controller-manager writing): {took_over:.1f}s")
    assert took_over <= TAKEOVER_BOUND
    assert holder(home, names.CONTROLLER_MANAGER_LEASE) == runtime.identity(standby)
    for namespace in namespaces:
        wait_phase(home, namespace, "Ready", 60)
    twins_after = {c: uid_of(client, f"{namespaces[0]}-home") for c, client in foreign.items()}
    assert twins_after == twins_before
    for namespace in namespaces[1:]:
        for client in foreign.values():
            assert client.get(Namespace, f"{namespace}-home").metadata is not None

    # back as before for the other tests: the restarted first replica stands by; stopping the second
    # gracefully releases the Lease, so the first leads at once (with its webhook port and CA)
    runtime.start("controller-manager")
    probe_url_after_restart(runtime, "controller-manager")
    released = time.monotonic()
    runtime.stop(standby)
    wait_until(
        lambda: holder(home, names.CONTROLLER_MANAGER_LEASE) == runtime.identity("controller-manager"),
        TIMING.lease_duration,
        "the first replica leading again",
    )
    handed_over = time.monotonic() - released
    print(f"graceful hand-over (SIGTERM -> Lease taken by the stand-by): {handed_over:.1f}s")
    assert handed_over < TIMING.lease_duration  # released, not expired
    for namespace in namespaces:
        wait_phase(home, namespace, "Ready", 60)
