"""The policy pack's checks (liqo_stack/foreseeing/policy.py) as pure functions: each with a config that violates
it (the message names the config path) and one that passes."""

from __future__ import annotations

from typing import Any

import pytest

from liqo_stack.declaring.config import StackConfig, parse
from liqo_stack.declaring.manifests import HOME_IDENTITY_TENANT_RULES, binding, role
from liqo_stack.foreseeing import policy


def stack(**overrides: Any) -> StackConfig:
    raw: dict[str, Any] = {
        "home": {"clusterId": "home", "kubeconfigPath": "/dev/null"},
        "foreignClusters": [
            {"clusterId": "foreign-1", "kubeconfigPath": "/dev/null", "labels": {"region": "eu"}},
            {"clusterId": "foreign-2", "kubeconfigPath": "/dev/null"},
        ],
        "virtualKubelet": {"failureThreshold": 3},
    }
    raw.update(overrides)
    return parse(raw)


def test_one_gpu_at_90_percent_is_denied_naming_the_fix() -> None:
    offered = {"foreign-1": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "1"}, "foreign-2": {"cpu": "4"}}
    found = policy.extended_resources_rounding_to_zero(stack(), offered)
    assert [v.policy for v in found] == [policy.EXTENDED_RESOURCE_ROUNDS_TO_ZERO]
    message = found[0].message
    assert "liqo:foreignClusters[0] (foreign-1): nvidia.com/gpu: 1 available x 90% (liqo:sharingPercentage)" in message
    assert 'liqo:foreignClusters[0].fixedResources."nvidia.com/gpu"' in message
    assert found[0].enforcement == policy.MANDATORY


def test_gpus_that_survive_the_share_or_are_fixed_pass() -> None:
    config = stack(
        foreignClusters=[
            {"clusterId": "foreign-1", "kubeconfigPath": "/dev/null", "fixedResources": {"nvidia.com/gpu": 1}},
            {"clusterId": "foreign-2", "kubeconfigPath": "/dev/null"},
        ]
    )
    offered = {"foreign-1": {"nvidia.com/gpu": "1"}, "foreign-2": {"nvidia.com/gpu": "2", "cpu": "1m"}}
    assert policy.extended_resources_rounding_to_zero(config, offered) == []


def test_a_cluster_sharing_percentage_is_the_path_named() -> None:
    config = stack(
        foreignClusters=[
            {"clusterId": "foreign-1", "kubeconfigPath": "/dev/null"},
            {"clusterId": "foreign-2", "kubeconfigPath": "/dev/null", "sharingPercentage": 50},
        ]
    )
    found = policy.extended_resources_rounding_to_zero(config, {"foreign-2": {"example.com/fpga": "1"}})
    assert "x 50% (liqo:foreignClusters[1].sharingPercentage)" in found[0].message


def test_plain_kubeconfig_content_is_denied_and_a_secret_passes() -> None:
    config = stack(
        foreignClusters=[
            {"clusterId": "foreign-1", "kubeconfig": "apiVersion: v1"},
            {"clusterId": "foreign-2", "kubeconfig": "apiVersion: v1"},
        ]
    )
    secrets = {"liqo:home"}  # as the engine names them: top-level keys
    found = policy.plain_kubeconfigs(config, policy.is_secret_in(secrets))
    assert [v.message.split(" ")[0] for v in found] == [
        "liqo:foreignClusters[0].kubeconfig",
        "liqo:foreignClusters[1].kubeconfig",
    ]
    assert "pulumi config set --secret --path 'liqo:foreignClusters[1].kubeconfig'" in found[1].message
    # the whole key set as a secret covers every cluster in it; paths (kubeconfigPath) need nothing
    assert policy.plain_kubeconfigs(config, policy.is_secret_in({"liqo:foreignClusters"})) == []
    assert policy.plain_kubeconfigs(stack(), policy.is_secret_in(set())) == []


def identity_objects(rules: list[dict[str, Any]], *, cluster_wide: bool = False) -> list[tuple[str, dict[str, Any]]]:
    tenant, identity = "liqo-tenant-home", "liqo-home-home"
    objects = [
        ("foreign-1", role(identity, tenant, rules, "peering")),
        ("foreign-1", binding("Role", identity, identity, identity, tenant, "peering", ns=tenant)),
    ]
    if cluster_wide:
        objects.append(("foreign-1", binding("ClusterRole", "admin", identity, identity, tenant, "peering")))
    return objects


def test_the_stacks_own_rules_pass() -> None:
    assert policy.home_identity_privileges("home", identity_objects(HOME_IDENTITY_TENANT_RULES)) == []


