"""`liqo-stack preview` on the dev clusters with the stack installed and the runtime running: what a
change will do to running workloads, from the plan functions and the live clusters, with exit code 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod, Service
from pulumi import automation as auto

from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from tests.support.cli import run_preview
from tests.support.kube import VIRTUAL_NODES, deploy_running, node_ready, wait_phase, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

NAMESPACE = "preview-apps"


@pytest.fixture(scope="module")
def on_foreign_2(installed: auto.Stack, runtime: ExternalRuntime, home: Client) -> Iterator[dict[str, Any]]:
    """preview-apps offloaded (Remote) to the us-west cluster only, with 4 pods running there."""
    config = PulumiEnvironment.liqo_config(installed)
    original = json.loads(json.dumps(config))
    config["namespaces"] = [
        {"name": NAMESPACE, "podOffloadingStrategy": "Remote", "clusterSelector": ["region=us-west"]}
    ]
    PulumiEnvironment.set_liqo_config(installed, config)
    installed.up(on_output=print)
    wait_until(lambda: all(node_ready(home, n) for n in VIRTUAL_NODES.values()), 60, "virtual nodes Ready")
    wait_phase(home, NAMESPACE, "Ready")
    deploy_running(home, NAMESPACE, "web", 4)
    try:
        yield config
    finally:
        PulumiEnvironment.set_liqo_config(installed, original)  # the conftest puts the stack back


def test_selector_change_that_drops_a_cluster_reports_its_twin_and_pods(
    installed: auto.Stack, on_foreign_2: dict[str, Any], pulumi_env: PulumiEnvironment
) -> None:
    config = json.loads(json.dumps(on_foreign_2))
    config["namespaces"][0]["clusterSelector"] = ["region=europe"]
    PulumiEnvironment.set_liqo_config(installed, config)
    code, output = run_preview(installed, pulumi_env, "json")
    assert code == 2
    report = json.loads(output)["effects"]
    assert report["twins_deleted"] == [
        {
            "namespace": NAMESPACE,
            "cluster": "foreign-2",
            "twin": f"{NAMESPACE}-home",
            "pods": 4,
            "objects": report["twins_deleted"][0]["objects"],
            "dataAtRisk": True,
            "why": "cluster no longer selected",
        }
    ]
    assert sorted(p["node"] for p in report["pods_losing_node"]) == ["liqo-foreign-2"] * 4
    assert report["twins_created"] == [{"namespace": NAMESPACE, "cluster": "foreign-1", "twin": f"{NAMESPACE}-home"}]
    assert report["naming_conflicts"] == []

    code, markdown = run_preview(installed, pulumi_env, "markdown")
    assert code == 2
    assert (
        f"- DATA AT RISK: foreign-2: {NAMESPACE}-home (namespace {NAMESPACE}, cluster no longer selected): 4 pods"
        in markdown
    )


def test_sharing_cut_and_a_reflection_change_report_what_the_running_pods_lose(
    installed: auto.Stack, on_foreign_2: dict[str, Any], pulumi_env: PulumiEnvironment, home: Client
) -> None:
    """One change, two effects (one preview: each costs a Pulumi run): the pods no longer fitting a
    shrunk node, and, per namespace, what new reflection settings do to the pods running there."""
    service = {
        "metadata": {"name": "web", "namespace": NAMESPACE},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
    }
    home.create(Service.from_dict(service))  # type: ignore[call-overload]
    try:
        config = json.loads(json.dumps(on_foreign_2))
        config["foreignClusters"][1]["sharingPercentage"] = 1  # 2 nodes x 16 cpu x 1 % = 320m < 4 x 100m
        config["reflection"] = {"skipLabels": ["app"], "resources": {"service": {"type": "AllowList"}}}
        PulumiEnvironment.set_liqo_config(installed, config)
        code, output = run_preview(installed, pulumi_env, "text")
    finally:
        home.delete(Service, "web", namespace=NAMESPACE)
    assert code == 2
    assert "Virtual nodes shrinking below their pods' requests:" in output
    assert "liqo-foreign-2 at 1%: cpu requested 0.4 > new capacity 320m" in output
    shrunk = output.split("pods that no longer fit: ")[1].splitlines()[0].split(", ")
    assert len(shrunk) == 1 and shrunk[0].startswith(f"{NAMESPACE}/web-")
    assert "Twin namespaces to be deleted" not in output

    running = ", ".join(
        sorted(str(cast(Any, p).metadata.name) for p in home.list(Pod, namespace=NAMESPACE, labels={"app": "web"}))
    )
    assert "Running pods under new reflection settings:" in output
    assert (
        f"  {NAMESPACE} in foreign-2 (4 pods running): remote labels/annotations change on 4 pods ({running}); "
        f"service web copy deleted (policy AllowList and no liqo.io/allow-reflection annotation), used by {running}"
    ) in output.splitlines()


def test_no_change_has_no_effect(
    installed: auto.Stack, on_foreign_2: dict[str, Any], pulumi_env: PulumiEnvironment
) -> None:
    PulumiEnvironment.set_liqo_config(installed, on_foreign_2)
    code, output = run_preview(installed, pulumi_env, "text")
    assert "no effect on running workloads" in output
    assert code == 0
