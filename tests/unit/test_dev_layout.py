"""Pure parts of the dev environment: names, node manifests, shell exports."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from liqo_stack.dev.clusters import (
    KWOK_NODE_ANNOTATION,
    KWOK_POD_STATUS_PARALLELISM,
    KWOKCTL_PORT_OPTIONS,
    ClusterLayout,
    DevEnvironment,
    DevEnvironmentError,
    NodeShape,
    _age,
    env_name,
    fake_node_manifest,
    kwokctl_config,
    node_pod_cidr,
)


@pytest.mark.parametrize(
    ("cluster_id", "expected"),
    [("home", "KUBECONFIG_HOME"), ("foreign-1", "KUBECONFIG_FOREIGN_1"), ("foreign-12", "KUBECONFIG_FOREIGN_12")],
)
def test_env_name_upper_cases_and_replaces_dashes(cluster_id: str, expected: str) -> None:
    assert env_name(cluster_id) == expected


def test_layout_names_home_first_then_foreign_in_order() -> None:
    assert ClusterLayout(foreign=3).cluster_ids() == ["home", "foreign-1", "foreign-2", "foreign-3"]
    assert ClusterLayout(foreign=0).cluster_ids() == ["home"]


def test_fake_node_carries_kwok_marker_and_capacity() -> None:
    node = fake_node_manifest("foreign-1", 0, NodeShape(cpu="8", memory="32Gi", pods=50, gpus=2))
    meta = node["metadata"]
    assert isinstance(meta, dict)
    assert meta["name"] == "foreign-1-worker-0"
    assert meta["annotations"][KWOK_NODE_ANNOTATION] == "fake"
    status = node["status"]
    assert isinstance(status, dict)
    assert status["capacity"] == {
        "cpu": "8",
        "memory": "32Gi",
        "pods": "50",
        "ephemeral-storage": "200Gi",
        "nvidia.com/gpu": "2",
    }
    assert status["allocatable"] == status["capacity"]


def test_fake_node_without_gpus_has_no_gpu_resource() -> None:
    status = fake_node_manifest("home", 1, NodeShape())["status"]
    assert isinstance(status, dict)
    assert "nvidia.com/gpu" not in status["capacity"]


def test_env_without_clusters_says_how_to_start_them(tmp_path: Path) -> None:
    env = DevEnvironment(state_dir=tmp_path / "state", bin_dir=tmp_path / "bin")
    with pytest.raises(DevEnvironmentError, match=r"liqo-stack dev up"):
        env.env_exports()


def test_missing_binaries_name_the_build_command(tmp_path: Path) -> None:
    env = DevEnvironment(state_dir=tmp_path / "state", bin_dir=tmp_path / "bin")
    with pytest.raises(DevEnvironmentError, match=r"tools/build\.py") as err:
        env.check_binaries()
    assert "kube-apiserver" in str(err.value)


def test_each_dev_cluster_gets_its_own_pod_and_service_range() -> None:
    layout = ClusterLayout(foreign=3)
    pods = [layout.pod_cidr(c) for c in layout.cluster_ids()]
    services = [layout.service_cidr(c) for c in layout.cluster_ids()]
    assert pods == ["10.100.0.0/16", "10.101.0.0/16", "10.102.0.0/16", "10.103.0.0/16"]
    assert services == ["10.200.0.0/16", "10.201.0.0/16", "10.202.0.0/16", "10.203.0.0/16"]
    chosen = ClusterLayout(foreign=2, pod_cidrs={"foreign-2": "10.101.0.0/16"}, service_cidrs={"home": "10.9.0.0/16"})
    assert chosen.pod_cidr("foreign-2") == chosen.pod_cidr("foreign-1") == "10.101.0.0/16"
    assert chosen.service_cidr("home") == "10.9.0.0/16"


def test_fake_nodes_hand_out_disjoint_blocks_of_their_cluster_range() -> None:
    assert node_pod_cidr("10.101.0.0/16", 0, 110) == "10.101.0.0/24"
    assert node_pod_cidr("10.101.0.0/16", 1, 110) == "10.101.1.0/24"
    assert node_pod_cidr("10.101.0.0/16", 1, 1000) == "10.101.4.0/22"  # room for 1,000 pods
    with pytest.raises(DevEnvironmentError, match="no block"):
        node_pod_cidr("10.101.0.0/23", 2, 110)
    node = fake_node_manifest("foreign-1", 1, NodeShape(), "10.101.1.0/24")
    assert node["spec"] == {"podCIDR": "10.101.1.0/24", "podCIDRs": ["10.101.1.0/24"]}


def test_kwokctl_config_sets_the_cluster_ranges_and_keeps_kwok_off_virtual_nodes() -> None:
    config, kwok = kwokctl_config("10.101.0.0/16", "10.201.0.0/16")
    patches = {p["name"]: {a["key"]: a["value"] for a in p["extraArgs"]} for p in config["componentsPatches"]}  # type: ignore[attr-defined]
    assert patches["kube-apiserver"]["service-cluster-ip-range"] == "10.201.0.0/16"
    assert patches["kwok-controller"]["cidr"] == "10.101.0.0/16"
    assert patches["kwok-controller"]["manage-all-nodes"] == "false"
    # kwok's usage kinds as objects (kwokctl drops them from --config without its own metrics-server)
    assert config["options"] == {"bindAddress": "127.0.0.1", "enableCRDs": ["ClusterResourceUsage", "Metric"]}
    # the components' ports, when handed out, are kwokctl's options: it picks none itself
    handed = dict(zip(KWOKCTL_PORT_OPTIONS, range(32000, 32006), strict=True))
    (with_ports, _) = kwokctl_config("10.101.0.0/16", "10.201.0.0/16", component_ports=handed)
    assert with_ports["options"] == {**config["options"], **handed}
    # kwok's own options: more pod status patches in flight, and its defaults kept (it defaults none
    # once given a KwokConfiguration): the debugging handlers serve `kubectl logs` and `exec`
    assert kwok["kind"] == "KwokConfiguration"
    options = kwok["options"]
    assert options["podPlayStageParallelism"] == KWOK_POD_STATUS_PARALLELISM > 4  # type: ignore[index]
    assert options["enableDebuggingHandlers"] is True and options["nodeLeaseParallelism"] == 4  # type: ignore[index]


def test_dev_cli_refuses_a_bad_range_naming_the_flag() -> None:
    from click.testing import CliRunner

    from liqo_stack.operating.cli import main

    result = CliRunner().invoke(main, ["dev", "up", "--pod-cidr", "foreign-1=10.0.0.1/16"])
    assert result.exit_code == 2
    assert "--pod-cidr" in result.output and "e.g. foreign-1=10.101.0.0/16" in result.output
    result = CliRunner().invoke(main, ["dev", "up", "--foreign", "1", "--service-cidr", "foreign-7=10.9.0.0/16"])
    assert result.exit_code == 2 and "foreign-7" in result.output


def test_a_process_age_counts_from_its_start() -> None:
    """How `up` tells a controller-manager still within its API server check (younger than
    CONTROLLER_MANAGER_GIVES_UP_AFTER)."""
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert 0 <= _age(child.pid) < 5
        # this process started before its child, by at least the time the import of pytest took
        assert _age(os.getpid()) > _age(child.pid)
    finally:
        child.kill()
        child.wait()
    assert _age(child.pid) == 0.0, "a process that is gone has no age"
