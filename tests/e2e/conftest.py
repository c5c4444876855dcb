"""The stack installed on the dev clusters and the runtime running against it, shared by the e2e modules.

One stack (`session_stack`) and one runtime serve every module that only reads them or cleans up
after itself: installing and starting them once is most of what a module used to cost. Between
modules, the `runtime` fixture puts the shared state back: every offloading removed and waited for,
the namespaces a module created deleted, components a test killed started again, and, when a
module ran `pulumi up`, the stack's config restored with `up --refresh` as the next module starts.

Modules that need the clusters without the shared stack (their own stack, `pulumi destroy`, the
upgrade from a release) run before it is installed; modules that need a runtime of their own
(`LEADER_ELECTION = True`: replicas and leader election) run right after it is, before the shared
runtime first starts, so it is never restarted for them.
`pytest_collection_modifyitems` in tests/conftest.py orders them that way.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType
from pulumi import automation as auto

from liqo_stack.dev import ports
from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from liqo_stack.kube import list_if_served
from runtime.api import names
from runtime.api.resources import NamespaceOffloadingResource, NamespaceOffloadingSelectorResource, VirtualNodeResource
from runtime.kube import unless_gone
from tests.support.kube import (
    VIRTUAL_NODES,
    kubelet_port_of,
    node_ready,
    offload,
    served_on,
    wait_phase,
    wait_until,
)

# negotiated for both peerings: `liqo` claims get the default one (test_storage.py provisions it)
STORAGE_CLASSES = [{"storageClassName": "fast-ssd"}, {"storageClassName": "local-static", "default": True}]
SHARED_STACK = "offloading"
# the twin names beyond DefaultName both foreign clusters allow home (test_namespace_offloading.py's
# EnforceSameName and SelectedName twins); any other is refused there (test_foreign_guards.py)
TWIN_NAMES = ["payments", "taken", "shared-twin"]
# issue 39: the custom resource type the shared stack opts in (test_custom_resources.py installs its CRDs)
WIDGETS = {"group": "e2e.liqo-stack.dev", "version": "v1", "resource": "widgets", "reflectStatus": True}
# A failed test's report carries what each runtime component logged while it ran (its last lines):
# a CI log then tells what the runtime did, after the clone it ran in is gone.
RUNTIME_LOG_LINES = 60
_LOG_OFFSETS = pytest.StashKey[dict[Path, int]]()
_RUNTIME_SLOT = pytest.StashKey["RuntimeSlot"]()
# the shared stack's config as installed, and the number of updates in its history since
_SHARED_STACK_AS_INSTALLED = pytest.StashKey[tuple[dict[str, Any], int]]()


def _runtime_logs(item: pytest.Item, setting_up: bool = False) -> list[Path]:
    """The logs of the runtimes the test uses (through its fixtures); in a failed set-up, before its
    fixtures are all there, those of the runtime the clusters have now."""
    runtimes = [value for value in getattr(item, "funcargs", {}).values() if isinstance(value, ExternalRuntime)]
    slot = item.session.stash.get(_RUNTIME_SLOT, None)
    if setting_up and not runtimes and slot is not None and slot.current is not None:
        runtimes = [slot.current]
    return [runtime.log(component) for runtime in runtimes for component in runtime.components]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_LOG_OFFSETS] = {log: log.stat().st_size if log.exists() else 0 for log in _runtime_logs(item)}
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if report.failed and report.when in ("setup", "call"):
        # a failed set-up has no window of its own: the logs' ends, of the runtimes set up by then
        if report.when == "call":
            starts, while_ = item.stash.get(_LOG_OFFSETS, {}), "while the test ran"
        else:
            starts, while_ = dict.fromkeys(_runtime_logs(item, setting_up=True), 0), "up to the failed set-up"
        for log, start in starts.items():
            try:
                with log.open("rb") as stream:
                    stream.seek(start)
                    lines = stream.read().decode(errors="replace").splitlines()
            except OSError:
                continue
            if lines:
                shown = "\n".join(lines[-RUNTIME_LOG_LINES:])
                report.sections.append((f"{log.name} {while_} (last {RUNTIME_LOG_LINES} lines)", shown))
    return report


# How long the session's webhook port is held from every other taker on the machine: longer than a session
# lasts (CI allows 90 minutes). Given back when the session ends.
SESSION_PORT_HOLD_SECONDS = 3 * 3600.0


@pytest.fixture(scope="session")
def webhook_port() -> Iterator[int]:
    """The port the session's runtimes serve their webhook on, bound only when the first of them starts (often
    many minutes later) and again by each: below the kernel's ephemeral range, where an outgoing connection
    took a port the kernel had picked before it was bound, and held for the whole session, where a hold of
    ten minutes ended before it was bound and the port went to another runtime (docs/performance.md)."""
    (port,) = ports.hand_out(1, hold_for=SESSION_PORT_HOLD_SECONDS)
    yield port
    ports.give_back([port])


# The taints the home's pods may tolerate in the foreign clusters (every node; docs/security.md#nodes): the
# tolerations the tests give their pods (tests/e2e/test_pod_lifecycle.py, test_preview_pod.py).
ALLOWED_NODES = {
    "tolerations": [
        {"key": "example.com/gpu", "operator": "Exists"},
        {"key": "example.com/maintenance", "operator": "Exists"},
    ]
}


@pytest.fixture(scope="session")
def session_stack(
    dev_env: DevEnvironment,
    pulumi_env: PulumiEnvironment,
    project_dir: Path,
    webhook_port: int,
    session_layout: ClusterLayout,
    request: pytest.FixtureRequest,
) -> auto.Stack:
    """The stack with foreign-1 in region europe and foreign-2 in us-west + staging; their pod
    ranges are declared, so foreign-2's (the same as foreign-1's) is remapped at home. Not destroyed:
    the session's clusters go with it (`dev_env`), and its state with the session's temporary folder
    (a destroy took two heavy engine runs a session; test_stack destroys a stack of its own)."""
    stack = pulumi_env.stack_for_directory(project_dir, SHARED_STACK)
    config = {
        "home": {
            "clusterId": "home",
            "kubeconfigPath": str(dev_env.kubeconfig("home")),
            "podCIDR": session_layout.pod_cidr("home"),
        },
        "foreignClusters": [
            {
                "clusterId": "foreign-1",
                "kubeconfigPath": str(dev_env.kubeconfig("foreign-1")),
                "labels": {"region": "europe"},
                "podCIDR": session_layout.pod_cidr("foreign-1"),
                "storageClasses": STORAGE_CLASSES,
                "twinNames": TWIN_NAMES,
                "nodes": ALLOWED_NODES,
            },
            {
                "clusterId": "foreign-2",
                "kubeconfigPath": str(dev_env.kubeconfig("foreign-2")),
                "labels": {"region": "us-west", "staging": "true"},
                "podCIDR": session_layout.pod_cidr("foreign-2"),
                "storageClasses": STORAGE_CLASSES,
                "twinNames": TWIN_NAMES,
                "nodes": ALLOWED_NODES,
            },
        ],
        "runtime": {"mode": "external", "webhookPort": webhook_port},
        "virtualKubelet": {"healthCheckIntervalSeconds": 2, "failureThreshold": 2},
        "reflection": {"customResources": [WIDGETS]},
    }
    pulumi_env.set_liqo_config(stack, config)
    stack.up(on_output=print)
    request.session.stash[_SHARED_STACK_AS_INSTALLED] = (PulumiEnvironment.liqo_config(stack), _updates(stack))
    return stack


def _updates(stack: auto.Stack) -> int:
    # without --show-secrets: the history's config is not decrypted (a PBKDF2 key derivation per command)
    return sum(1 for entry in stack.history(show_secrets=False) if entry.kind == "update")


@pytest.fixture(scope="module")
def installed(session_stack: auto.Stack, home: Client, request: pytest.FixtureRequest) -> auto.Stack:
    """The shared stack as the session installed it, for one module: if an earlier module ran
    `pulumi up` (a changed config), the config is put back and applied with a refresh (which also
    undoes hand edits) first. Put back as the next module starts rather than as the one that
    changed it ends: the last module of a lane then costs no `up` that nothing would use.
    Likewise the module before left its namespaces unoffloading (`runtime`): they are gone before this
    one starts, and that `up` ran meanwhile."""
    config, updates = request.session.stash[_SHARED_STACK_AS_INSTALLED]
    if _updates(session_stack) != updates or PulumiEnvironment.liqo_config(session_stack) != config:
        PulumiEnvironment.set_liqo_config(session_stack, config)
        session_stack.up(on_output=print, refresh=True)
        request.session.stash[_SHARED_STACK_AS_INSTALLED] = (config, _updates(session_stack))
    unoffload_all(home)
    return session_stack


class RuntimeSlot:
    """The one runtime the clusters can have at a time (two would serve the same virtual nodes):
    the shared one, kept across modules, or a module's own, stopped when the module ends."""

    def __init__(self, dev_env: DevEnvironment, foreign_ids: list[str], webhook_port: int, root: Path) -> None:
        self.dev_env = dev_env
        self.foreign_ids = foreign_ids
        self.webhook_port = webhook_port
        self.root = root
        self.current: ExternalRuntime | None = None
        self.shared: ExternalRuntime | None = None
        self.count = 0
        self.handed_out: list[int] = []  # the kubelet ports of every runtime made, given back at the end

    def _kubelet_ports(self) -> dict[str, int]:
        """A new runtime's kubelet ports, new ones (wait_served tells its Nodes from those of the runtime
        before by them), held for the session as the webhook's: the shared runtime's virtual kubelet
        starts again on them after a module killed it, minutes later. Ports the kernel had picked (its
        ephemeral range) were taken meanwhile by another lane's runtime probes (plain HTTP), and the
        virtual kubelet could no longer serve foreign-2."""
        chosen = ports.hand_out(len(self.foreign_ids), hold_for=SESSION_PORT_HOLD_SECONDS)
        self.handed_out += chosen
        return dict(zip(self.foreign_ids, chosen, strict=True))

    def _new(self, leader_election: bool) -> ExternalRuntime:
        self.count += 1
        kubeconfigs = {cluster_id: self.dev_env.kubeconfig(cluster_id) for cluster_id in ["home", *self.foreign_ids]}
        return ExternalRuntime(
            kubeconfigs,
            "home",
            webhook_port=self.webhook_port,
            kubelet_ports=self._kubelet_ports(),
            state_dir=self.root / f"runtime-{self.count}",
            leader_election=leader_election,
            # replicas electing per foreign cluster, as cluster mode's default Deployments do (a shard of
            # one each): the failover tests' leaders are per cluster
            one_process=not leader_election,
        )

    def take(self, own: bool, leader_election: bool) -> ExternalRuntime:
        """The runtime for a module: the shared one (every component running again, whatever a
        previous module killed), or a fresh one of its own."""
        if own or self.current is not self.shared:
            self.release()
        if own:
            self.current = self._new(leader_election)
        else:
            self.shared = self.shared or self._new(leader_election=False)
            self.current = self.shared
        self.current.start_all()
        wait_served(self.dev_env.client("home"), self.current)
        return self.current

    def release(self, unoffload: bool = True) -> None:
        """Stop the current runtime; first unoffload everything (`unoffload`), while the controllers still
        run: they hold the finalizers. Not at the session's end, when the clusters go too."""
        if self.current is not None:
            if unoffload:
                unoffload_all(self.dev_env.client("home"))
            self.current.stop_all()
        self.current = None


