"""`down` stops every process of the clusters it started; `up` after `down` starts afresh."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
from pathlib import Path

import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace

from liqo_stack.dev import paths
from liqo_stack.dev.clusters import ApiServerExitedError, ClusterLayout, DevEnvironment
from tests.support.kube import wait_until

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


def an_etcd_silent_once(tmp_path: Path) -> tuple[Path, Path]:
    """A bin folder whose etcd never answers at its next start, then runs as etcd: the API server exits
    for good when its etcd does not answer within ~20 s of its start, as a loaded machine's once did.
    Returns the folder and the file whose removal makes the next start silent again."""
    real = paths.bin_dir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for binary in real.iterdir():
        (bin_dir / binary.name).symlink_to(binary)
    (bin_dir / "etcd").unlink()
    silent_start = tmp_path / "etcd-was-silent"
    # Its arguments name the workdir, so `down` finds the silent one among the environment's processes.
    silent_etcd = f"exec {shlex.quote(sys.executable)} -c 'import signal; signal.pause()' \"$@\""  # until killed
    marker = shlex.quote(str(silent_start))
    (bin_dir / "etcd").write_text(
        "#!/bin/sh\n"
        f'case "$*" in *version*) exec {shlex.quote(str(real / "etcd"))} "$@";; esac\n'
        f"if [ ! -e {marker} ]; then : > {marker}; {silent_etcd}; fi\n"
        f'exec {shlex.quote(str(real / "etcd"))} "$@"\n'
    )
    (bin_dir / "etcd").chmod(0o755)
    return bin_dir, silent_start


def command_lines(pids: list[int]) -> list[str]:
    """What each process runs, for a message: a number alone says nothing once it has gone."""
    found = []
    for pid in pids:
        with contextlib.suppress(OSError):
            found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:300])
    return found


def stop_every_process(env: DevEnvironment) -> None:
    """As a reboot does: the clusters stay (their data, their kwok.yaml), their processes go, reaped too
    (kwokctl takes a zombie for a running component and would not start it again)."""
    killed = env.processes()
    for pid in killed:
        os.kill(pid, signal.SIGKILL)

    def all_reaped() -> bool:
        for pid in killed:  # metrics-server is this process's child: ours to reap
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        return not any(Path(f"/proc/{pid}").exists() for pid in killed)

    wait_until(all_reaped, 30, f"the killed processes {killed} reaped")


def test_a_new_control_plane_whose_api_server_exits_as_it_starts_is_made_again_saying_why(tmp_path: Path) -> None:
    bin_dir, silent_start = an_etcd_silent_once(tmp_path)
    env = DevEnvironment(state_dir=paths.state_root() / "pytest" / "restart-on-exit", bin_dir=bin_dir)
    env.down(progress=lambda m: None)
    said: list[str] = []
    try:
        env.up(ClusterLayout(foreign=0, nodes_per_cluster=1), progress=said.append)
        assert silent_start.exists(), "the silent etcd ran"
        again = [line for line in said if "creating it again" in line]
        assert len(again) == 1, said
        assert "kube-apiserver exited as the cluster was created" in again[0] and "etcd: " in again[0], said
        assert env.existing_clusters() == ["home"]
        assert env.client("home").get(Namespace, "default").metadata is not None
    finally:
        env.down(progress=lambda m: None)
    assert env.processes() == []


def test_a_stopped_control_plane_whose_api_server_exits_as_it_starts_again_says_why_at_once_and_is_kept(
    tmp_path: Path,
) -> None:
    bin_dir, silent_start = an_etcd_silent_once(tmp_path)
    silent_start.touch()  # created with an etcd that answers
    env = DevEnvironment(state_dir=paths.state_root() / "pytest" / "start-again-on-exit", bin_dir=bin_dir)
    env.down(progress=lambda m: None)
    layout = ClusterLayout(foreign=0, nodes_per_cluster=1)
    try:
        env.up(layout, progress=lambda m: None)
        env.client("home").create(ConfigMap(metadata=ObjectMeta(name="kept", namespace="default")))
        stop_every_process(env)
        silent_start.unlink()
        with pytest.raises(ApiServerExitedError, match=r"home: kube-apiserver exited as the cluster started again"):
            env.up(layout, progress=lambda m: None)  # kwokctl would have waited two minutes more
        assert env.existing_clusters() == ["home"], "a cluster that did not start again is not deleted"
        left = command_lines(env.processes())
        assert not left, f"its other components stopped too: the silent etcd would fail the next start; left: {left}"
        env.up(layout, progress=lambda m: None)  # as the error says: `dev up` again
        assert env.client("home").get(ConfigMap, "kept", namespace="default").metadata is not None
    finally:
        env.down(progress=lambda m: None)
    assert env.processes() == []
