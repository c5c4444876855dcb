"""Namespace selectors: kubectl's `-l` syntax to a LabelSelector and back, what matches, the names the
CLI gives them, the stack config's errors naming the field, and the CLI's manifest and bad flags."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from liqo_stack.declaring import config
from liqo_stack.foreseeing.effects import Snapshot, TwinState, effects
from liqo_stack.operating.cli import main
from runtime.api import SelectorSyntaxError, names
from runtime.api.namespaceselector import (
    LabelSelector,
    format_label_selector,
    is_system_namespace,
    label_selector_matches,
    parse_label_selector,
    selector_object_name,
    selector_problems,
)


def test_equality_goes_to_match_labels_and_the_rest_to_expressions() -> None:
    selector = parse_label_selector("team=shop, env in (dev,test), !legacy, tier")
    assert selector.to_wire() == {
        "matchLabels": {"team": "shop"},
        "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["dev", "test"]},
            {"key": "legacy", "operator": "DoesNotExist"},
            {"key": "tier", "operator": "Exists"},
        ],
    }
    assert parse_label_selector(format_label_selector(selector)) == selector


@pytest.mark.parametrize(
    ("labels", "matches"),
    [
        ({"team": "shop", "env": "dev"}, True),
        ({"team": "shop", "env": "prod"}, False),
        ({"team": "shop", "env": "dev", "legacy": "yes"}, False),
        ({"env": "dev"}, False),
    ],
)
def test_requirements_are_anded(labels: dict[str, str], matches: bool) -> None:
    assert label_selector_matches(parse_label_selector("team=shop,env in (dev,test),!legacy"), labels) is matches


def test_an_empty_selector_matches_nothing_and_is_refused() -> None:
    assert not label_selector_matches(LabelSelector(), {"team": "shop"})
    assert selector_problems(LabelSelector()) == [
        "the namespace selector is empty: it would match every namespace; give a label"
    ]
    with pytest.raises(SelectorSyntaxError, match="would match every namespace"):
        parse_label_selector("  ")


def test_the_cluster_and_liqo_namespaces_are_never_selected() -> None:
    for name in ("kube-system", "kube-public", "kube-node-lease", "default", names.LIQO_NAMESPACE, "liqo-tenant-x"):
        assert is_system_namespace(name)
    assert not is_system_namespace("shop")


def test_the_cli_name_is_a_stable_dns_label_per_selector() -> None:
    long = parse_label_selector("team.example.com/owner in (" + ",".join(f"team-{i}" for i in range(30)) + ")")
    name = selector_object_name(long)
    assert names.is_dns_label(name) and name == selector_object_name(long)
    assert selector_object_name(parse_label_selector("team=a")) != selector_object_name(parse_label_selector("team=b"))


BASE = {"home": {"clusterId": "home"}, "foreignClusters": [{"clusterId": "foreign-1"}]}


@pytest.mark.parametrize(
    ("selectors", "error"),
    [
        ([{"name": "a", "selector": ""}], "liqo:namespaceSelectors[0].selector: an empty selector"),
        ([{"name": "a", "selector": "env in ()"}], "liqo:namespaceSelectors[0].selector: 'env in ()'"),
        ([{"name": "A", "selector": "x"}], "liqo:namespaceSelectors[0].name: must be a DNS-1123 label"),
        (
            [{"name": "a", "selector": "x", "namespaceMappingStrategy": "SelectedName"}],
            "liqo:namespaceSelectors[0].namespaceMappingStrategy: Input should be 'DefaultName' or 'EnforceSameName'",
        ),
        (
            [{"name": "a", "selector": "x", "clusterSelector": ["region in ()"]}],
            "liqo:namespaceSelectors[0].clusterSelector",
        ),
        ([{"name": "a", "selector": "x"}, {"name": "a", "selector": "y"}], "repeated in namespaceSelectors: ['a']"),
        ([{"name": "a", "selector": "x", "namespace": "y"}], "liqo:namespaceSelectors[0].namespace: is not a known"),
    ],
)
def test_bad_selectors_in_the_stack_config_name_the_field(selectors: list[dict[str, str]], error: str) -> None:
    with pytest.raises(config.ConfigError) as raised:
        config.parse({**BASE, "namespaceSelectors": selectors})
    assert error in str(raised.value)


def test_the_stack_config_makes_the_selector_spec() -> None:
    declared = {"name": "shop", "selector": "team=shop", "clusterSelector": ["region=europe"]}
    [selector] = config.parse({**BASE, "namespaceSelectors": [declared]}).namespace_selectors
    assert selector.spec().to_wire() == {
        "namespaceSelector": {"matchLabels": {"team": "shop"}},
        "namespaceMappingStrategy": "DefaultName",
        "podOffloadingStrategy": "LocalAndRemote",
        "clusterSelector": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["europe"]}]}]
        },
    }


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["offload", "namespaces", *args])
    return result.exit_code, result.output


def test_cli_output_is_the_selector_manifest() -> None:
    code, out = invoke("--namespace-selector", "team=shop", "--pod-offloading-strategy", "Remote", "-o", "yaml")
    assert code == 0
    assert yaml.safe_load(out) == {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "NamespaceOffloadingSelector",
        "metadata": {"name": selector_object_name(parse_label_selector("team=shop"))},
        "spec": {
            "namespaceSelector": {"matchLabels": {"team": "shop"}},
            "namespaceMappingStrategy": "DefaultName",
            "podOffloadingStrategy": "Remote",
            "clusterSelector": {"nodeSelectorTerms": []},
        },
    }


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("--namespace-selector", ""), "--namespace-selector"),
        (("--namespace-selector", "env in ()"), "--namespace-selector"),
        (("--namespace-selector", "x", "--selector", "region in ()"), "--selector"),
        (("--namespace-selector", "x", "--name", "Not_A_Name"), "--name"),
    ],
)
def test_cli_bad_flags_name_the_flag_and_apply_nothing(args: tuple[str, ...], flag: str) -> None:
    code, out = invoke(*args, "-o", "yaml")
    assert code == 2 and f"Invalid value for {flag}" in out and "apiVersion" not in out


# -- `liqo-stack preview`: what a change of the stack's selectors (or of namespaces' labels) does --------
def selector_stack(selectors: list[dict[str, Any]]) -> config.StackConfig:
    foreign = [{"clusterId": f"foreign-{i}", "kubeconfigPath": "/dev/null"} for i in (1, 2)]
    home = {"clusterId": "home", "kubeconfigPath": "/dev/null"}
    return config.parse({"home": home, "foreignClusters": foreign, "namespaceSelectors": selectors})


def labelled(owner: str | None, *, stack_selectors: set[str], labels: dict[str, str]) -> Snapshot:
    """`shop` offloaded to both clusters by the selector `owner` (None: not offloaded), with these labels."""
    return Snapshot(
        offloadings={"shop": (False, ["foreign-1", "foreign-2"], "shop-home")} if owner else {},
        twins={(c, "shop-home"): TwinState(exists=True, ours=True, pods=2) for c in ("foreign-1", "foreign-2")},
        namespace_labels={"shop": labels, "kube-system": labels},
        selector_owned={"shop": owner} if owner else {},
        stack_selectors=stack_selectors,
    )


def test_a_selector_removed_from_the_stack_deletes_the_twins_of_what_it_offloaded() -> None:
    found = effects(selector_stack([]), labelled("shop", stack_selectors={"shop"}, labels={"team": "shop"}))
    assert [(t["namespace"], t["cluster"], t["pods"], t["why"]) for t in found.twins_deleted] == [
        ("shop", cluster, 2, "no namespace selector of the stack matches it any more")
        for cluster in ("foreign-1", "foreign-2")
    ]


def test_a_label_the_stacks_selector_matches_makes_twins_and_system_namespaces_none() -> None:
    declared = [{"name": "shop", "selector": "team=shop"}]
    found = effects(selector_stack(declared), labelled(None, stack_selectors=set(), labels={"team": "shop"}))
    assert found.twins_created == [
        {"namespace": "shop", "cluster": cluster, "twin": "shop-home"} for cluster in ("foreign-1", "foreign-2")
    ]
    assert not found.twins_deleted


def test_what_a_cli_selector_offloaded_is_not_the_stacks_to_remove() -> None:
    found = effects(selector_stack([]), labelled("by-cli", stack_selectors=set(), labels={"team": "shop"}))
    assert not found.twins_deleted and not found.twins_created
