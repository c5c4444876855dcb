"""The runtime in external mode, as local processes (`python -m runtime ...`), logs and pids in the
state folder: the controller-manager, one process for the foreign agents of every foreign cluster
and one virtual-kubelet process serving every foreign cluster (`one_process=False`: one of each per
foreign cluster, as the scale-out bench compares). Their components are `foreign-agents` and
`virtual-kubelet`; the names `agent-<foreign id>` and `kubelet-<foreign id>` stand for the process
that serves that cluster, whichever it is.

The dev env and the tests run it this way; the stack installs the same objects with their
Deployments scaled to zero. Processes outlive the CLI that started them (the demo leaves them
running); `stop()` (and `liqo-stack dev down`) ends them.

One process per component, without leader election by default: a leader that cannot renew its
Lease (its cluster unreachable for the renew deadline) exits, and here, unlike a Deployment's pod,
nothing would start it again; a foreign agent would stay gone after a short outage of its cluster.
With `leader_election=True` every component elects, and `add_replica` starts further replicas of
one (named `<component>@<n>`), which stand by until the leader's Lease is released or expires (the
failover tests). Each replica has a stable identity in the Lease, so a replica restarted after a
crash leads again at once rather than waiting for its own old Lease to expire.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import httpx2
from lightkube import ApiError, Client, KubeConfig
from lightkube.resources.apps_v1 import Deployment

from liqo_stack.dev import paths, ports
from runtime.api import names

SHARED_KUBELET = "virtual-kubelet"  # the component of the one process serving every foreign cluster
SHARED_AGENT = "foreign-agents"  # the one process of every foreign cluster's agent
KUBELET_BASE_PORT = 10250  # the kubelet's port; the next virtual kubelets take the next free ones
LOG_TAIL_LINES = 20  # of a dead component's log, in the error that reports it
# what the stack's Deployment says for the cluster, and this runtime says for the local processes
_SET_BY_THE_EXTERNAL_RUNTIME = frozenset({"--home-cluster-id", "--webhook-address", "--webhook-port", "--kubeconfig"})


class RuntimeDied(RuntimeError):
    """A component's process ended while it should run; the message names it, its log and its last lines."""


def ports_in_use(lines: list[str]) -> list[int]:
    """The ports a component's log says it could not bind ("... ('127.0.0.1', 9443): address already in use")."""
    return sorted({int(m.group(1)) for line in lines if (m := _PORT_IN_USE.search(line))})


# "127.0.0.1:9443: address ...", "('127.0.0.1', 9443): address ...", "('::1', 9443, 0, 0): address ..."
_PORT_IN_USE = re.compile(r"(\d{2,5})(?:, \d+, \d+)?\D{0,3}address already in use")


def _holders_of(port: int) -> str:
    try:
        return "; ".join(ports.holders(port)) or "nothing now"
    except Exception as err:  # never in the way of the report it adds to
        return f"(not found: {err})"


def free_ports_from(start: int, count: int, taken: set[int]) -> list[int]:
    """`count` ports from `start` up that nothing listens on and are not in `taken`: runtimes started
    side by side on one machine (the dev env, a bench, the tests) never collide on the kubelet port."""
    found: list[int] = []
    port = start
    while len(found) < count:
        if port not in taken and ports.is_free(port):
            found.append(port)
        port += 1
    return found


