"""Which twin names a foreign cluster lets a home take (runtime/api/twinnames.py), how its stack declares
them (twinNames), and what its stack never takes over (liqo_stack/declaring/claims.py). The same rules
end to end, as the home identity: tests/e2e/test_foreign_guards.py."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube.resources.core_v1 import Namespace, Secret, ServiceAccount

from liqo_stack.declaring import manifests
from liqo_stack.declaring.claims import Declared, not_ours, tenant_objects
from liqo_stack.declaring.config import ConfigError, parse_any
from liqo_stack.declaring.plan import refused_twin_names
from runtime.api import names, twinnames
from runtime.controllers.namespacemap import is_twin_of, twin_labels

SERVED = ["home", "home-2"]


@pytest.mark.parametrize(
    ("pattern", "name", "matched"),
    [
        ("team-*", "team-a", True),
        ("team-*", "team-", True),  # a pattern need not end a valid name: names are checked as DNS labels first
        ("team-*", "teams", False),
        ("*-db", "orders-db", True),
        ("shared", "shared", True),
        ("shared", "shared-2", False),
        ("a*b*c", "a-x-b-y-c", True),
    ],
)
def test_a_star_stands_for_any_run_of_letters_digits_and_dashes(pattern: str, name: str, matched: bool) -> None:
    assert twinnames.matches(pattern, name) is matched


@pytest.mark.parametrize(
    ("a", "b", "common"),
    [
        ("team-*", "kube-*", False),
        ("*", "kube-*", True),
        ("k*", "kube-*", True),
        ("*-team", "liqo*", True),  # liqo-team
        ("de*", "default", True),
        ("d*x", "default", False),
        ("team-*-x", "*-x", True),
        ("a*", "*b", True),
        ("ab", "a*c", False),
    ],
)
def test_two_patterns_overlap_when_some_name_matches_both(a: str, b: str, common: bool) -> None:
    assert twinnames.overlap(a, b) is common
    assert twinnames.overlap(b, a) is common


def test_a_home_gets_its_default_names_and_the_declared_ones_only() -> None:
    def refused(namespace: str, twin: str, allowed: tuple[str, ...] = ()) -> str | None:
        return twinnames.refusal("home", namespace, twin, allowed, SERVED)

    assert refused("shop", "shop-home") is None
    assert refused("payments", "payments", ("payments",)) is None
    assert refused("x", "team-a", ("team-*",)) is None
    said = refused("payments", "payments")
    assert said is not None and "payments-home here" in said and "twinNames: none" in said
    assert "twinNames: team-*" in (refused("x", "other", ("team-*",)) or "")
    # a DefaultName twin of another namespace is no name of this one's: x's twin is x-home, not y-home
    assert refused("x", "y-home") is not None


@pytest.mark.parametrize(
    ("twin", "allowed", "reason"),
    [
        ("liqo-tenant-home-2", ("*-home-2", "liqo-*"), "reserved in every cluster (liqo*)"),  # the squat
        ("kube-squat", ("kube-*",), "reserved in every cluster (kube-*)"),
        ("default", ("default",), "reserved"),
        ("liqo", (), "reserved"),
        ("team-a-home-2", ("team-*",), "home cluster home-2's DefaultName space"),
        ("x-home-2", (), "home cluster home-2's DefaultName space"),
    ],
)
def test_never_a_reserved_name_nor_another_homes_default_name_whatever_is_declared(
    twin: str, allowed: tuple[str, ...], reason: str
) -> None:
    said = twinnames.refusal("home", "x", twin, allowed, SERVED)
    assert said is not None and reason in said, said


def test_a_name_belongs_to_the_served_home_with_the_longest_id_it_ends_with() -> None:
    # home `a`'s DefaultName twin of `x-b` and home `b-a`'s of `x` are both x-b-a: it is b-a's
    assert twinnames.default_name_owner("x-b-a", ["a", "b-a"]) == "b-a"
    assert twinnames.refusal("a", "x-b", "x-b-a", (), ["a", "b-a"]) is not None
    assert twinnames.refusal("b-a", "x", "x-b-a", (), ["a", "b-a"]) is None
    assert twinnames.refusal("a", "x", "x-a", (), ["a", "b-a"]) is None
    assert twinnames.default_name_owner("home", ["home"]) is None, "a name is no DefaultName of itself"


def test_the_tenant_annotation_is_read_as_the_admission_policy_reads_it() -> None:
    assert twinnames.parse_allowed(" team-* ,shared,,") == ("team-*", "shared")
    assert twinnames.parse_allowed("Team,a.b,ok") == ("ok",), "a hand edit that is no pattern allows nothing"
    assert twinnames.parse_allowed(None) == ()
    assert twinnames.parse_allowed(twinnames.format_allowed(["a-*", "b"])) == ("a-*", "b")


def foreign_side(*homes: dict[str, Any]) -> dict[str, Any]:
    return {"foreignSide": {"clusterId": "foreign-1", "kubeconfigPath": "/k", "homes": list(homes)}}


def one_stack(twin_names: list[str]) -> dict[str, Any]:
    foreign = {"clusterId": "foreign-1", "kubeconfigPath": "/k", "twinNames": twin_names}
    return {"home": {"clusterId": "home", "kubeconfigPath": "/k"}, "foreignClusters": [foreign]}


def test_declared_twin_names_are_validated_naming_the_setting() -> None:
    config = parse_any(foreign_side({"clusterId": "home", "twinNames": ["team-*", "payments"]}))
    assert config.foreign_side.homes[0].twin_names == ["team-*", "payments"]  # type: ignore[union-attr]
    assert parse_any(one_stack(["shared-twin"])).foreign_clusters[0].twin_names == ["shared-twin"]  # type: ignore[union-attr]
    cases = [
        (foreign_side({"clusterId": "home", "twinNames": ["kube-x"]}), "liqo:foreignSide.homes[0].twinNames[0]"),
        (foreign_side({"clusterId": "home", "twinNames": ["ok", "*"]}), "liqo:foreignSide.homes[0].twinNames[1]"),
        (foreign_side({"clusterId": "home", "twinNames": ["Team_A"]}), "liqo:foreignSide.homes[0].twinNames[0]"),
        (foreign_side({"clusterId": "home", "twinNames": ["a-*-"]}), "matches no namespace name"),
        (one_stack(["liqo-tenant-*"]), "liqo:foreignClusters[0].twinNames[0]"),
        (one_stack(["default"]), "reserved in every cluster"),
        (
            foreign_side({"clusterId": "home", "twinNames": ["team-*-home-2"]}, {"clusterId": "home-2"}),
            "liqo:foreignSide.homes[0].twinNames[0]: 'team-*-home-2' names twins in home cluster home-2's",
        ),
    ]
    for raw, said in cases:
        with pytest.raises(ConfigError) as refused:
            parse_any(raw)
        assert said in str(refused.value), str(refused.value)
    # a pattern that only may reach another home's space (team-x-home-2) is the runtime's to refuse name by name
    parse_any(foreign_side({"clusterId": "home", "twinNames": ["team-*"]}, {"clusterId": "home-2"}))


def test_a_home_stack_peered_through_an_issued_identity_leaves_twin_names_to_the_foreign_side() -> None:
    config = one_stack(["payments"])
    foreign = config["foreignClusters"][0]
    del foreign["kubeconfigPath"]
    foreign["identityKubeconfig"] = "issued"
    with pytest.raises(ConfigError, match=r"liqo:foreignClusters\[0\]: twinNames: declared by the foreign cluster"):
        parse_any(config)


def test_the_admission_policy_reads_the_tenant_annotation_and_the_reserved_names_from_one_place() -> None:
    policy = manifests.namespacemap_policy()
    text = str(policy)
    assert names.TWIN_NAMES_ANNOTATION in text and names.TENANT_HOME_LABEL in text
    for reserved in twinnames.RESERVED:
        assert twinnames.glob_regex(reserved) in text
    assert twinnames.STAR in text
    assert {v["reason"] for v in policy["spec"]["validations"][1:]} == {"Invalid"}, "422: told from RBAC's 403"
    assert manifests.policy_binding(names.NAMESPACEMAP_POLICY)["spec"]["policyName"] == names.NAMESPACEMAP_POLICY


TENANT_LABELS = {
    names.MANAGED_BY_LABEL: names.MANAGED_BY,
    names.COMPONENT_LABEL: "peering",
    names.TENANT_HOME_LABEL: "home-2",
}


def test_the_stack_takes_over_only_its_own_tenant_objects() -> None:
    tenant = Declared(Namespace, names.tenant_namespace("home-2"))
    token = Declared(Secret, "liqo-home-home-2-token", tenant.name)
    assert not_ours(tenant, TENANT_LABELS, "home-2") is None
    assert not_ours(token, {names.MANAGED_BY_LABEL: names.MANAGED_BY}, "home-2") is None
    squatted = {**twin_labels("home", "foreign-1")}
    assert "twin labels" in (not_ours(tenant, squatted, "home-2") or "")
    assert "twin labels" in (not_ours(tenant, {**TENANT_LABELS, names.ORIGIN_LABEL: "home"}, "home-2") or "")
    assert "managed-by=helm" in (not_ours(token, {names.MANAGED_BY_LABEL: "helm"}, "home-2") or "")
    assert "no app.kubernetes.io/managed-by" in (not_ours(Declared(ServiceAccount, "x", "y"), {}, "home-2") or "")
    assert "not home-2" in (not_ours(tenant, {**TENANT_LABELS, names.TENANT_HOME_LABEL: "home"}, "home-2") or "")
    assert str(token) == "Secret liqo-tenant-home-2/liqo-home-home-2-token"


def test_the_objects_checked_are_those_declared_under_a_name_known_beforehand() -> None:
    """The token Secret's name is drawn when it is made: nothing can wait under it."""
    tenant, identity = names.tenant_namespace("home-2"), names.home_identity_name("home-2")
    assert tenant_objects("home-2") == [Declared(Namespace, tenant), Declared(ServiceAccount, identity, tenant)]


