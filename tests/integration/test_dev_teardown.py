"""`down` stops every process of the clusters it started; `up` after `down` starts afresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from liqo_stack.dev import paths
from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment

pytestmark = pytest.mark.clusters


def test_down_leaves_no_process_behind(tmp_path: Path) -> None:
    env = DevEnvironment(state_dir=paths.state_root() / "pytest" / "teardown", bin_dir=paths.bin_dir())
    env.down(progress=lambda m: None)
    try:
        env.up(ClusterLayout(foreign=0, nodes_per_cluster=1), progress=lambda m: None)
        assert env.existing_clusters() == ["home"]
        assert len(env.processes()) >= 5, "etcd, kube-apiserver, controller-manager, scheduler and kwok run"
        assert env.metrics_server("home").pid() in env.processes(), "and metrics-server, beside them"
    finally:
        env.down(progress=lambda m: None)
    assert env.processes() == []
    assert env.existing_clusters() == []
    assert not env.merged_kubeconfig.exists()