def wait_served(home: Client, runtime: ExternalRuntime) -> None:
    """The virtual Nodes Ready and served by `runtime`'s kubelets, their kubelet APIs listening (the
    virtual kubelet's /readyz): a Node outlives a runtime that stopped, still Ready with the old kubelet
    port for a while, and a virtual kubelet started again on the same ports is not serving yet."""
    kubelets = sorted({runtime.component(f"kubelet-{cluster_id}") for cluster_id in runtime.foreign_ids})

    def served(cluster_id: str) -> bool:
        return served_on(home, names.virtual_node_name(cluster_id), runtime.kubelet_ports[cluster_id])

    def how_things_stand() -> str:
        runtime.check_alive()  # a component that exited says so, with its log's last lines
        nodes = ", ".join(
            f"{cluster_id}: port {kubelet_port_of(home, node)} (its own {runtime.kubelet_ports[cluster_id]}), "
            + ("Ready" if node_ready(home, node) else "not Ready")
            for cluster_id in runtime.foreign_ids
            for node in [names.virtual_node_name(cluster_id)]
        )
        unready = [kubelet for kubelet in kubelets if not runtime.ready(kubelet)]
        return f"the virtual nodes served by this runtime ({nodes}; /readyz failing: {unready or 'none'})"

    wait_until(
        lambda: all(map(served, runtime.foreign_ids)) and all(map(runtime.ready, kubelets)), 90, how_things_stand
    )


