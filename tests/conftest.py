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

import pytest
from lightkube import Client

from liqo_stack.dev import paths
from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment, default_pod_cidr, foreign_cluster_id
from liqo_stack.dev.pulumi_offline import PulumiEnvironment

# The two foreign clusters share one pod range, as independently installed clusters often do: the
# stack must remap one of them so that no two pods share an IP at home (seed 002).
SESSION_LAYOUT = ClusterLayout(foreign=2, nodes_per_cluster=2, pod_cidrs={"foreign-2": default_pod_cidr(1)})
REPO = Path(__file__).resolve().parents[1]


def _terminate_as_interrupt(signum: int, frame: FrameType | None) -> None:
    # SIGTERM/SIGHUP (CI cancelling, a closed terminal) get the same orderly teardown as Ctrl-C.
    raise KeyboardInterrupt(f"signal {signum}")


# Two lanes of clusters run at once under `bash scripts/test.sh` (pytest-xdist, `--dist loadgroup`):
# each worker starts its own clusters, stack and runtime for the lane it is given. The first lane
# holds what needs the clusters without the shared stack and what needs a runtime of its own; these
# shared-stack modules join it so that both lanes take about as long (figures: docs/performance.md).
FIRST_LANE_SHARED = {"test_preview", "test_webhooks"}


def _run_order(item: pytest.Item) -> tuple[int, int]:
    """(lane, place in the lane). Fast tiers first (a broken unit fails in seconds). Among the e2e
    modules, those that need the clusters without the shared stack run before tests/e2e/conftest.py
    installs it (on first use, once), and those that need a runtime of their own (leader election)
    after every module that shares the runtime, so it is started once."""
    tier = Path(str(item.path)).relative_to(REPO / "tests").parts[0]
    if tier != "e2e":
        return 0, {"unit": 0, "integration": 1}.get(tier, 2)
    if "session_stack" not in getattr(item, "fixturenames", []):
        return 1, 3
    if getattr(getattr(item, "module", None), "LEADER_ELECTION", False):
        return 1, 5
    return (1 if Path(str(item.path)).stem in FIRST_LANE_SHARED else 2), 4


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups into the node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Items in run order (stable: each group keeps the files' order), each with the lane it runs
    in when xdist spreads them: integration and the first e2e lane in one, the rest in the other."""
    items.sort(key=lambda item: (_run_order(item)[1], _run_order(item)[0]))
    for item in items:
        lane, place = _run_order(item)
        if place > 0:  # unit tests need no clusters: any worker runs them
            item.add_marker(pytest.mark.xdist_group(f"clusters-{max(lane, 1)}"))


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
