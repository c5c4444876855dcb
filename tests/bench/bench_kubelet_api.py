"""Kubelet API benchmark: `kubectl logs` and `kubectl exec -- true` of an offloaded pod through
the virtual node vs the same commands directly against the foreign cluster, in one run.

    .venv/bin/python -m tests.bench.bench_kubelet_api [--samples 10]

Starts its own home and foreign cluster (state under $LIQO_STACK_STATE/bench-kubelet-api),
installs the stack, runs the runtime as local processes (external mode), offloads namespace
`bench` and creates one pod there; then alternates each command through the home API server
(home -> virtual kubelet -> foreign API server -> kwok) and directly (foreign API server -> kwok),
and prints the medians, the added latency and the virtual kubelet's RSS. Each sample is a whole
kubectl run (process start, kubeconfig, TLS), as a user sees it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

from lightkube.resources.core_v1 import Pod

from liqo_stack.dev import paths
from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from tests.bench.bench_offloading import running_stack
from tests.support.kube import free_port, wait_until

REPO = Path(__file__).resolve().parents[2]
HOME, FOREIGN = "home", "foreign-1"
NAMESPACE, POD = "bench", "shell"
TWIN = f"{NAMESPACE}-{HOME}"


def shell_pod(env: DevEnvironment) -> None:
    """One pod to log and exec into, Running at home."""
    home = env.client(HOME)
    body = {"metadata": {"name": POD, "namespace": NAMESPACE}, "spec": {"containers": [{"name": "main", "image": "x"}]}}
    home.create(Pod.from_dict(body))  # type: ignore[call-overload]

    def running() -> bool:
        status = home.get(Pod, POD, namespace=NAMESPACE).status
        return status is not None and status.phase == "Running"

    wait_until(running, 60, "the pod Running at home")


def timed(kubeconfig: Path, *args: str) -> float:
    environ = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    started = time.perf_counter()
    done = subprocess.run([str(paths.bin_dir() / "kubectl"), *args], capture_output=True, env=environ)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {done.stderr.decode()}")
    return elapsed


def measure(env: DevEnvironment, runtime: ExternalRuntime, samples: int) -> None:
    commands = {"logs": ["logs", POD], "exec -- true": ["exec", POD, "--", "true"]}
    ways = {"virtual node": (env.kubeconfig(HOME), NAMESPACE), "direct": (env.kubeconfig(FOREIGN), TWIN)}
    for kubeconfig, namespace in ways.values():  # warm-up: caches, connections, authorization
        for args in commands.values():
            timed(kubeconfig, "-n", namespace, *args)
    results: dict[tuple[str, str], list[float]] = {}
    for _ in range(samples):  # alternated, so load changes hit both ways alike
        for command, args in commands.items():
            for way, (kubeconfig, namespace) in ways.items():
                results.setdefault((command, way), []).append(timed(kubeconfig, "-n", namespace, *args))
    print(f"\nkubectl through the virtual node vs directly against the foreign cluster ({samples} samples each)")
    for command in commands:
        through = statistics.median(results[(command, "virtual node")])
        direct = statistics.median(results[(command, "direct")])
        print(
            f"  kubectl {command:13} virtual node {through * 1000:6.0f} ms, direct {direct * 1000:6.0f} ms, "
            f"added {(through - direct) * 1000:5.0f} ms (medians; "
            f"virtual node min/max {min(results[(command, 'virtual node')]) * 1000:.0f}/"
            f"{max(results[(command, 'virtual node')]) * 1000:.0f} ms)"
        )
    pid = runtime.pid(f"kubelet-{FOREIGN}")
    if pid is not None:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                print(f"  virtual kubelet RSS {int(line.split()[1]) / 1024:.1f} MB (kubelet API on)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=10, help="runs per command and way, alternated")
    parser.add_argument("--keep", action="store_true", help="leave the clusters running afterwards")
    args = parser.parse_args()
    layout = ClusterLayout(foreign=1, nodes_per_cluster=1)
    with running_stack("bench-kubelet-api", args.keep, layout, kubelet_ports={FOREIGN: free_port()}) as stack:
        env, runtime = stack
        shell_pod(env)
        measure(env, runtime, args.samples)


if __name__ == "__main__":
    main()
