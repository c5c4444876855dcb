"""The README's five-minute tour, run as written: its runnable shell blocks, in order, in one shell,
against the test session's clusters with the stack installed and the runtime running (what
`bash scripts/demo.sh` leaves behind for a reader).

The commands find the clusters as they do on a developer's machine: `liqo-stack dev env` reads the
dev state under $LIQO_STACK_STATE, here the session's, and prints KUBECONFIG* and PATH (the pinned
kubectl first); `.venv/bin/` is this interpreter's environment, and PYTHONPATH makes it run this
checkout's code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Namespace

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from runtime.api.resources import NamespaceOffloadingResource
from tests.support.docs import REPO, runnable_blocks
from tests.support.kube import VIRTUAL_NODES, get_or_none, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

NAMESPACE = "tour"  # the README's


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """Where the tour runs: `.venv` is the environment running the tests, as in a bootstrapped checkout."""
    work = tmp_path / "checkout"
    work.mkdir()
    (work / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return work


@pytest.fixture
def tour_namespace(home: Client) -> Iterator[str]:
    yield NAMESPACE
    if get_or_none(home, NamespaceOffloadingResource, "offloading", NAMESPACE) is not None:
        home.delete(NamespaceOffloadingResource, "offloading", namespace=NAMESPACE)
    if get_or_none(home, Namespace, NAMESPACE) is not None:
        home.delete(Namespace, NAMESPACE)


def tour_environment(dev_env: DevEnvironment) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KUBECONFIG")}
    environ["LIQO_STACK_STATE"] = str(dev_env.state_dir)  # `liqo-stack dev env` reads the session's clusters
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), environ.get("PYTHONPATH")]))
    return environ


def test_the_readme_tour(
    dev_env: DevEnvironment, runtime: ExternalRuntime, home: Client, checkout: Path, tour_namespace: str
) -> None:
    # what `bash scripts/demo.sh` waits for before the reader starts: both kubelet APIs listen
    kubelets = [f"kubelet-{cluster_id}" for cluster_id in VIRTUAL_NODES]
    wait_until(lambda: all(runtime.ready(k) for k in kubelets), 60, f"{', '.join(kubelets)} ready")
    blocks = runnable_blocks()
    script = "set -euo pipefail\n" + "\n".join(f"echo '### {block.where}'\n{block.text}" for block in blocks)
    started = time.monotonic()
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=checkout,
        env=tour_environment(dev_env),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    took = time.monotonic() - started
    said = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    print(f"the tour took {took:.1f}s\n{said}")
    assert done.returncode == 0, f"a tour command failed (the last `### README.md:<line>` is its block)\n{said}"
    for block in blocks:
        assert f"### {block.where}" in done.stdout

    sections = dict(part.split("\n", 1) for part in done.stdout.split("### ")[1:])
    said_by = {block.text: sections.get(block.where, "") for block in blocks}

    def output_of(command: str) -> str:
        return next(out for text, out in said_by.items() if command in text)

    assert "liqo-foreign-1" in output_of("kubectl get nodes") and "liqo-foreign-2" in output_of("kubectl get nodes")
    assert "tour-home" in output_of("liqo-stack offload namespace"), "the twin namespace in foreign-1"

    def wide_pod_lines(output: str) -> list[str]:  # `get pods -o wide`: NAME ... IP NODE ...
        return [line for line in output.splitlines() if line.startswith("hello-") and len(line.split()) >= 7]

    offloaded = wide_pod_lines(output_of("create deployment"))
    assert offloaded and all("liqo-foreign-" in line for line in offloaded), "at home, on the virtual nodes"
    assert "hello from a foreign cluster" in output_of("exec deployment/hello"), "kubectl exec answered"
    home_again = [line for line in wide_pod_lines(output_of("liqo-stack unoffload")) if "Running" in line]
    assert home_again and not any("liqo-" in line for line in home_again), "unoffloaded, the pods run at home"
