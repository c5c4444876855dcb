"""The `liqo:` stack config: every bad setting is reported with its config path and what is allowed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from liqo_stack.declaring.config import (
    REFLECTED_RESOURCES,
    ClusterAccess,
    ConfigError,
    RuntimeMode,
    from_pulumi_config,
    parse,
)
from runtime.api import (
    NamespaceMappingStrategy,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodOffloadingStrategy,
    ReflectionPolicy,
)

HOME: dict[str, Any] = {"clusterId": "home", "kubeconfig": "apiVersion: v1\nkind: Config\n"}


def foreign(cluster_id: str = "foreign-1", **settings: Any) -> dict[str, Any]:
    return {"clusterId": cluster_id, "kubeconfig": "apiVersion: v1\nkind: Config\n", **settings}


def config(**settings: Any) -> dict[str, Any]:
    """A valid minimal config (one home, one foreign cluster), with `settings` replacing top-level keys."""
    return {"home": HOME, "foreignClusters": [foreign()], **settings}


def problems(err: ConfigError) -> list[str]:
    """The problem lines of a ConfigError (its first line is the heading)."""
    heading, *lines = str(err).splitlines()
    assert heading == "invalid stack config:"
    return [line.strip() for line in lines]


def problem_at(err: ConfigError, path: str) -> str:
    """The one problem reported at exactly `path`."""
    found = [line for line in problems(err) if line.startswith(f"{path}: ")]
    assert len(found) == 1, f"expected one problem at {path!r}, got: {problems(err)}"
    return found[0]


# -- bad configs ------------------------------------------------------------------------------

BAD_CONFIGS = [
    pytest.param(
        config(foreignCluster=[foreign()]),
        "liqo:foreignCluster",
        "is not a known setting (check its spelling)",
        id="unknown-top-level-key-typo",
    ),
    pytest.param(
        config(home={**HOME, "kubeConfig": "x"}),
        "liqo:home.kubeConfig",
        "is not a known setting (check its spelling)",
        id="unknown-key-in-home",
    ),
    pytest.param(
        config(foreignClusters=[foreign(labelz={"a": "b"})]),
        "liqo:foreignClusters[0].labelz",
        "is not a known setting (check its spelling)",
        id="unknown-key-in-foreign-cluster",
    ),
    pytest.param(
        config(runtime={"mode": "cluster", "replica": 2}),
        "liqo:runtime.replica",
        "is not a known setting",
        id="unknown-key-in-runtime",
    ),
    pytest.param({"foreignClusters": [foreign()]}, "liqo:home", "is required", id="missing-home"),
    pytest.param(config(foreignClusters=[]), "liqo:foreignClusters", "at least 1 item", id="empty-foreign-clusters"),
    pytest.param(
        config(home={**HOME, "clusterId": "Home_1"}),
        "liqo:home.clusterId",
        "must be a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters",
        id="home-cluster-id-not-dns-label",
    ),
    pytest.param(
        config(home={**HOME, "clusterId": "a" * 64}),
        "liqo:home.clusterId",
        "at most 63 characters",
        id="home-cluster-id-too-long",
    ),
    pytest.param(
        config(foreignClusters=[foreign("-foreign")]),
        "liqo:foreignClusters[0].clusterId",
        "must be a DNS-1123 label",
        id="foreign-cluster-id-leading-dash",
    ),
    pytest.param(
        config(home={**HOME, "kubeconfigPath": "/tmp/home.yaml"}),
        "liqo:home",
        "set one of kubeconfig (content, as a secret) or kubeconfigPath (a file), not both",
        id="both-kubeconfig-and-path",
    ),
    # neither is valid config: a program may pass its own provider (test_components checks the program names it)
    pytest.param(
        config(sharingPercentage=0),
        "liqo:sharingPercentage",
        "greater than or equal to 1 (got 0)",
        id="global-sharing-0",
    ),
    pytest.param(
        config(sharingPercentage=101),
        "liqo:sharingPercentage",
        "less than or equal to 100 (got 101)",
        id="global-sharing-101",
    ),
    pytest.param(
        config(foreignClusters=[foreign(sharingPercentage=0)]),
        "liqo:foreignClusters[0].sharingPercentage",
        "greater than or equal to 1 (got 0)",
        id="cluster-sharing-0",
    ),
    pytest.param(
        config(foreignClusters=[foreign(), foreign("foreign-2", sharingPercentage=101)]),
        "liqo:foreignClusters[1].sharingPercentage",
        "less than or equal to 100 (got 101)",
        id="cluster-sharing-101",
    ),
    pytest.param(
        config(sharingPercentage=50.5),
        "liqo:sharingPercentage",
        "valid integer",
        id="global-sharing-fractional",
    ),
    pytest.param(
        config(foreignClusters=[foreign(labels={"bad key!": "x"})]),
        "liqo:foreignClusters[0].labels",
        "label key 'bad key!' is not a valid Kubernetes label key",
        id="bad-label-key",
    ),
    pytest.param(
        config(foreignClusters=[foreign(labels={"Bad_Prefix/region": "x"})]),
        "liqo:foreignClusters[0].labels",
        "label key 'Bad_Prefix/region' is not a valid Kubernetes label key",
        id="bad-label-key-prefix",
    ),
    pytest.param(
        config(foreignClusters=[foreign(labels={"region": "-europe"})]),
        "liqo:foreignClusters[0].labels",
        "label value '-europe' (of 'region') is not a valid Kubernetes label value",
        id="bad-label-value",
    ),
    pytest.param(
        config(foreignClusters=[foreign(labels={"region": "e" * 64})]),
        "liqo:foreignClusters[0].labels",
        "is not a valid Kubernetes label value",
        id="label-value-too-long",
    ),
    pytest.param(
        config(foreignClusters=[foreign(taints=[{"key": "gpu", "effect": "NoRun"}])]),
        "liqo:foreignClusters[0].taints[0].effect",
        "'NoSchedule', 'PreferNoSchedule' or 'NoExecute' (got \"NoRun\")",
        id="bad-taint-effect",
    ),
    pytest.param(
        config(foreignClusters=[foreign(taints=[{"effect": "NoSchedule"}])]),
        "liqo:foreignClusters[0].taints[0].key",
        "is required",
        id="taint-without-key",
    ),
    pytest.param(
        config(foreignClusters=[foreign(fixedResources={"cpu": "4", "memory": "lots"})]),
        "liqo:foreignClusters[0].fixedResources",
        "memory: 'lots' is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)",
        id="fixed-resources-not-a-quantity",
    ),
    pytest.param(
        config(namespaces=[{"name": "demo", "namespaceMappingStrategy": "SameName"}]),
        "liqo:namespaces[0].namespaceMappingStrategy",
        "'DefaultName', 'EnforceSameName' or 'SelectedName' (got \"SameName\")",
        id="bad-mapping-strategy",
    ),
    pytest.param(
        config(namespaces=[{"name": "demo", "podOffloadingStrategy": "Anywhere"}]),
        "liqo:namespaces[0].podOffloadingStrategy",
        "'LocalAndRemote', 'Local' or 'Remote' (got \"Anywhere\")",
        id="bad-pod-offloading-strategy",
    ),
    pytest.param(
        config(namespaces=[{"name": "demo"}, {"name": "SHOP"}]),
        "liqo:namespaces[1].name",
        "must be a DNS-1123 label",
        id="namespace-name-not-dns-label",
    ),
    pytest.param(
        config(namespaces=[{"name": "demo", "namespaceMappingStrategy": "SelectedName"}]),
        "liqo:namespaces[0]",
        "namespaceMappingStrategy SelectedName requires remoteNamespaceName",
        id="selected-name-without-remote-name",
    ),
    pytest.param(
        config(namespaces=[{"name": "demo", "remoteNamespaceName": "other"}]),
        "liqo:namespaces[0]",
        "remoteNamespaceName is only used with namespaceMappingStrategy SelectedName (this one is DefaultName)",
        id="remote-name-with-default-name",
    ),
    pytest.param(
        config(
            namespaces=[
                {"name": "demo", "namespaceMappingStrategy": "SelectedName", "remoteNamespaceName": "Not_A_Label"}
            ]
        ),
        "liqo:namespaces[0].remoteNamespaceName",
        "must be a DNS-1123 label",
        id="remote-name-not-dns-label",
    ),
    pytest.param(
        config(namespaces=[{"name": "demo", "clusterSelector": ["region in ()"]}]),
        "liqo:namespaces[0].clusterSelector",
        "'region in ()': a set needs at least one value",
        id="selector-empty-set",
    ),
    pytest.param(
        config(namespaces=[{"name": "demo", "clusterSelector": ["region=europe", "a b c"]}]),
        "liqo:namespaces[0].clusterSelector",
        "'a b c' is not a label requirement: use key, !key, key=value, key!=value, key in (a,b) or key notin (a,b)",
        id="selector-not-a-requirement",
    ),
    pytest.param(
        config(namespaces=[{"name": "demo", "clusterSelector": ["region in (europe"]}]),
        "liqo:namespaces[0].clusterSelector",
        "unbalanced '('",
        id="selector-unbalanced-parenthesis",
    ),
    pytest.param(
        config(namespaces=[{"name": "demo", "clusterSelector": [""]}]),
        "liqo:namespaces[0].clusterSelector",
        "an empty selector string: leave the selector out to select every cluster",
        id="selector-empty-string",
    ),
    pytest.param(
        config(
            namespaces=[
                {
                    "name": "demo",
                    "clusterSelector": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Is"}]}]},
                }
            ]
        ),
        "liqo:namespaces[0].clusterSelector.nodeSelectorTerms[0].matchExpressions[0].operator",
        "'In', 'NotIn', 'Exists', 'DoesNotExist', 'Gt' or 'Lt'",
        id="node-selector-bad-operator",
    ),
    pytest.param(
        config(reflection={"resources": {"pod": {"workers": 1}}}),
        "liqo:reflection.resources.pod",
        "'configmap', 'secret', 'service', 'endpointslice', 'ingress' or 'event' (got \"pod\")",
        id="reflection-of-pods-not-configurable",
    ),
    pytest.param(
        config(reflection={"resources": {"secret": {"workers": -1}}}),
        "liqo:reflection.resources.secret.workers",
        "greater than or equal to 0 (got -1)",
        id="negative-reflection-workers",
    ),
    pytest.param(
        config(reflection={"resources": {"configmap": {"workers": 65}}}),
        "liqo:reflection.resources.configmap.workers",
        "less than or equal to 64 (got 65)",
        id="too-many-reflection-workers",
    ),
    pytest.param(
        config(reflection={"resources": {"service": {"type": "BlockList"}}}),
        "liqo:reflection.resources.service.type",
        "'DenyList' or 'AllowList' (got \"BlockList\")",
        id="bad-reflection-policy",
    ),
    pytest.param(
        config(reflection={"customResources": [{"group": "*", "version": "v1", "resource": "widgets"}]}),
        "liqo:reflection.customResources[0].group",
        "a wildcard is not a group",
        id="custom-resource-wildcard-group",
    ),
    pytest.param(
        config(reflection={"customResources": [{"group": "cert-manager.io", "version": "v1", "resource": "*"}]}),
        "liqo:reflection.customResources[0].resource",
        "a wildcard is not a resource: name each resource type to reflect",
        id="custom-resource-wildcard-resource",
    ),
    pytest.param(
        config(reflection={"customResources": [{"group": "cert-manager.io", "version": "1", "resource": "x"}]}),
        "liqo:reflection.customResources[0].version",
        'must be a Kubernetes API version such as v1, v1beta1 or v2alpha3 (got "1")',
        id="custom-resource-bad-version",
    ),
    pytest.param(
        config(reflection={"customResources": [{"group": "apps", "version": "v1", "resource": "deployments"}]}),
        "liqo:reflection.customResources[0].group",
        "must be a custom resource's API group",
        id="custom-resource-built-in-group",
    ),
    pytest.param(
        config(
            reflection={
                "customResources": [{"group": "offloading.liqo.io", "version": "v1beta1", "resource": "shadowpods"}]
            }
        ),
        "liqo:reflection.customResources[0].group",
        "offloading.liqo.io is not a custom resource's group",
        id="custom-resource-liqo-group",
    ),
    pytest.param(
        config(reflection={"customResources": [{"group": "a.io", "version": "v1", "resource": "Widgets"}]}),
        "liqo:reflection.customResources[0].resource",
        "must be the resource's plural as in its CRD's name, lower case",
        id="custom-resource-not-a-plural",
    ),
    pytest.param(
        config(reflection={"customResources": [{"group": "a.io", "version": "v1", "resource": "w", "workers": 65}]}),
        "liqo:reflection.customResources[0].workers",
        "less than or equal to 64 (got 65)",
        id="custom-resource-too-many-workers",
    ),
    pytest.param(
        config(reflection={"customResources": [{"group": "a.io", "version": "v1", "resource": "w", "status": True}]}),
        "liqo:reflection.customResources[0].status",
        "is not a known setting",
        id="custom-resource-unknown-setting",
    ),
    pytest.param(
        config(
            reflection={
                "customResources": [
                    {"group": "a.io", "version": "v1", "resource": "w"},
                    {"group": "a.io", "version": "v2", "resource": "w"},
                ]
            }
        ),
        "liqo:reflection.customResources",
        "each custom resource is reflected in one version; repeated: ['w.a.io']",
        id="custom-resource-twice",
    ),
    pytest.param(
        config(runtime={"mode": "inside"}),
        "liqo:runtime.mode",
        "'cluster' or 'external' (got \"inside\")",
        id="bad-runtime-mode",
    ),
    pytest.param(
        config(runtime={"image": ""}),
        "liqo:runtime.image",
        "is not an image reference",
        id="empty-runtime-image",
    ),
    pytest.param(
        config(runtime={"image": "registry.example.com/Liqo Stack:0.1"}),
        "liqo:runtime.image",
        "is not an image reference, e.g. registry.example.com/liqo-stack:0.1.0",
        id="bad-runtime-image",
    ),
    pytest.param(
        config(runtime={"imageDigest": "sha256:abc"}),
        "liqo:runtime.imageDigest",
        "is not an image digest: sha256:<64 lowercase hex digits>",
        id="short-image-digest",
    ),
    pytest.param(
        config(runtime={"image": f"r.example/liqo-stack@sha256:{'a' * 64}", "imageDigest": f"sha256:{'b' * 64}"}),
        "liqo:runtime",
        "differs from the digest in image",
        id="two-different-digests",
    ),
    pytest.param(
        config(virtualKubelet={"failureThreshold": 0}),
        "liqo:virtualKubelet.failureThreshold",
        "greater than or equal to 1 (got 0)",
        id="virtual-kubelet-failure-threshold-0",
    ),
    pytest.param(
        config(virtualKubelet={"healthCheckIntervalSeconds": 3601}),
        "liqo:virtualKubelet.healthCheckIntervalSeconds",
        "is longer than the maximum, 1h (allowed: 1s to 1h) (got 3601)",
        id="virtual-kubelet-interval-too-long",
    ),
    pytest.param(
        config(virtualKubelet={"healthCheckIntervalSeconds": "2h"}),
        "liqo:virtualKubelet.healthCheckIntervalSeconds",
        'is longer than the maximum, 1h (allowed: 1s to 1h) (got "2h")',
        id="virtual-kubelet-interval-duration-too-long",
    ),
    pytest.param(
        config(virtualKubelet={"healthCheckIntervalSeconds": "10x"}),
        "liqo:virtualKubelet.healthCheckIntervalSeconds",
        "is not a duration: unknown unit 'x', use h, m, s, ms, us or ns (e.g. 60s, 2m, 1h30m, 500ms, "
        'or a bare number of seconds) (got "10x")',
        id="virtual-kubelet-interval-bad-unit",
    ),
    pytest.param(
        config(virtualKubelet={"healthCheckIntervalSeconds": "1.5s"}),
        "liqo:virtualKubelet.healthCheckIntervalSeconds",
        'is not a whole number of seconds, e.g. 2s (got "1.5s")',
        id="virtual-kubelet-interval-fraction",
    ),
    pytest.param(
        config(virtualKubelet={"moveUnfitPodsAfterSeconds": "2d"}),
        "liqo:virtualKubelet.moveUnfitPodsAfterSeconds",
        "is not a duration: unknown unit 'd'",
        id="move-unfit-pods-after-bad-unit",
    ),
    pytest.param(
        config(virtualKubelet={"moveUnfitPodsAfterSeconds": "25h"}),
        "liqo:virtualKubelet.moveUnfitPodsAfterSeconds",
        "is longer than the maximum",
        id="move-unfit-pods-after-too-long",
    ),
]


@pytest.mark.parametrize(("raw", "path", "allowed"), BAD_CONFIGS)
def test_bad_config_names_the_path_and_what_is_allowed(raw: dict[str, Any], path: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(raw)
    assert allowed in problem_at(caught.value, path)


def test_every_problem_is_reported_once_sorted_by_path() -> None:
    raw = config(
        sharingPercentage=0,
        runtime={"mode": "x"},
        foreignClusters=[foreign(sharingPercentage=200)],
    )
    with pytest.raises(ConfigError) as caught:
        parse(raw)
    assert problems(caught.value) == [
        "liqo:foreignClusters[0].sharingPercentage: Input should be less than or equal to 100 (got 200)",
        "liqo:runtime.mode: Input should be 'cluster' or 'external' (got \"x\")",
        "liqo:sharingPercentage: Input should be greater than or equal to 1 (got 0)",
    ]


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="liqo:home: is required"):
        parse({"foreignClusters": [foreign()]})


# Cross-field checks (unique ids and namespaces, twin-name length): they are caught, but the
# message names no field at all, only `liqo:` (the lines read `liqo:: cluster ids must be unique ...`).

CROSS_FIELD = [
    pytest.param(
        config(foreignClusters=[foreign("home")]),
        "liqo:foreignClusters",
        "cluster ids must be unique across home and foreignClusters; repeated: ['home']",
        id="duplicate-id-home-and-foreign",
    ),
    pytest.param(
        config(foreignClusters=[foreign("foreign-1"), foreign("foreign-2"), foreign("foreign-1")]),
        "liqo:foreignClusters",
        "cluster ids must be unique across home and foreignClusters; repeated: ['foreign-1']",
        id="duplicate-id-foreign-and-foreign",
    ),
    pytest.param(
        config(namespaces=[{"name": "demo"}, {"name": "shop"}, {"name": "demo", "podOffloadingStrategy": "Remote"}]),
        "liqo:namespaces",
        "each namespace may be offloaded once; repeated in namespaces: ['demo']",
        id="duplicate-namespace",
    ),
    pytest.param(
        config(namespaces=[{"name": "n" * 59}]),
        "liqo:namespaces",
        f"namespace {'n' * 59}: its twin name {'n' * 59}-home would exceed 63 characters",
        id="twin-name-longer-than-63",
    ),
]


@pytest.mark.parametrize(("raw", "field", "message"), CROSS_FIELD)
def test_cross_field_problems_are_rejected(raw: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(raw)
    assert any(line.endswith(f": {message}") for line in problems(caught.value)), problems(caught.value)


@pytest.mark.parametrize(("raw", "field", "message"), CROSS_FIELD)
def test_cross_field_problems_name_the_field(raw: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(raw)
    lines = problems(caught.value)
    assert not any(line.startswith("liqo::") for line in lines), lines
    # the exact sub-path (the entry, or its clusterId/name) is the fix's choice; the field must be named
    assert any(
        line.startswith(field) and line[len(field)] in "[.:" and line.endswith(f": {message}") for line in lines
    ), lines


def test_twin_name_of_exactly_63_characters_is_allowed() -> None:
    stack = parse(config(namespaces=[{"name": "n" * 58}]))  # 58 + len("-home") == 63
    assert stack.namespaces[0].name == "n" * 58


def test_twin_name_length_is_only_checked_for_default_name() -> None:
    stack = parse(config(namespaces=[{"name": "n" * 63, "namespaceMappingStrategy": "EnforceSameName"}]))
    assert stack.namespaces[0].namespace_mapping_strategy is NamespaceMappingStrategy.ENFORCE_SAME_NAME


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        pytest.param(config(home={**HOME, "clusterId": "home\n"}), "liqo:home.clusterId", id="cluster-id"),
        pytest.param(config(namespaces=[{"name": "demo\n"}]), "liqo:namespaces[0].name", id="namespace-name"),
        pytest.param(
            config(foreignClusters=[foreign(labels={"region": "europe\n"})]),
            "liqo:foreignClusters[0].labels",
            id="label-value",
        ),
    ],
)
def test_trailing_newline_is_rejected(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(raw)
    problem_at(caught.value, path)


def test_label_key_with_empty_prefix_is_rejected() -> None:
    with pytest.raises(ConfigError) as caught:
        parse(config(foreignClusters=[foreign(labels={"/region": "europe"})]))
    assert "is not a valid Kubernetes label key" in problem_at(caught.value, "liqo:foreignClusters[0].labels")


# -- good configs -----------------------------------------------------------------------------


def test_defaults() -> None:
    stack = parse(config(namespaces=[{"name": "demo"}]))

    assert stack.sharing_percentage == 90
    assert stack.sharing_of(stack.foreign_clusters[0]) == 90
    ns = stack.namespaces[0]
    assert ns.namespace_mapping_strategy is NamespaceMappingStrategy.DEFAULT_NAME
    assert ns.remote_namespace_name is None
    assert ns.pod_offloading_strategy is PodOffloadingStrategy.LOCAL_AND_REMOTE
    assert ns.cluster_selector == []
    assert ns.selector() == NodeSelector(node_selector_terms=[])
    assert stack.runtime.mode is RuntimeMode.EXTERNAL
    assert stack.runtime.image == "ghcr.io/liqo-stack/runtime:0.1.0"
    assert stack.virtual_kubelet.health_check_interval_seconds == 10
    assert stack.virtual_kubelet.failure_threshold == 3
    assert stack.virtual_kubelet.api_server_token_support is True
    cluster = stack.foreign_clusters[0]
    assert (cluster.labels, cluster.fixed_resources, cluster.taints, cluster.sharing_percentage) == ({}, {}, [], None)


def test_reflection_settings_cover_every_configurable_resource() -> None:
    stack = parse(config(reflection={"resources": {"secret": {"type": "AllowList", "workers": 0}}}))

    settings = stack.reflection.settings()
    assert list(settings) == list(REFLECTED_RESOURCES)
    assert (settings["secret"].type, settings["secret"].workers) == (ReflectionPolicy.ALLOW_LIST, 0)
    for name in REFLECTED_RESOURCES:
        if name != "secret":
            assert (settings[name].type, settings[name].workers) == (ReflectionPolicy.DENY_LIST, 3), name


def test_per_cluster_sharing_overrides_the_global_one() -> None:
    stack = parse(
        config(
            sharingPercentage=70,
            foreignClusters=[foreign("foreign-1"), foreign("foreign-2", sharingPercentage=50)],
        )
    )
    first, second = stack.foreign_clusters
    assert stack.sharing_of(first) == 70
    assert stack.sharing_of(second) == 50


@pytest.mark.parametrize("percentage", [1, 100])
def test_sharing_bounds_are_inclusive(percentage: int) -> None:
    stack = parse(config(sharingPercentage=percentage, foreignClusters=[foreign(sharingPercentage=percentage)]))
    assert stack.sharing_percentage == percentage
    assert stack.sharing_of(stack.foreign_clusters[0]) == percentage


def test_foreign_cluster_settings_are_kept() -> None:
    stack = parse(
        config(
            foreignClusters=[
                foreign(
                    labels={"topology.liqo.io/region": "europe", "gpu": ""},
                    fixedResources={"nvidia.com/gpu": "1", "memory": "16Gi", "cpu": "500m"},
                    taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}],
                )
            ]
        )
    )
    cluster = stack.foreign_clusters[0]
    assert cluster.labels == {"topology.liqo.io/region": "europe", "gpu": ""}
    assert cluster.fixed_resources == {"nvidia.com/gpu": "1", "memory": "16Gi", "cpu": "500m"}
    assert [t.to_wire() for t in cluster.taints] == [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]


def test_one_selector_string_is_one_term_of_anded_expressions() -> None:
    stack = parse(config(namespaces=[{"name": "demo", "clusterSelector": ["region in (europe,us-west), !staging"]}]))

    assert stack.namespaces[0].selector() == NodeSelector(
        node_selector_terms=[
            NodeSelectorTerm(
                match_expressions=[
                    NodeSelectorRequirement(key="region", operator="In", values=["europe", "us-west"]),
                    NodeSelectorRequirement(key="staging", operator="DoesNotExist"),
                ]
            )
        ]
    )


def test_selector_strings_are_ored_one_term_each() -> None:
    stack = parse(config(namespaces=[{"name": "demo", "clusterSelector": ["region in (europe,us-west)", "!staging"]}]))

    assert stack.namespaces[0].selector() == NodeSelector(
        node_selector_terms=[
            NodeSelectorTerm(
                match_expressions=[NodeSelectorRequirement(key="region", operator="In", values=["europe", "us-west"])]
            ),
            NodeSelectorTerm(match_expressions=[NodeSelectorRequirement(key="staging", operator="DoesNotExist")]),
        ]
    )


def test_cluster_selector_may_be_a_core_node_selector() -> None:
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "cpus", "operator": "Gt", "values": ["8"]}]}]}
    stack = parse(config(namespaces=[{"name": "demo", "clusterSelector": selector}]))

    assert stack.namespaces[0].selector().to_wire() == selector


def test_selected_name_keeps_the_remote_name() -> None:
    stack = parse(
        config(namespaces=[{"name": "demo", "namespaceMappingStrategy": "SelectedName", "remoteNamespaceName": "far"}])
    )
    assert stack.namespaces[0].namespace_mapping_strategy is NamespaceMappingStrategy.SELECTED_NAME
    assert stack.namespaces[0].remote_namespace_name == "far"


def test_snake_case_names_are_accepted_too() -> None:
    stack = parse({"home": HOME, "foreign_clusters": [foreign()], "sharing_percentage": 40})
    assert stack.sharing_percentage == 40


# -- from_pulumi_config -----------------------------------------------------------------------


def test_from_pulumi_config_decodes_json_and_ignores_other_namespaces() -> None:
    stack = from_pulumi_config(
        {
            "liqo:home": json.dumps(HOME),
            "liqo:foreignClusters": json.dumps([foreign("foreign-1"), foreign("foreign-2", sharingPercentage=50)]),
            "liqo:sharingPercentage": "75",
            "liqo:namespaces": json.dumps([{"name": "demo", "podOffloadingStrategy": "Remote"}]),
            "liqo:runtime": json.dumps({"mode": "cluster"}),
            "kubernetes:context": "kind-home",
            "liqo-other:unknown": "ignored",
            "aws:region": json.dumps({"not": "liqo"}),
        }
    )
    assert stack.home.cluster_id == "home"
    assert [c.cluster_id for c in stack.foreign_clusters] == ["foreign-1", "foreign-2"]
    assert stack.sharing_percentage == 75
    assert [stack.sharing_of(c) for c in stack.foreign_clusters] == [75, 50]
    assert stack.namespaces[0].pod_offloading_strategy is PodOffloadingStrategy.REMOTE
    assert stack.runtime.mode is RuntimeMode.CLUSTER


def test_from_pulumi_config_accepts_already_decoded_values() -> None:
    stack = from_pulumi_config({"liqo:home": HOME, "liqo:foreignClusters": [foreign()], "liqo:sharingPercentage": 60})
    assert stack.sharing_percentage == 60


def test_from_pulumi_config_keeps_plain_strings_and_reports_them_by_path() -> None:
    with pytest.raises(ConfigError) as caught:
        from_pulumi_config(
            {
                "liqo:home": json.dumps(HOME),
                "liqo:foreignClusters": json.dumps([foreign()]),
                "liqo:sharingPercentage": "most",
            }
        )
    assert problem_at(caught.value, "liqo:sharingPercentage") == (
        'liqo:sharingPercentage: Input should be a valid integer (got "most")'
    )


def test_from_pulumi_config_reports_unknown_liqo_keys() -> None:
    with pytest.raises(ConfigError) as caught:
        from_pulumi_config(
            {"liqo:home": json.dumps(HOME), "liqo:foreignClusters": json.dumps([foreign()]), "liqo:sharing": "50"}
        )
    assert problem_at(caught.value, "liqo:sharing") == "liqo:sharing: is not a known setting (check its spelling)"


# -- kubeconfigs ------------------------------------------------------------------------------

TWO_CONTEXTS = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "a",
    "clusters": [
        {"name": "cluster-a", "cluster": {"server": "https://a.example:6443"}},
        {"name": "cluster-b", "cluster": {"server": "https://b.example:6443"}},
    ],
    "contexts": [
        {"name": "a", "context": {"cluster": "cluster-a", "user": "user-a"}},
        {"name": "b", "context": {"cluster": "cluster-b", "user": "user-b"}},
    ],
    "users": [{"name": "user-a", "user": {"token": "token-a"}}, {"name": "user-b", "user": {"token": "token-b"}}],
}


def test_inline_kubeconfig_is_returned_as_is() -> None:
    access = ClusterAccess(cluster_id="home", kubeconfig="apiVersion: v1\nkind: Config\n")
    assert access.kubeconfig_text() == "apiVersion: v1\nkind: Config\n"


def test_kubeconfig_path_is_read(tmp_path: Path) -> None:
    path = tmp_path / "home.yaml"
    path.write_text(yaml.safe_dump(TWO_CONTEXTS))
    stack = parse(config(home={"clusterId": "home", "kubeconfigPath": str(path)}))

    assert stack.home.kubeconfig_text() == path.read_text()


def test_context_restricts_the_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "both.yaml"
    path.write_text(yaml.safe_dump(TWO_CONTEXTS))
    access = ClusterAccess(cluster_id="foreign-1", kubeconfig_path=str(path), context="b")

    assert yaml.safe_load(access.kubeconfig_text()) == {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "b",
        "clusters": [{"name": "cluster-b", "cluster": {"server": "https://b.example:6443"}}],
        "contexts": [{"name": "b", "context": {"cluster": "cluster-b", "user": "user-b"}}],
        "users": [{"name": "user-b", "user": {"token": "token-b"}}],
    }


def test_unknown_context_is_a_config_error(tmp_path: Path) -> None:
    access = ClusterAccess(cluster_id="foreign-1", kubeconfig=yaml.safe_dump(TWO_CONTEXTS), context="c")
    with pytest.raises(ConfigError) as caught:
        access.kubeconfig_text()
    assert str(caught.value) == "cluster foreign-1: context 'c' not in its kubeconfig (['a', 'b'])"


def test_missing_kubeconfig_path_is_a_clear_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "home.yaml"
    access = ClusterAccess(cluster_id="home", kubeconfig_path=str(missing))
    with pytest.raises(ConfigError) as caught:
        access.kubeconfig_text()
    assert str(caught.value) == f"cluster home: kubeconfigPath {str(missing)!r} is not a readable file"


def test_kubeconfig_path_that_is_a_directory_is_a_config_error(tmp_path: Path) -> None:
    access = ClusterAccess(cluster_id="home", kubeconfig_path=str(tmp_path))
    with pytest.raises(ConfigError, match="is not a readable file"):
        access.kubeconfig_text()


def test_stack_config_is_frozen() -> None:
    stack = parse(config())
    with pytest.raises(ValueError, match="frozen"):
        stack.sharing_percentage = 10  # type: ignore[misc]
    assert stack.sharing_percentage == 90


def test_errors_never_echo_a_kubeconfig() -> None:
    secret = "apiVersion: v1\nusers: [{name: x, user: {token: SECRET-TOKEN-1234}}]"
    raw = {
        "home": {"clusterId": "home", "kubeconfig": secret},
        "foreignClusters": [{"clusterId": "home", "kubeconfig": secret, "sharingPercentage": 0}],
    }
    with pytest.raises(ConfigError) as caught:
        parse(raw)
    assert "liqo:foreignClusters" in str(caught.value)
    assert "SECRET-TOKEN" not in str(caught.value)


@pytest.mark.parametrize(
    ("interval", "seconds"), [("30s", 30), ("2m", 120), ("1h", 3600), ("1m30s", 90), (15, 15), ("20", 20)]
)
def test_durations_in_the_config_read_like_kubectl_flags(interval: str | int, seconds: int) -> None:
    parsed = parse(config(virtualKubelet={"healthCheckIntervalSeconds": interval}))
    assert parsed.virtual_kubelet.health_check_interval_seconds == seconds


@pytest.mark.parametrize(
    ("runtime", "pinned"),
    [
        ({}, "ghcr.io/liqo-stack/runtime:0.1.0"),
        (
            {"image": "localhost:5000/team/liqo-stack:0.1.0", "imageDigest": f"sha256:{'c' * 64}"},
            f"localhost:5000/team/liqo-stack:0.1.0@sha256:{'c' * 64}",
        ),
        ({"image": f"liqo-stack@sha256:{'d' * 64}"}, f"liqo-stack@sha256:{'d' * 64}"),
        (
            {"image": f"liqo-stack:1@sha256:{'d' * 64}", "imageDigest": f"sha256:{'d' * 64}"},
            f"liqo-stack:1@sha256:{'d' * 64}",
        ),
    ],
)
def test_the_runtime_image_is_pinned_by_digest_when_one_is_given(runtime: dict[str, str], pinned: str) -> None:
    assert parse(config(runtime=runtime)).runtime.pinned_image == pinned


# -- replicas and leader election (issue 16) ------------------------------------------------------
def test_one_replica_of_each_component_and_client_go_leader_election_by_default() -> None:
    runtime = parse(config()).runtime
    assert (runtime.replicas.controller_manager, runtime.replicas.virtual_kubelet, runtime.replicas.foreign_agent) == (
        1,
        1,
        1,
    )
    election = runtime.leader_election
    assert (election.lease_duration_seconds, election.renew_deadline_seconds, election.retry_period_seconds) == (
        15,
        10,
        2,
    )


def test_two_replicas_and_leader_election_settings_are_kept() -> None:
    runtime = parse(
        config(
            runtime={
                "replicas": {"controllerManager": 2, "virtualKubelet": 2, "foreignAgent": 2},
                "leaderElection": {"leaseDurationSeconds": "30s", "renewDeadlineSeconds": 20, "retryPeriodSeconds": 4},
            }
        )
    ).runtime
    assert runtime.replicas.virtual_kubelet == 2
    assert runtime.leader_election.args() == [
        "--leader-elect-lease-duration=30",
        "--leader-elect-renew-deadline=20",
        "--leader-elect-retry-period=4",
    ]


@pytest.mark.parametrize("replicas", [0, 3, "2", 1.5])
def test_bad_replicas_name_the_path(replicas: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(config(runtime={"replicas": {"virtualKubelet": replicas}}))
    assert problem_at(caught.value, "liqo:runtime.replicas.virtualKubelet")


def test_one_number_of_replicas_is_every_components() -> None:
    replicas = parse(config(runtime={"replicas": 2})).runtime.replicas
    assert (replicas.controller_manager, replicas.virtual_kubelet, replicas.foreign_agent) == (2, 2, 2)
    with pytest.raises(ConfigError) as caught:
        parse(config(runtime={"replicas": 3}))
    assert "less than or equal to 2" in problem_at(caught.value, "liqo:runtime.replicas.controllerManager")


def test_unknown_component_in_replicas_is_rejected() -> None:
    with pytest.raises(ConfigError) as caught:
        parse(config(runtime={"replicas": {"webhooks": 2}}))
    assert "not a known setting" in problem_at(caught.value, "liqo:runtime.replicas.webhooks")


def test_leader_election_timing_must_be_consistent_and_names_the_settings() -> None:
    with pytest.raises(ConfigError) as caught:
        parse(config(runtime={"leaderElection": {"leaseDurationSeconds": 10, "renewDeadlineSeconds": 10}}))
    [problem] = problems(caught.value)
    assert problem.startswith("liqo:runtime.leaderElection: ")
    assert "runtime.leaderElection.leaseDurationSeconds (10) must be greater than" in problem
    assert "runtime.leaderElection.renewDeadlineSeconds (10)" in problem
