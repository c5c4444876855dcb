"""Shared fixtures: real local clusters (one home, two foreign) started once per test session.

The clusters live under their own state directory, so a developer's `liqo-stack dev up` clusters
are never touched. Whatever a previous, killed session left there is deleted first; at the end
of the session (tests failed, interrupted or terminated) every cluster process is stopped.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from lightkube import Client

from liqo_stack.dev import paths
from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment, default_pod_cidr, foreign_cluster_id
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from tests.support.stack_results import read_results_when_asked

# The two foreign clusters share one pod range, as independently installed clusters often do: the
# stack must remap one of them so that no two pods share an IP at home (docs/reflection.md).
# Without metrics-servers: the few tests that read the metrics API start them (tests/e2e/conftest.py)
# (each scrapes every node every 10 s, the virtual kubelets' through the foreign metrics API).
SESSION_LAYOUT = ClusterLayout(
    foreign=2, nodes_per_cluster=2, pod_cidrs={"foreign-2": default_pod_cidr(1)}, metrics_servers=False
)
REPO = Path(__file__).resolve().parents[1]

# Every pulumi command of the tests (the Automation API's and the pinned CLI's) writes its stack's state once,
# when the command ends, instead of after each resource step: a third less of the pulumi CLI's CPU in an
# own-stack module (tests/e2e/test_stack.py: 32.4 s -> 22.6 s) in a suite that is CPU-bound. The steps'
# checkpoints keep the state of a command that crashes midway, which no test does: a failed or refused
# update still writes its end (pulumi's SnapshotManager saves on close either way).
os.environ.setdefault("PULUMI_SKIP_CHECKPOINTS", "true")
# ... and each `up`, `refresh` and `destroy` reads its outputs and summary back only when a test asks for them
# (three CLI processes fewer each: tests/support/stack_results.py)
read_results_when_asked()


def _terminate_as_interrupt(signum: int, frame: FrameType | None) -> None:
    # SIGTERM/SIGHUP (CI cancelling, a closed terminal) get the same orderly teardown as Ctrl-C.
    raise KeyboardInterrupt(f"signal {signum}")


# Under `bash scripts/test.sh` five pytest-xdist workers run at once, each with its own clusters, each
# given one lane of modules whole (LaneScheduling); unit tests go to whichever worker is free. The e2e
# tier waits on API servers more than it computes: three lanes kept the two cores about 60 % busy, five
# about 90 % (figures in docs/performance.md).
# The lanes are chosen from the modules' times so that they take about as long. The first and the
# fifth hold e2e modules that make stacks of their own only (the first also the integration tier, but for
# test_dev_teardown, in the second, the lightest in the runs on record), so
# they never install the shared stack; the failover tests (a runtime of their own) run first of the
# shared stack's in theirs. An e2e module named in no lane is in LAST_LANE.
LANES = {
    "clusters-1": {
        "test_package_three_teams",  # three stacks of its own: foreign side, platform, application team
        "test_runtime_image",
        "test_two_homes",  # a second home cluster of its own making
    },
    "clusters-2": {
        "test_dev_teardown",  # integration, clusters of its own: two minutes of API servers exiting at their start
        "test_failover",
        "test_links",  # a 2-minute partition, mostly waiting
        "test_namespace_offloading",
        "test_node_pools",
        "test_package_teams",  # an application team's stack beside the shared stack, its platform
        "test_peering_isolation",
        "test_pod_network",
        "test_reflection",
        "test_soak",
        "test_storage",
        "test_virtual_node",
        "test_webhooks",
    },
    "clusters-4": {
        "test_docs_tour",
        "test_foreign_guards",
        "test_kubelet_api",
        "test_namespace_selectors",
        "test_on_demand_offloading",
        "test_pod_lifecycle",
        "test_pod_offloading",
        "test_pods_no_foreign_node_fits",
        "test_policies",
        "test_preview",
        "test_preview_pod",
        "test_tokens_and_events",
    },
    "clusters-5": {
        "test_cluster_mode",
        "test_package",
        "test_package_typescript",
        "test_promote",
        "test_stack",
        "test_upgrade",
    },
}
LAST_LANE = "clusters-3"  # test_own_program, test_pulumi_offline (stacks of their own) first, then the shared stack's


def lane_of(nodeid: str) -> str:
    """The lane of a test by its node id (`tests/e2e/test_x.py::test_y[...]`), or the id itself for a
    test that needs no clusters (it may run anywhere)."""
    path = Path(nodeid.partition("::")[0])
    tier = path.parts[1] if len(path.parts) > 2 else ""
    if tier not in ("integration", "e2e"):
        return nodeid
    named = next((lane for lane, modules in LANES.items() if path.stem in modules), None)
    return named or ("clusters-1" if tier == "integration" else LAST_LANE)


def merged_lane(lane: str, workers: int) -> str:
    """The lane that `lane` runs in with `workers` workers: itself with as many workers as lanes, else the
    lanes numbered alike modulo `workers` run as one. Scopes that are not lanes pass through."""
    number = lane.removeprefix("clusters-")
    if not number.isdigit() or workers <= 0:
        return lane
    return f"clusters-{(int(number) - 1) % workers + 1}"


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    # xdist's own `--dist loadgroup` marks groups by rewriting node ids, which pytest 9 no longer allows
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types
        """Each lane to one worker, whole and in collection order (see _run_order). With fewer workers
        than lanes (`-n 2`), lanes are merged until there are as many as workers: a worker's clusters
        then serve one merged lane in _run_order, its stacks of their own all before the shared stack is
        installed, not one lane after another (a module with a stack of its own run after another
        lane's shared stack found that stack's objects and runtime in its clusters)."""

        def _split_scope(self, nodeid: str) -> str:
            return merged_lane(lane_of(nodeid), self.numnodes)

    return LaneScheduling(config, log)


def _run_order(item: pytest.Item) -> int:
    """Fast tiers first (a broken unit fails in seconds). Among the e2e modules, those that need the
    clusters without the shared stack run before tests/e2e/conftest.py installs it (on first use,
    once), and those that need a runtime of their own (leader election) right after it is, before
    every module that shares the runtime: that one then starts once. Each worker runs its lane in
    this order."""
    tier = Path(str(item.path)).relative_to(REPO / "tests").parts[0]
    if tier != "e2e":
        return {"unit": 0, "integration": 1}.get(tier, 2)
    if "session_stack" not in getattr(item, "fixturenames", []):
        return 3
    return 4 if getattr(getattr(item, "module", None), "LEADER_ELECTION", False) else 5


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_run_order)  # stable: each group keeps the files' order


def test_state_root() -> Path:
    """This session's folder: one per xdist worker, so each worker's clusters are its own."""
    return paths.state_root() / "pytest" / os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.fixture(scope="session")
def dev_env() -> Iterator[DevEnvironment]:
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    signal.signal(signal.SIGHUP, _terminate_as_interrupt)
    env = DevEnvironment(state_dir=test_state_root() / "clusters")
    env.down(progress=lambda message: None)  # leftovers of a killed session
    try:
        env.up(SESSION_LAYOUT, progress=lambda message: print(f"[clusters] {message}", flush=True))
        yield env
    finally:
        env.down(progress=lambda message: None)


@pytest.fixture(scope="session")
def session_layout() -> ClusterLayout:
    return SESSION_LAYOUT


@pytest.fixture(scope="session")
def home(dev_env: DevEnvironment) -> Client:
    return dev_env.client("home")


@pytest.fixture(scope="session")
def foreign_ids() -> list[str]:
    return [foreign_cluster_id(i) for i in range(1, SESSION_LAYOUT.foreign + 1)]


@pytest.fixture(scope="session")
def foreign(dev_env: DevEnvironment, foreign_ids: list[str]) -> dict[str, Client]:
    return {cluster_id: dev_env.client(cluster_id) for cluster_id in foreign_ids}


@pytest.fixture(scope="session")
def pulumi_env(tmp_path_factory: pytest.TempPathFactory) -> PulumiEnvironment:
    """Offline Pulumi: a file backend of its own for the session, passphrase secrets, no downloads."""
    return PulumiEnvironment(state_dir=tmp_path_factory.mktemp("pulumi"), bin_dir=paths.bin_dir())


@pytest.fixture(scope="session")
def project_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The liqo-stack program copied out of the checkout, so stacks' Pulumi.<stack>.yaml never land in it."""
    project = tmp_path_factory.mktemp("project")
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(REPO / name, project / name)
    return project


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A DNS-1123 name derived from the test's name, so tests never share objects."""
    base = request.node.name.lower().replace("_", "-").replace("[", "-").replace("]", "")
    name = "".join(ch for ch in base if ch.isalnum() or ch == "-")
    if len(name) > 40:  # cut, with a digest of the whole, so parametrized cases stay apart
        name = name[:33].strip("-") + "-" + hashlib.sha1(name.encode()).hexdigest()[:6]
    return name + f"-{os.getpid() % 1000}"
