"""Cluster selectors and shared resources (docs/offloading.md), twin namespace names, virtual-node identity."""

from __future__ import annotations

import pytest

from runtime.api import (
    NamespaceMappingStrategy,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    SelectorSyntaxError,
    Taint,
    names,
    parse_selector,
    selected_clusters,
    selector_matches,
    shared_resources,
    twin_namespace_name,
)
from runtime.api.core import SelectorOperator
from runtime.api.plan import virtual_node_labels, virtual_node_taints
from runtime.api.selectors import parse_requirement, parse_term

# -- parse_requirement ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "operator", "values"),
    [
        pytest.param("staging", "staging", "Exists", None, id="key"),
        pytest.param("!staging", "staging", "DoesNotExist", None, id="not-key"),
        pytest.param("! staging", "staging", "DoesNotExist", None, id="not-key-spaced"),
        pytest.param("region=europe", "region", "In", ["europe"], id="equals"),
        pytest.param("region = europe", "region", "In", ["europe"], id="equals-spaced"),
        pytest.param("region==europe", "region", "In", ["europe"], id="double-equals"),
        pytest.param("region!=europe", "region", "NotIn", ["europe"], id="not-equals"),
        pytest.param("region in (europe,us-west)", "region", "In", ["europe", "us-west"], id="in"),
        pytest.param("region in ( europe , us-west )", "region", "In", ["europe", "us-west"], id="in-spaced"),
        pytest.param("region in(europe)", "region", "In", ["europe"], id="in-no-space-before-paren"),
        pytest.param("region notin (asia,africa)", "region", "NotIn", ["asia", "africa"], id="notin"),
        pytest.param("topology.liqo.io/region=europe", "topology.liqo.io/region", "In", ["europe"], id="prefixed-key"),
        pytest.param("gpu=", "gpu", "In", [""], id="empty-value"),
    ],
)
def test_parse_requirement(text: str, key: str, operator: SelectorOperator, values: list[str] | None) -> None:
    assert parse_requirement(text) == NodeSelectorRequirement(key=key, operator=operator, values=values)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("a b c", "'a b c' is not a label requirement", id="words"),
        pytest.param("region in ()", "'region in ()': a set needs at least one value", id="empty-set"),
        pytest.param("region in ( , )", "a set needs at least one value", id="set-of-blanks"),
        pytest.param("region = europe = us", "is not a label requirement", id="two-equals"),
        pytest.param("region in (europe", "is not a label requirement", id="unclosed-set"),
        pytest.param("region within (europe)", "is not a label requirement", id="unknown-operator"),
        pytest.param("", "is not a label requirement", id="empty"),
        pytest.param("!", "is not a label requirement", id="bare-not"),
        pytest.param("=europe", "is not a label requirement", id="no-key"),
    ],
)
def test_parse_requirement_syntax_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorSyntaxError) as caught:
        parse_requirement(text)
    assert message in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_syntax_error_lists_the_allowed_forms() -> None:
    with pytest.raises(SelectorSyntaxError) as caught:
        parse_requirement("a b c")
    assert str(caught.value) == (
        "'a b c' is not a label requirement: use key, !key, key=value, key!=value, key in (a,b) or key notin (a,b)"
    )


def test_parse_term_splits_on_commas_outside_parentheses() -> None:
    term = parse_term("region in (europe, us-west), !staging, tier notin (free)")
    assert term == NodeSelectorTerm(
        match_expressions=[
            NodeSelectorRequirement(key="region", operator="In", values=["europe", "us-west"]),
            NodeSelectorRequirement(key="staging", operator="DoesNotExist"),
            NodeSelectorRequirement(key="tier", operator="NotIn", values=["free"]),
        ]
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("region in (europe", "unbalanced '(' in 'region in (europe'", id="unbalanced-open"),
        pytest.param("region)", "unbalanced ')' in 'region)'", id="unbalanced-close"),
        pytest.param("region,", "'' is not a label requirement", id="trailing-comma"),
        pytest.param("   ", "an empty selector string", id="blank"),
    ],
)
def test_parse_term_syntax_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorSyntaxError) as caught:
        parse_term(text)
    assert message in str(caught.value)


def test_parse_selector_makes_one_term_per_string() -> None:
    assert parse_selector([]) == NodeSelector(node_selector_terms=[])
    selector = parse_selector(["region in (europe,us-west)", "!staging"])
    assert selector.to_wire() == {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "region", "operator": "In", "values": ["europe", "us-west"]}]},
            {"matchExpressions": [{"key": "staging", "operator": "DoesNotExist"}]},
        ]
    }


