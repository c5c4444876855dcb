"""CPU pinning for the benches: each cluster's processes (etcd, kube-apiserver, controller-manager,
scheduler, kwok) on a CPU set of its own, and the runtime with the cluster it works in (the virtual
kubelet and controller-manager with home, the foreign agent with its foreign cluster), so a ratio
compares like with like: the foreign cluster gets the same CPUs whether pods reach it directly or
offloaded.

`sched_setaffinity` per thread (every /proc/PID/task entry): Linux keeps the affinity per thread and
a thread created later inherits its creator's. No cgroup cpuset: these machines mount a hybrid v1
layout whose cpuset hierarchy the benches would have to create and clean up as root.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import SHARED_AGENT, ExternalRuntime


def cpu_plan(cluster_ids: list[str], cpus: list[int] | None = None) -> dict[str, set[int]]:
    """Split the CPUs this process may use evenly between the clusters, in order (2 cores, 2
    clusters: one each). With fewer CPUs than clusters, clusters share them round-robin."""
    available = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    if not cluster_ids or not available:
        return {}
    if len(available) < len(cluster_ids):
        return {c: {available[i % len(available)]} for i, c in enumerate(cluster_ids)}
    share = len(available) // len(cluster_ids)
    return {c: set(available[i * share : (i + 1) * share]) for i, c in enumerate(cluster_ids)}


def cluster_of_processes(env: DevEnvironment, runtime: ExternalRuntime) -> dict[int, str]:
    """PID -> the cluster it belongs to, for the control planes and the runtime."""
    found: dict[int, str] = {}
    for pid in env.processes():
        try:
            binary = Path(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode())
        except OSError:
            continue
        parts = binary.parts  # .../clusters/<cluster id>/bin/<component>
        if len(parts) >= 4 and parts[-4] == "clusters":
            found[pid] = parts[-3]
    for component in runtime.components:
        runtime_pid = runtime.pid(component)
        if runtime_pid is not None:
            agent_of = component.removeprefix("agent-") if component.startswith("agent-") else None
            if component == SHARED_AGENT and len(runtime.foreign_ids) == 1:  # the agents' one process
                agent_of = runtime.foreign_ids[0]
            found[runtime_pid] = agent_of or runtime.home_cluster_id
    return found


def _set_affinity(pid: int, cpus: set[int]) -> int:
    """Every thread of `pid` on `cpus`; how many threads were set."""
    count = 0
    with contextlib.suppress(FileNotFoundError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.sched_setaffinity(int(task.name), cpus)
                count += 1
    return count


def pin(env: DevEnvironment, runtime: ExternalRuntime, plan: dict[str, set[int]]) -> dict[str, int]:
    """Apply `plan` (cluster id -> CPUs); threads pinned per cluster."""
    pinned: dict[str, int] = {}
    for pid, cluster_id in cluster_of_processes(env, runtime).items():
        if cluster_id in plan:
            pinned[cluster_id] = pinned.get(cluster_id, 0) + _set_affinity(pid, plan[cluster_id])
    return pinned


def unpin(env: DevEnvironment, runtime: ExternalRuntime) -> None:
    every_cpu = set(os.sched_getaffinity(0))
    for pid in cluster_of_processes(env, runtime):
        _set_affinity(pid, every_cpu)


def describe(plan: dict[str, set[int]]) -> str:
    return ", ".join(f"{c} on CPU {','.join(map(str, sorted(cpus)))}" for c, cpus in plan.items())


def add_pinning_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pinning", choices=["both", "pinned", "unpinned"], default="both", help="CPU pinning per cluster, alternated"
    )