class ExternalRuntime:
    def __init__(
        self,
        kubeconfigs: dict[str, Path],
        home_cluster_id: str,
        *,
        webhook_port: int = 9443,
        kubelet_ports: Mapping[str, int] | None = None,
        state_dir: Path | None = None,
        leader_election: bool = False,
        agents: bool = True,
        one_process: bool = True,
    ) -> None:
        """`kubeconfigs`: admin kubeconfig of each cluster by id, the home cluster's included.
        `kubelet_ports`: where each foreign cluster's virtual kubelet serves the kubelet API (its
        Node advertises it, so each needs its own); by default the first ports from 10250 up that
        nothing listens on, in cluster order. `agents`: whether it runs the foreign agents too (a second
        home's runtime leaves them to the first: one agent serves every home of a foreign cluster).
        `one_process`: one virtual-kubelet process serves every foreign cluster, and one agent process
        (without leader election: with it, each agent elects in its own cluster, one process each)."""
        self.agents = agents
        self.one_kubelet = one_process
        self.one_agent = one_process and not leader_election
        self.kubeconfigs = kubeconfigs
        self.home_cluster_id = home_cluster_id
        self.foreign_ids = [c for c in kubeconfigs if c != home_cluster_id]
        self.webhook_port = webhook_port
        given = dict(kubelet_ports or {})
        unset = [c for c in self.foreign_ids if c not in given]
        defaults = free_ports_from(KUBELET_BASE_PORT, len(unset), set(given.values()))
        self.kubelet_ports = {**dict(zip(unset, defaults, strict=True)), **given}
        if len(set(self.kubelet_ports.values())) != len(self.kubelet_ports):
            raise ValueError(f"kubelet_ports: each virtual kubelet needs its own port, got {self.kubelet_ports}")
        self.folder = (state_dir or paths.state_root()) / "runtime"
        self.extra_args: dict[str, list[str]] = {}  # per component, appended to its command (tests)
        self.replicas: list[str] = []  # further replicas, `<component>@<n>`
        self.leader_election = leader_election
        self._declared: list[str] = []  # the controller-manager's declared settings, as last read

    @property
    def components(self) -> list[str]:
        kinds = [kind for kind in ("agent", "kubelet") if kind != "agent" or self.agents]
        shared = []
        if self.agents and self.one_agent:
            kinds.remove("agent")
            shared.append(SHARED_AGENT)
        if self.one_kubelet:
            kinds.remove("kubelet")
            shared.append(SHARED_KUBELET)
        first = ["controller-manager"] + [f"{kind}-{c}" for c in self.foreign_ids for kind in kinds]
        return first + shared + self.replicas

    def component(self, name: str) -> str:
        """The component (or replica) `name` stands for: `kubelet-<id>` is the shared virtual kubelet's
        process when one serves every foreign cluster."""
        base, at, replica = name.partition("@")
        kind, _, cluster_id = base.partition("-")
        if cluster_id in self.foreign_ids:
            if kind == "kubelet" and self.one_kubelet:
                return f"{SHARED_KUBELET}{at}{replica}"
            if kind == "agent" and self.one_agent:
                return f"{SHARED_AGENT}{at}{replica}"
        return name

    def add_replica(self, component: str, extra_args: list[str] | None = None) -> str:
        """Another replica of `component` (not started); `extra_args` go after the component's own, e.g.
        a port of its own for what it serves. Returns its name."""
        component = self.component(component)
        if "@" in component or component not in self.components:
            raise ValueError(f"component: not a component of this runtime: {component!r}")
        if not self.leader_election:
            raise ValueError(f"a replica of {component} needs leader election: ExternalRuntime(leader_election=True)")
        replica = f"{component}@{sum(r.startswith(component + '@') for r in self.replicas) + 2}"
        self.replicas.append(replica)
        self.extra_args[replica] = [*self.extra_args.get(component, []), *(extra_args or [])]
        return replica

    def _extra_args(self, replica: str) -> list[str]:
        """What the tests added to the command: a shared virtual kubelet takes those given for it and
        for each `kubelet-<id>` it stands for."""
        found = list(self.extra_args.get(replica, []))
        if replica in (SHARED_KUBELET, SHARED_AGENT):
            kind = "kubelet" if replica == SHARED_KUBELET else "agent"
            for cluster_id in self.foreign_ids:
                found += self.extra_args.get(f"{kind}-{cluster_id}", [])
        return found

    def command(self, component: str) -> list[str]:
        replica = component = self.component(component)
        component = component.partition("@")[0]
        home = ["--kubeconfig", str(self.kubeconfigs[self.home_cluster_id]), "--home-cluster-id", self.home_cluster_id]
        if component == "controller-manager":
            args = ["controller-manager", *home, "--webhook-port", str(self.webhook_port), *self.declared_settings()]
        elif component == SHARED_AGENT:
            clusters = [f"--cluster={c}={self.kubeconfigs[c]}" for c in self.foreign_ids]
            args = ["foreign-agent", *clusters]
        elif component.startswith("agent-"):
            cluster_id = component.removeprefix("agent-")
            args = ["foreign-agent", "--kubeconfig", str(self.kubeconfigs[cluster_id]), "--cluster-id", cluster_id]
        elif component == SHARED_KUBELET:
            ports = [f"--kubelet-port-of={c}={self.kubelet_ports[c]}" for c in self.foreign_ids]
            # a foreign cluster added later (a pool, a peering) takes free ports from the base up
            args = ["virtual-kubelet", *home, *ports, "--kubelet-port", str(KUBELET_BASE_PORT)]
        else:
            cluster_id = component.removeprefix("kubelet-")
            port = str(self.kubelet_ports[cluster_id])
            args = ["virtual-kubelet", *home, "--foreign-cluster-id", cluster_id, "--kubelet-port", port]
        identity = f"--leader-elect-identity={self.identity(replica)}" if self.leader_election else "--no-leader-elect"
        return [sys.executable, "-m", "runtime", *args, identity, *self._extra_args(replica)]

    def declared_settings(self) -> list[str]:
        """The controller-manager's settings the stack declares on its Deployment (scaled to zero in
        external mode), such as the on-demand defaults of `liqo:onDemand`: read at each start, as a
        rollout would pass them; those read last when the home API server cannot answer (a restart)."""
        try:
            client = Client(KubeConfig.from_file(self.kubeconfigs[self.home_cluster_id]), timeout=httpx2.Timeout(10))
            deployment = client.get(Deployment, names.CONTROLLER_MANAGER, namespace=names.LIQO_NAMESPACE)
        except ApiError as err:
            if err.status.code == 404:  # the stack is not installed (yet): nothing declared
                self._declared = []
            return self._declared
        except (httpx2.HTTPError, OSError, KeyError):
            return self._declared
        containers = (
            deployment.spec.template.spec.containers if deployment.spec and deployment.spec.template.spec else []
        )
        declared = (containers[0].args or []) if containers else []
        # the subcommand's own flags (the process-wide ones before it, probe and metrics ports, are local)
        own = declared[declared.index("controller-manager") + 1 :] if "controller-manager" in declared else []
        self._declared = [a for a in own if a.partition("=")[0] not in _SET_BY_THE_EXTERNAL_RUNTIME]
        return self._declared

    def identity(self, component: str) -> str:
        """The replica's name in its component's Lease: the same across restarts of that replica."""
        return f"{self.component(component)}@{socket.gethostname()}"

    def log(self, component: str) -> Path:
        return self.folder / f"{self.component(component)}.log"

    def probes_url(self, component: str) -> str | None:
        """Where the component's latest start serves /healthz, /readyz and /metrics (it logs it)."""
        try:
            lines = self.log(component).read_text(errors="replace").splitlines()
        except OSError:
            return None
        found = [line.partition("probes on ")[2].split()[0] for line in lines if "probes on http://" in line]
        return found[-1] if found else None

    def ready(self, component: str) -> bool:
        """The component's /readyz passes (as a Deployment's rollout would wait for)."""
        url = self.probes_url(component)
        if url is None:
            return False
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
                return bool(response.status == 200)
        except OSError:  # not listening yet, or 500: not ready
            return False

    def _pid_file(self, component: str) -> Path:
        return self.folder / f"{self.component(component)}.pid"

    def pid(self, component: str) -> int | None:
        """The component's process id, if it runs (a zombie, ended but not yet reaped, does not)."""
        try:
            pid = int(self._pid_file(component).read_text())
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # our child that ended by itself (a virtual kubelet whose
                # VirtualNode was removed) stays a zombie, alive to kill(0), until reaped
            os.kill(pid, 0)
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, ValueError, IndexError):
            return None
        return None if state == "Z" else pid  # Z: another process's child, ended, not reaped yet

    def check_alive(self) -> None:
        """Raise RuntimeDied naming each started component whose process ended, with its log's last lines."""
        dead = [c for c in self.components if self._pid_file(c).exists() and self.pid(c) is None]
        if not dead:
            return
        reports = []
        for component in dead:
            try:
                tail = self.log(component).read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            except OSError:
                tail = ["(no log)"]
            reports.append(f"{component} exited; its log: {self.log(component)}\n    " + "\n    ".join(tail))
            for port in ports_in_use(tail):  # what to stop, while it still holds the port
                reports.append(f"    port {port} is held by: {_holders_of(port)}")
        raise RuntimeDied("runtime process ended:\n" + "\n".join(reports))

    def running(self) -> list[str]:
        """Components with a live process, whatever the cluster list this object was made with."""
        found = sorted(p.stem for p in self.folder.glob("*.pid")) if self.folder.is_dir() else []
        return [c for c in found if self.pid(c) is not None]

    def start(self, component: str) -> None:
        if self.pid(component) is not None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        with self.log(component).open("ab") as log:
            process = subprocess.Popen(
                self.command(component), stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
            )
        self._pid_file(component).write_text(str(process.pid))

    def start_all(self) -> None:
        for component in self.components:
            self.start(component)

    def kill(self, component: str) -> None:
        """SIGKILL: no goodbye, as a crash would."""
        self._signal(component, signal.SIGKILL, timeout=10)

    def stop(self, component: str) -> None:
        self._signal(component, signal.SIGTERM, timeout=20)

    def stop_all(self) -> None:
        for component in self.components:
            self.stop(component)

    def _signal(self, component: str, sig: signal.Signals, timeout: float) -> None:
        pid = self.pid(component)
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.pid(component) is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reap it when it is our child
            time.sleep(0.1)
        if self.pid(component) is not None:
            os.kill(pid, signal.SIGKILL)
        self._pid_file(component).unlink(missing_ok=True)