def unoffload_all(home: Client, wait: bool = True) -> None:
    """Every NamespaceOffloading deleted, and (`wait`) waited for until its finalizer (the twins gone) let go."""

    def listed(kind: Any, namespace: str | None = None) -> list[Any] | None:
        """Every object of `kind`; none before its CRD is installed (or after a destroy); None while the API
        server still says its custom resources are (re)initializing (restarted, or their CRDs just made)."""
        try:
            return list_if_served(home, kind, namespace) or []
        except ApiError as err:
            if err.status.code == 429:
                return None
            raise

    def offloadings() -> list[Any] | None:
        return listed(NamespaceOffloadingResource, namespace="*")

    def both() -> tuple[list[Any], list[Any]] | None:
        found, selectors = offloadings(), listed(NamespaceOffloadingSelectorResource)
        return None if found is None or selectors is None else (found, selectors)

    served = wait_until(lambda: (found := both()) is not None and (found,), 60, "custom resources served")
    offloaded, selectors = served[0]
    # first the selectors, which would offload their namespaces again (their finalizers wait for the offloadings)
    for selector in selectors:
        with unless_gone():
            home.delete(NamespaceOffloadingSelectorResource, selector.metadata.name)
    for offloading in offloaded:  # one a selector made may be gone with it by now
        with unless_gone():
            home.delete(NamespaceOffloadingResource, offloading.metadata.name, namespace=offloading.metadata.namespace)
    if not wait:
        return
    wait_until(lambda: offloadings() == [], 60, "all unoffloaded")
    wait_until(lambda: listed(NamespaceOffloadingSelectorResource) == [], 60, "the selectors deleted")