def test_extra_verbs_and_cluster_wide_bindings_are_denied() -> None:
    rules = [*HOME_IDENTITY_TENANT_RULES, {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "*"]}]
    found = policy.home_identity_privileges("home", identity_objects(rules, cluster_wide=True))
    messages = sorted(v.message for v in found)
    assert len(messages) == 2
    assert "foreign-1: ClusterRoleBinding" in messages[0] and "cluster-wide" in messages[0]
    assert "more than the runtime needs: * secrets, get secrets" in messages[1]
    assert all(v.policy == policy.HOME_IDENTITY_LEAST_PRIVILEGE for v in found)


def test_objects_at_home_are_not_the_home_identity_in_a_foreign_cluster() -> None:
    rules = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    assert (
        policy.home_identity_privileges(
            "home", [(c.replace("foreign-1", "home"), m) for c, m in identity_objects(rules)]
        )
        == []
    )


@pytest.mark.parametrize(
    ("namespace", "reserved"),
    [
        ({"name": "kube-system", "namespaceMappingStrategy": "EnforceSameName"}, "kube-*"),
        ({"name": "default", "namespaceMappingStrategy": "EnforceSameName"}, "default"),
        (
            {"name": "apps", "namespaceMappingStrategy": "SelectedName", "remoteNamespaceName": "liqo-tenant-home"},
            "liqo*",
        ),
    ],
)
def test_reserved_names_are_denied(namespace: dict[str, Any], reserved: str) -> None:
    found = policy.reserved_namespace_names(stack(namespaces=[{"name": "ok"}, namespace]))
    assert len(found) == 1 and f"a reserved name ({reserved})" in found[0].message
    assert found[0].message.startswith("liqo:namespaces[1].")


def test_same_name_on_an_ordinary_namespace_passes_and_the_list_is_configurable() -> None:
    config = stack(namespaces=[{"name": "apps", "namespaceMappingStrategy": "EnforceSameName"}])
    assert policy.reserved_namespace_names(config) == []
    assert len(policy.reserved_namespace_names(config, ["app*"])) == 1


def test_advisories_name_their_paths() -> None:
    config = parse(
        {
            "home": {"clusterId": "home", "kubeconfigPath": "/dev/null"},
            "foreignClusters": [
                {"clusterId": "foreign-1", "kubeconfigPath": "/dev/null", "sharingPercentage": 99},
                {"clusterId": "foreign-2", "kubeconfigPath": "/dev/null"},
            ],
            "namespaces": [{"name": "apps"}, {"name": "eu", "clusterSelector": ["region=eu"]}],
        }
    )
    found = {v.policy: v.message for v in policy.advisories(config)}
    assert found[policy.NAMESPACE_WITHOUT_SELECTOR].startswith("liqo:namespaces[0].clusterSelector: namespace apps")
    assert found[policy.SHARING_PERCENTAGE_HIGH].startswith("liqo:foreignClusters[0].sharingPercentage: 99%")
    assert found[policy.NO_HEALTH_CHECK_THRESHOLD].startswith("liqo:virtualKubelet.failureThreshold is not set")
    assert all(policy.POLICIES[name][0] == policy.ADVISORY for name in found)


def test_a_careful_stack_has_no_advisories() -> None:
    config = stack(namespaces=[{"name": "eu", "clusterSelector": ["region=eu"]}])
    assert policy.advisories(config) == []
    one_cluster = stack(
        foreignClusters=[{"clusterId": "foreign-1", "kubeconfigPath": "/dev/null"}], namespaces=[{"name": "a"}]
    )
    assert policy.advisories(one_cluster) == []


def test_policy_settings_from_a_config_file() -> None:
    settings = policy.PolicySettings.from_policy_config(
        {
            policy.SHARING_PERCENTAGE_HIGH: {"enforcementLevel": "mandatory", "maxSharingPercentage": 98},
            policy.NO_HEALTH_CHECK_THRESHOLD: "disabled",
        }
    )
    assert settings.max_sharing_percentage == 98
    assert settings.level(policy.SHARING_PERCENTAGE_HIGH) == "mandatory"
    assert settings.level(policy.NO_HEALTH_CHECK_THRESHOLD) == "disabled"
    assert settings.level(policy.KUBECONFIG_AS_SECRET) == "mandatory"
    with pytest.raises(ValueError, match="unknown policies"):
        policy.PolicySettings.from_policy_config({"liqo-no-such-policy": "advisory"})
    with pytest.raises(ValueError, match="maxSharingPercentage must be 1 to 100"):
        policy.PolicySettings.from_policy_config({policy.SHARING_PERCENTAGE_HIGH: {"maxSharingPercentage": 0}})
