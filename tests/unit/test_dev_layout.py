"""Pure parts of the dev environment: names, node manifests, shell exports."""

from __future__ import annotations

from pathlib import Path

import pytest

from liqo_stack.dev.clusters import (
    KWOK_NODE_ANNOTATION,
    ClusterLayout,
    DevEnvironment,
    DevEnvironmentError,
    NodeShape,
    env_name,
    fake_node_manifest,
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