@pytest.fixture(scope="session")
def runtime_slot(
    dev_env: DevEnvironment,
    foreign_ids: list[str],
    webhook_port: int,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[RuntimeSlot]:
    slot = RuntimeSlot(dev_env, foreign_ids, webhook_port, tmp_path_factory.mktemp("runtimes"))
    request.session.stash[_RUNTIME_SLOT] = slot  # a failed set-up's report shows its runtime's logs
    try:
        yield slot
    finally:
        slot.release(unoffload=False)
        ports.give_back(slot.handed_out)


def namespace_names(home: Client) -> list[str]:
    """The namespaces that exist and are not already being deleted."""
    found: list[Any] = list(home.list(Namespace))
    return [ns.metadata.name for ns in found if not ns.metadata.deletionTimestamp]


def has_own_stack(module: Any) -> bool:
    """The module defines its own `installed` (a stack of its own), overriding the shared one."""
    return hasattr(module, "installed")


@pytest.fixture(scope="module")
def runtime(
    installed: auto.Stack, runtime_slot: RuntimeSlot, home: Client, request: pytest.FixtureRequest
) -> Iterator[ExternalRuntime]:
    """The runtime for this module, against `installed`: the shared one unless the module has its
    own stack or wants leader election (`LEADER_ELECTION = True`: the failover tests' replicas)."""
    leader_election = getattr(request.module, "LEADER_ELECTION", False)
    own = leader_election or has_own_stack(request.module)
    namespaces_before = set(namespace_names(home))
    running = runtime_slot.take(own, leader_election)
    try:
        yield running
    finally:
        if own and not has_own_stack(request.module):
            runtime_slot.release()
        else:  # a module's own stack stops its runtime after its destroy, which needs the runtime; the shared
            # runtime goes on and finishes unoffloading while the next module sets up
            unoffload_all(home, wait=has_own_stack(request.module))
        for name in set(namespace_names(home)) - namespaces_before:  # what the module created goes (not waited for)
            home.delete(Namespace, name)


@pytest.fixture(scope="module")
def offloaded(runtime: ExternalRuntime, home: Client, request: pytest.FixtureRequest) -> str:
    """A namespace named after the test module, offloaded with the Remote strategy to both clusters."""
    namespace: str = request.module.__name__.rpartition(".")[2].removeprefix("test_").replace("_", "-")
    wait_until(lambda: all(node_ready(home, n) for n in VIRTUAL_NODES.values()), 60, "virtual nodes Ready")
    offload(home, namespace, {"podOffloadingStrategy": "Remote"})
    wait_phase(home, namespace, "Ready")
    return namespace


@pytest.fixture
def virtual_node_patched(home: Client) -> Iterator[Any]:
    """Patch the VirtualNode spec of foreign-1 (or of `clusters`) for one test, as an administrator's
    `kubectl patch` would; its offloadingPatch and reflection are put back as they were afterwards."""
    before: dict[str, dict[str, Any]] = {}  # virtual node -> its spec before the first patch

    def patch(spec: dict[str, Any], clusters: tuple[str, ...] = ("foreign-1",)) -> None:
        for cluster_id in clusters:
            name = names.virtual_node_name(cluster_id)
            if name not in before:
                before[name] = home.get(VirtualNodeResource, name, namespace=names.LIQO_NAMESPACE)["spec"]
            home.patch(
                VirtualNodeResource, name, {"spec": spec}, namespace=names.LIQO_NAMESPACE, patch_type=PatchType.MERGE
            )

    yield patch
    for name, spec in before.items():
        now = home.get(VirtualNodeResource, name, namespace=names.LIQO_NAMESPACE)["spec"]
        # each key set whole (a JSON patch's add replaces): merging the old value would keep what the test added
        restore = [
            {"op": "add", "path": f"/spec/{key}", "value": spec[key]}
            if key in spec
            else {"op": "remove", "path": f"/spec/{key}"}
            for key in ("offloadingPatch", "reflection")
            if now.get(key) != spec.get(key)
        ]
        if restore:
            home.patch(VirtualNodeResource, name, restore, namespace=names.LIQO_NAMESPACE, patch_type=PatchType.JSON)


@pytest.fixture(scope="module")
def metrics_servers(dev_env: DevEnvironment, session_layout: ClusterLayout) -> Iterator[None]:
    """Each cluster's metrics-server (the metrics API) for the module that asks: the session's clusters run
    none (tests/conftest.py). A virtual kubelet's /metrics/resource reads the foreign one's."""
    cluster_ids = session_layout.cluster_ids()
    for cluster_id in cluster_ids:
        dev_env.metrics_server(cluster_id).ensure(dev_env.client(cluster_id))
    yield
    for cluster_id in cluster_ids:
        dev_env.metrics_server(cluster_id).remove(dev_env.client(cluster_id))