def test_a_twin_is_the_agents_only_while_its_labels_say_so() -> None:
    labels = {**twin_labels("home", "foreign-1"), names.POD_SECURITY_ENFORCE_LABEL: "baseline"}
    assert is_twin_of(labels, "home", "foreign-1")
    assert not is_twin_of(labels, "home-2", "foreign-1")
    assert not is_twin_of(labels, "home", "foreign-2"), "another cluster's agent made it"
    claimed = [
        {**labels, names.MANAGED_BY_LABEL: "team-a"},
        {**labels, names.TENANT_HOME_LABEL: "home-2", names.COMPONENT_LABEL: "peering"},  # a stack's takeover
        {k: v for k, v in labels.items() if k != names.ORIGIN_LABEL},
    ]
    assert not any(is_twin_of(each, "home", "foreign-1") for each in claimed)


def test_a_stack_says_which_declared_twin_names_the_foreign_clusters_it_declares_will_refuse() -> None:
    config: Any = parse_any(
        {
            "home": {"clusterId": "home", "kubeconfigPath": "/k"},
            "foreignClusters": [
                {"clusterId": "f1", "kubeconfigPath": "/k", "labels": {"region": "europe"}, "twinNames": ["pay*"]},
                {"clusterId": "f2", "kubeconfigPath": "/k"},
                {"clusterId": "f3", "identityKubeconfig": "issued"},  # its own stack decides: unseen here
            ],
            "namespaces": [
                {"name": "payments", "namespaceMappingStrategy": "EnforceSameName"},
                {"name": "shop"},
                {"name": "eu", "namespaceMappingStrategy": "EnforceSameName", "clusterSelector": ["region=europe"]},
            ],
        }
    )
    assert refused_twin_names(config) == [
        "liqo:namespaces[0]: f2 will refuse twin namespace payments: it is not a name this cluster allows home "
        "cluster home: a home gets <namespace>-home (payments-home here), and other names only where the foreign "
        "side declares them for it (twinNames: none). Allow it there (liqo:foreignClusters[1].twinNames) or use "
        "namespaceMappingStrategy DefaultName",
        "liqo:namespaces[2]: f1 will refuse twin namespace eu: it is not a name this cluster allows home cluster "
        "home: a home gets <namespace>-home (eu-home here), and other names only where the foreign side declares "
        "them for it (twinNames: pay*). Allow it there (liqo:foreignClusters[0].twinNames) or use "
        "namespaceMappingStrategy DefaultName",
    ]
