"""`down` stops every process of the clusters it started; `up` after `down` starts afresh."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from lightkube.resources.core_v1 import Namespace

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


def test_a_control_plane_whose_api_server_exits_as_it_starts_is_made_again_saying_why(tmp_path: Path) -> None:
    """The API server exits for good when its etcd does not answer within ~20 s of its start: here an
    etcd that never answers, the first time only (as a loaded machine's etcd once did)."""
    real = paths.bin_dir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for binary in real.iterdir():
        (bin_dir / binary.name).symlink_to(binary)
    (bin_dir / "etcd").unlink()
    first_start = tmp_path / "etcd-started-once"
    # Its arguments name the workdir, so `down` finds the silent one among the environment's processes.
    silent_etcd = f"exec {shlex.quote(sys.executable)} -c 'import time; time.sleep(600)' \"$@\""
    (bin_dir / "etcd").write_text(
        "#!/bin/sh\n"
        f'case "$*" in *version*) exec {shlex.quote(str(real / "etcd"))} "$@";; esac\n'
        f"if [ ! -e {shlex.quote(str(first_start))} ]; then : > {shlex.quote(str(first_start))}; {silent_etcd}; fi\n"
        f'exec {shlex.quote(str(real / "etcd"))} "$@"\n'
    )
    (bin_dir / "etcd").chmod(0o755)
    env = DevEnvironment(state_dir=paths.state_root() / "pytest" / "restart-on-exit", bin_dir=bin_dir)
    env.down(progress=lambda m: None)
    said: list[str] = []
    try:
        env.up(ClusterLayout(foreign=0, nodes_per_cluster=1), progress=said.append)
        assert first_start.exists(), "the first etcd never answered"
        again = [line for line in said if "creating it again" in line]
        assert len(again) == 1, said
        assert "kube-apiserver exited as the cluster was created" in again[0] and "etcd: " in again[0], said
        assert env.existing_clusters() == ["home"]
        assert env.client("home").get(Namespace, "default").metadata is not None
    finally:
        env.down(progress=lambda m: None)
    assert env.processes() == []