# -- selector_matches -------------------------------------------------------------------------


def req(key: str, operator: SelectorOperator, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=operator, values=list(values) if values else None)


def term(*requirements: NodeSelectorRequirement) -> NodeSelectorTerm:
    return NodeSelectorTerm(match_expressions=list(requirements))


def selector(*terms: NodeSelectorTerm) -> NodeSelector:
    return NodeSelector(node_selector_terms=list(terms))


@pytest.mark.parametrize("labels", [{}, {"region": "europe"}, {"staging": ""}])
def test_no_terms_selects_every_cluster(labels: dict[str, str]) -> None:
    assert selector_matches(NodeSelector(), labels) is True


@pytest.mark.parametrize(
    "empty_term",
    [
        pytest.param(NodeSelectorTerm(), id="no-expressions"),
        pytest.param(NodeSelectorTerm(match_expressions=[]), id="empty-expressions"),
        pytest.param(NodeSelectorTerm(match_fields=[req("metadata.name", "In", "x")]), id="only-match-fields"),
    ],
)
def test_a_term_with_no_expressions_selects_none(empty_term: NodeSelectorTerm) -> None:
    assert selector_matches(selector(empty_term), {}) is False
    assert selector_matches(selector(empty_term), {"region": "europe", "metadata.name": "x"}) is False


def test_an_empty_term_does_not_hide_the_others() -> None:
    assert selector_matches(selector(NodeSelectorTerm(), term(req("region", "Exists"))), {"region": "asia"}) is True


def test_terms_are_ored() -> None:
    either = selector(term(req("region", "In", "europe")), term(req("gpu", "Exists")))
    assert selector_matches(either, {"region": "europe"}) is True
    assert selector_matches(either, {"gpu": "a100"}) is True
    assert selector_matches(either, {"region": "asia"}) is False


def test_expressions_are_anded() -> None:
    both = selector(term(req("region", "In", "europe"), req("gpu", "Exists")))
    assert selector_matches(both, {"region": "europe", "gpu": "a100"}) is True
    assert selector_matches(both, {"region": "europe"}) is False
    assert selector_matches(both, {"gpu": "a100"}) is False


@pytest.mark.parametrize(
    ("requirement", "labels", "expected"),
    [
        pytest.param(req("region", "In", "europe", "asia"), {"region": "asia"}, True, id="in-match"),
        pytest.param(req("region", "In", "europe"), {"region": "asia"}, False, id="in-other-value"),
        pytest.param(req("region", "In", "europe"), {}, False, id="in-absent-key"),
        pytest.param(req("region", "NotIn", "europe"), {"region": "asia"}, True, id="notin-other-value"),
        pytest.param(req("region", "NotIn", "europe"), {"region": "europe"}, False, id="notin-listed-value"),
        pytest.param(req("region", "NotIn", "europe"), {}, True, id="notin-absent-key"),
        pytest.param(req("staging", "Exists"), {"staging": ""}, True, id="exists-empty-value"),
        pytest.param(req("staging", "Exists"), {}, False, id="exists-absent"),
        pytest.param(req("staging", "DoesNotExist"), {"staging": ""}, False, id="doesnotexist-present"),
        pytest.param(req("staging", "DoesNotExist"), {"region": "x"}, True, id="doesnotexist-absent"),
        pytest.param(req("cpus", "Gt", "8"), {"cpus": "16"}, True, id="gt-greater"),
        pytest.param(req("cpus", "Gt", "8"), {"cpus": "8"}, False, id="gt-equal"),
        pytest.param(req("cpus", "Lt", "8"), {"cpus": "4"}, True, id="lt-less"),
        pytest.param(req("cpus", "Lt", "8"), {"cpus": "8"}, False, id="lt-equal"),
        pytest.param(req("cpus", "Gt", "8"), {}, False, id="gt-absent"),
        pytest.param(req("cpus", "Gt", "8"), {"cpus": "many"}, False, id="gt-not-an-integer"),
        pytest.param(req("cpus", "Lt", "8"), {"cpus": "many"}, False, id="lt-not-an-integer"),
        pytest.param(req("cpus", "Gt"), {"cpus": "16"}, False, id="gt-without-bound"),
    ],
)
def test_requirement_semantics(requirement: NodeSelectorRequirement, labels: dict[str, str], expected: bool) -> None:
    assert selector_matches(selector(term(requirement)), labels) is expected


