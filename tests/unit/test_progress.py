"""Long steps of the demo and `dev up` are never silent: heartbeats and pod summaries."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import pytest
from lightkube.resources.core_v1 import Pod

from liqo_stack.dev.clusters import ApiServerExitedError, DevEnvironment, DevEnvironmentError
from liqo_stack.dev.progress import Heartbeat
from liqo_stack.dev.workloads import pods_summary


def test_a_silent_step_says_still_with_the_elapsed_time() -> None:
    lines: list[str] = []
    with Heartbeat(lines.append, "home: creating the control plane", interval=0.1):
        deadline = time.monotonic() + 10
        while len(lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(lines) >= 2
    assert all(line.startswith("still home: creating the control plane (") for line in lines)
    assert lines[0] == "still home: creating the control plane (0s)"


def test_output_of_the_step_itself_holds_the_heartbeat_back() -> None:
    lines: list[str] = []
    with Heartbeat(lines.append, "running pulumi up", interval=1.0) as beat:
        for _ in range(8):
            beat.touch()
            time.sleep(0.05)
    assert lines == []


def test_nothing_after_the_step_ends() -> None:
    lines: list[str] = []
    with Heartbeat(lines.append, "x", interval=0.05):
        pass
    time.sleep(0.15)
    assert lines == []


def pod(phase: str | None, node: str | None = "liqo-foreign-1") -> Pod:
    raw: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {"containers": [], "nodeName": node}}
    if phase:
        raw["status"] = {"phase": phase}
    return cast(Pod, Pod.from_dict(raw))


def test_pod_summary_counts_running_of_wanted_and_says_why_others_wait() -> None:
    pods = [pod("Running"), pod("Running"), pod("Pending", node=None), pod("Pending"), pod(None)]
    assert pods_summary(pods, 4) == "2/4 Running (1 Pending, 1 Unknown, 1 unscheduled)"
    assert pods_summary([], 4) == "0/4 Running"


def test_a_hung_kwokctl_ends_with_where_the_logs_are(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kwokctl").write_text("#!/bin/sh\nsleep 5\n")
    (bin_dir / "kwokctl").chmod(0o755)
    env = DevEnvironment(state_dir=tmp_path / "state", bin_dir=bin_dir)
    with pytest.raises(DevEnvironmentError) as caught:
        env._kwokctl("create", "cluster", "--name", "home", timeout=0.5)
    message = str(caught.value)
    assert message.startswith("`kwokctl create cluster --name ...` did not finish in 500ms.")
    assert f"{tmp_path / 'state' / 'kwok'}/clusters/*/logs" in message and "liqo-stack dev down" in message


def a_kwokctl(tmp_path: Path, script: str) -> DevEnvironment:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kwokctl").write_text('#!/bin/sh\nhome="$KWOK_WORKDIR/clusters/home"\n' + script)
    (bin_dir / "kwokctl").chmod(0o755)
    return DevEnvironment(state_dir=tmp_path / "state", bin_dir=bin_dir)


def test_kwokctl_is_stopped_once_the_api_server_it_started_has_exited_with_its_last_words(tmp_path: Path) -> None:
    env = a_kwokctl(
        tmp_path,
        'mkdir -p "$home/pids" "$home/logs"\n'
        'true & echo $! > "$home/pids/kube-apiserver.pid"; wait\n'
        'echo "E1130 run.go:72] error creating storage factory" > "$home/logs/kube-apiserver.log"\n'
        "exec sleep 60\n",
    )
    with pytest.raises(ApiServerExitedError) as caught:  # not the timeout's error: kwokctl would wait on
        env._kwokctl("create", "cluster", timeout=30, stop_early=env._api_server_exit("home", "was created"))
    message = str(caught.value)
    assert message.startswith("home: kube-apiserver exited as the cluster was created (etcd: (no log); ")
    assert "kube-apiserver: E1130 run.go:72] error creating storage factory" in message
    assert "`liqo-stack dev up` tries again" in message


def test_a_stopped_clusters_api_server_pid_is_not_taken_for_the_one_kwokctl_starts(tmp_path: Path) -> None:
    env = a_kwokctl(tmp_path, "exec sleep 60\n")  # it never gets to start the API server
    pids = tmp_path / "state" / "kwok" / "clusters" / "home" / "pids"
    pids.mkdir(parents=True)
    (pids / "kube-apiserver.pid").write_text("999999")  # left by the cluster before it stopped: no such process
    with pytest.raises(DevEnvironmentError, match="did not finish in 2s") as caught:
        env._kwokctl("start", "cluster", timeout=2, stop_early=env._api_server_exit("home", "started again"))
    assert not isinstance(caught.value, ApiServerExitedError)
