"""NamespaceOffloading admission rules: name, SelectedName, immutable mapping (docs/offloading.md)."""

from __future__ import annotations

from typing import Any

from runtime.webhooks.validation import validate_offloading


def offloading(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "offloading", "namespace": "foo"}, "spec": spec}


def test_the_seeds_default_is_allowed() -> None:
    assert (
        validate_offloading(
            offloading(namespaceMappingStrategy="DefaultName", clusterSelector={"nodeSelectorTerms": []})
        )
        == []
    )


def test_only_one_named_offloading_per_namespace() -> None:
    wrong = {"metadata": {"name": "other", "namespace": "foo"}, "spec": {}}
    assert validate_offloading(wrong) == ["metadata.name must be 'offloading': one NamespaceOffloading per namespace"]


def test_selected_name_requires_a_remote_name() -> None:
    assert validate_offloading(offloading(namespaceMappingStrategy="SelectedName")) == [
        "spec.remoteNamespaceName is required with namespaceMappingStrategy SelectedName"
    ]
    assert validate_offloading(offloading(namespaceMappingStrategy="SelectedName", remoteNamespaceName="bar")) == []


def test_unknown_values_are_named() -> None:
    problems = validate_offloading(offloading(podOffloadingStrategy="Elsewhere"))
    assert len(problems) == 1 and problems[0].startswith("spec.podOffloadingStrategy:")


def test_mapping_strategy_and_remote_name_are_immutable() -> None:
    old = offloading(namespaceMappingStrategy="SelectedName", remoteNamespaceName="bar")
    changed = validate_offloading(offloading(namespaceMappingStrategy="EnforceSameName"), old)
    assert any("spec.namespaceMappingStrategy is immutable (SelectedName)" in p for p in changed)
    assert any("spec.remoteNamespaceName is immutable" in p for p in changed)
    renamed = validate_offloading(offloading(namespaceMappingStrategy="SelectedName", remoteNamespaceName="baz"), old)
    assert renamed == ["spec.remoteNamespaceName is immutable: unoffload the namespace, then offload it again"]


def test_other_fields_may_change() -> None:
    old = offloading(podOffloadingStrategy="LocalAndRemote")
    new = offloading(
        podOffloadingStrategy="Remote",
        clusterSelector={"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}]},
    )
    assert validate_offloading(new, old) == []


def test_twin_names_no_foreign_cluster_accepts_are_refused_with_what_to_do() -> None:
    bad = validate_offloading(offloading(namespaceMappingStrategy="SelectedName", remoteNamespaceName="Not_A_Label"))
    assert bad == ["spec.remoteNamespaceName 'Not_A_Label' must be a DNS-1123 label: lower-case letters, digits "
                   "and '-', at most 63 characters"]  # fmt: skip
    long_namespace = "n" * 60
    problems = validate_offloading(offloading(), namespace=long_namespace, home_cluster_id="home")
    assert len(problems) == 1 and f"'{long_namespace}-home' (DefaultName)" in problems[0]
    assert "SelectedName with a shorter spec.remoteNamespaceName" in problems[0]
    assert validate_offloading(offloading(), namespace="n" * 58, home_cluster_id="home") == []