# docs/offloading.md: the same two requirements, as one selector (AND) or as two selectors (OR).
CLUSTERS: dict[str, dict[str, str]] = {
    "europe": {"region": "europe"},
    "us-west-staging": {"region": "us-west", "staging": ""},
    "asia": {"region": "asia"},
    "asia-staging": {"region": "asia", "staging": ""},
    "us-west": {"region": "us-west", "tier": "gold"},
    "unlabelled": {},
}


def test_one_selector_ands_its_requirements() -> None:
    one = parse_selector(["region in (europe,us-west), !staging"])
    assert len(one.node_selector_terms) == 1
    assert selected_clusters(one, CLUSTERS) == ["europe", "us-west"]


def test_two_selectors_are_ored() -> None:
    two = parse_selector(["region in (europe,us-west)", "!staging"])
    assert len(two.node_selector_terms) == 2
    assert selected_clusters(two, CLUSTERS) == ["europe", "us-west-staging", "asia", "us-west", "unlabelled"]


def test_empty_selector_selects_every_cluster_in_order() -> None:
    assert selected_clusters(parse_selector([]), CLUSTERS) == list(CLUSTERS)


def test_selected_clusters_keeps_the_given_order() -> None:
    ordered = {"b": {"region": "europe"}, "a": {"region": "europe"}, "c": {"region": "asia"}}
    assert selected_clusters(parse_selector(["region=europe"]), ordered) == ["b", "a"]
    assert selected_clusters(parse_selector(["region=mars"]), ordered) == []


# -- twin_namespace_name ----------------------------------------------------------------------


def test_default_name_appends_the_home_cluster_id() -> None:
    assert twin_namespace_name("foo", NamespaceMappingStrategy.DEFAULT_NAME, "home-1") == "foo-home-1"


def test_default_name_ignores_a_remote_name() -> None:
    assert twin_namespace_name("foo", NamespaceMappingStrategy.DEFAULT_NAME, "home", "bar") == "foo-home"


def test_enforce_same_name_keeps_the_name() -> None:
    assert twin_namespace_name("foo", NamespaceMappingStrategy.ENFORCE_SAME_NAME, "home") == "foo"


def test_selected_name_uses_the_given_name() -> None:
    assert twin_namespace_name("foo", NamespaceMappingStrategy.SELECTED_NAME, "home", "bar") == "bar"


@pytest.mark.parametrize("remote", [None, ""])
def test_selected_name_without_a_name_is_an_error(remote: str | None) -> None:
    with pytest.raises(ValueError, match="namespaceMappingStrategy SelectedName requires remoteNamespaceName"):
        twin_namespace_name("foo", NamespaceMappingStrategy.SELECTED_NAME, "home", remote)


# -- shared_resources (docs/offloading.md) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("available", "shared"),
    [("100", "90"), ("50", "45"), ("200", "180"), ("1500m", "1350m"), ("4", "3600m"), ("1", "900m")],
)
def test_cpu_share_at_90_percent(available: str, shared: str) -> None:
    result = shared_resources({"cpu": available}, 90)
    assert result.capacity == {"cpu": shared}
    assert result.rounded_to_zero == []


def test_memory_floors_to_integer_bytes() -> None:
    result = shared_resources({"memory": "16Gi"}, 90)
    assert result.capacity == {"memory": "15461882265"}  # 17179869184 * 0.9 = 15461882265.6
    assert shared_resources({"memory": "1000"}, 33).capacity == {"memory": "330"}
    assert shared_resources({"memory": "1"}, 50).capacity == {"memory": "0"}


def test_one_gpu_at_90_percent_rounds_to_zero_and_is_reported() -> None:
    result = shared_resources({"cpu": "100", "nvidia.com/gpu": "1"}, 90)
    assert result.capacity == {"cpu": "90", "nvidia.com/gpu": "0"}
    assert result.rounded_to_zero == ["nvidia.com/gpu"]


def test_cpu_below_one_millicore_rounds_to_zero() -> None:
    result = shared_resources({"cpu": "1m", "memory": "1Gi"}, 90)
    assert result.capacity == {"cpu": "0", "memory": "966367641"}
    assert result.rounded_to_zero == ["cpu"]


def test_nothing_available_is_not_rounded_to_zero() -> None:
    result = shared_resources({"cpu": "0", "nvidia.com/gpu": "0"}, 90)
    assert result.capacity == {"cpu": "0", "nvidia.com/gpu": "0"}
    assert result.rounded_to_zero == []


def test_full_share_keeps_everything() -> None:
    result = shared_resources({"cpu": "8", "memory": "2Gi", "pods": "110"}, 100)
    assert result.capacity == {"cpu": "8", "memory": "2147483648", "pods": "110"}


def test_fixed_amounts_override_the_percentage() -> None:
    result = shared_resources(
        {"cpu": "100", "memory": "64Gi", "nvidia.com/gpu": "1"},
        90,
        fixed={"memory": "16Gi", "nvidia.com/gpu": "1", "example.com/fpga": "2"},
    )
    assert result.capacity == {"cpu": "90", "example.com/fpga": "2", "memory": "16Gi", "nvidia.com/gpu": "1"}
    assert list(result.capacity) == sorted(result.capacity)
    assert result.rounded_to_zero == []  # the GPU was fixed, not shared by percentage


def test_malformed_fixed_amount_is_an_error() -> None:
    with pytest.raises(ValueError):
        shared_resources({"cpu": "4"}, 50, fixed={"memory": "lots"})


def test_pods_are_counts() -> None:
    assert shared_resources({"pods": "110"}, 90).capacity == {"pods": "99"}


# -- virtual node identity --------------------------------------------------------------------


def test_virtual_node_labels_add_type_and_remote_cluster_id() -> None:
    labels = virtual_node_labels("foreign-1", {"topology.liqo.io/region": "europe"})
    assert labels == {
        "topology.liqo.io/region": "europe",
        "liqo.io/type": "virtual-node",
        "liqo.io/remote-cluster-id": "foreign-1",
    }
    assert virtual_node_labels("foreign-2", {}) == {
        names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE,
        names.REMOTE_CLUSTER_ID_LABEL: "foreign-2",
    }


def test_suggested_labels_cannot_override_the_identity_labels() -> None:
    labels = virtual_node_labels("foreign-1", {"liqo.io/type": "physical", "liqo.io/remote-cluster-id": "other"})
    assert labels == {"liqo.io/type": "virtual-node", "liqo.io/remote-cluster-id": "foreign-1"}


BASE_TAINT = {"key": "virtual-node.liqo.io/not-allowed", "value": "true", "effect": "NoExecute"}


def test_virtual_node_taints_always_start_with_the_virtual_node_taint() -> None:
    assert [t.to_wire() for t in virtual_node_taints([])] == [BASE_TAINT]
    extra = [Taint(key="gpu", value="true", effect="NoSchedule"), Taint(key="spot", effect="PreferNoSchedule")]
    assert [t.to_wire() for t in virtual_node_taints(extra)] == [
        BASE_TAINT,
        {"key": "gpu", "value": "true", "effect": "NoSchedule"},
        {"key": "spot", "effect": "PreferNoSchedule"},
    ]


def test_virtual_node_taint_is_not_duplicated() -> None:
    extra = [
        Taint(key="virtual-node.liqo.io/not-allowed", value="true", effect="NoExecute"),
        Taint(key="gpu", effect="NoSchedule"),
        Taint(key="virtual-node.liqo.io/not-allowed", value="false", effect="NoSchedule"),
    ]
    assert [t.to_wire() for t in virtual_node_taints(extra)] == [BASE_TAINT, {"key": "gpu", "effect": "NoSchedule"}]


def test_a_selector_prints_as_the_flags_that_make_it() -> None:
    from runtime.api.selectors import format_selector

    texts = ["region in (europe,us-west), !staging", "tier=gold, zone!=a, gpu, size notin (s,m)"]
    shown = format_selector(parse_selector(texts))
    assert shown == (
        "--selector 'region in (europe,us-west), !staging' --selector 'tier=gold, zone!=a, gpu, size notin (s,m)'"
    )
    assert format_selector(parse_selector([])) == "(none: every cluster)"


def test_selection_labels_are_the_nodes_else_the_declared_ones() -> None:
    from runtime.api.plan import selection_labels

    nodes = {"foreign-1": {"region": "europe", "added-by-admin": "yes"}}
    labels = selection_labels({"foreign-1": {"region": "europe"}, "foreign-2": {"region": "us-west"}}, nodes)
    assert labels["foreign-1"] == {"region": "europe", "added-by-admin": "yes"}
    assert labels["foreign-2"] == virtual_node_labels("foreign-2", {"region": "us-west"})
