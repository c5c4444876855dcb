"""Custom resources follow their pods (issue 39): the config, what the stack grants for them, the
policy pack's view of it, and the pure parts of their reflection (runtime/forging/custom.py)."""

from __future__ import annotations

import json
from typing import Any, cast

import pulumi
import pytest

from liqo_stack.declaring import manifests
from liqo_stack.declaring.config import ConfigError, parse
from liqo_stack.foreseeing import policy
from runtime.api import CustomResourceReflection, ReflectionPolicy, VirtualNodeSpec, names
from runtime.api.crds import crd_problem, reflection_problem
from runtime.forging.custom import custom_content, has_status_subresource, reflected_condition
from runtime.forging.objects import settings_from
from runtime.reflection import Peering
from runtime.reflection.custom import CustomResources
from tests.unit.test_components import RecordingMocks, mocks, run_program
from tests.unit.test_config import config, problem_at

__all__ = ["mocks"]  # the fixture, shared with test_components

WIDGETS = {"group": "example.io", "version": "v1", "resource": "widgets", "reflectStatus": True}
GADGETS = {"group": "example.io", "version": "v1beta1", "resource": "gadgets"}


def test_a_custom_resource_is_opted_in_as_an_allow_list_by_default() -> None:
    parsed = parse(config(reflection={"customResources": [WIDGETS, GADGETS]}))
    widgets, gadgets = parsed.reflection.custom_reflection()
    assert (widgets.crd_name, widgets.type, widgets.workers, widgets.reflect_status) == (
        "widgets.example.io",
        ReflectionPolicy.ALLOW_LIST,
        3,
        True,
    )
    assert (gadgets.version, gadgets.reflect_status) == ("v1beta1", False)


def test_crd_groups_under_k8s_io_are_custom_resources_and_built_in_ones_are_refused() -> None:
    gateway = {"group": "gateway.networking.k8s.io", "version": "v1", "resource": "httproutes"}
    assert (
        parse(config(reflection={"customResources": [gateway]})).reflection.custom_resources[0].group
        == gateway["group"]
    )
    with pytest.raises(ConfigError) as caught:
        parse(config(reflection={"customResources": [{**gateway, "group": "networking.k8s.io"}]}))
    assert "networking.k8s.io is not a custom resource's group" in problem_at(
        caught.value, "liqo:reflection.customResources[0].group"
    )


def test_the_virtual_node_settings_of_a_custom_resource_come_by_its_crd_name() -> None:
    spec = VirtualNodeSpec.model_validate(
        {"clusterID": "foreign-1", "customResources": [{**GADGETS, "type": "DenyList", "workers": 0}]}
    )
    chosen = settings_from(spec, "gadgets.example.io")
    assert (chosen.policy, chosen.workers) == (ReflectionPolicy.DENY_LIST, 0)
    assert settings_from(spec, "widgets.example.io").workers == 3  # not opted in: the defaults, never used
    assert spec.custom_resource("gadgets.example.io") is not None and spec.custom_resource("configmap") is None


def test_a_copy_takes_every_field_but_status_and_metadata() -> None:
    home: dict[str, Any] = {
        "apiVersion": "example.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "apps", "uid": "u"},
        "spec": {"size": 3},
        "data": {"extra": True},
        "status": {"phase": "Ready"},
    }
    content = custom_content(home)
    assert content == {"spec": {"size": 3}, "data": {"extra": True}}
    content["spec"]["size"] = 4
    assert home["spec"]["size"] == 3, "the home object is never altered"


def crd(*, established: bool = True, served: tuple[str, ...] = ("v1",), status: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": "widgets.example.io"},
        "spec": {
            "names": {"kind": "Widget"},
            "versions": [
                {"name": v, "served": True, **({"subresources": {"status": {}}} if status else {})} for v in served
            ],
        },
        "status": {"conditions": [{"type": "Established", "status": "True" if established else "False"}]},
    }


def test_a_crd_is_ready_when_established_and_serving_the_version() -> None:
    assert crd_problem(crd(), "v1") is None
    assert crd_problem(None, "v1") == "no CustomResourceDefinition"
    assert "not Established" in str(crd_problem(crd(established=False), "v1"))
    assert crd_problem(crd(served=("v2",)), "v1") == "its CustomResourceDefinition does not serve v1 (serves v2)"
    assert has_status_subresource(crd(), "v1") and not has_status_subresource(crd(status=False), "v1")


def test_a_type_is_reflected_only_between_two_fit_crds_of_one_kind() -> None:
    assert reflection_problem(crd(), crd(), "v1") is None
    assert reflection_problem(None, crd(), "v1") == ("home", "no CustomResourceDefinition")
    assert reflection_problem(crd(), None, "v1") == ("foreign", "no CustomResourceDefinition")
    other_kind = crd()
    other_kind["spec"]["names"]["kind"] = "Gizmo"
    assert reflection_problem(crd(), other_kind, "v1") == ("foreign", "its kind is Gizmo, Widget at home")
    assert not has_status_subresource(crd(), "v2")


def entries(*raw: dict[str, Any]) -> list[CustomResourceReflection]:
    return [CustomResourceReflection.model_validate(r) for r in raw]


def test_the_condition_names_missing_crds_and_a_reflect_status_that_cannot_work() -> None:
    by_name = {e.crd_name: e for e in entries(WIDGETS, {**GADGETS, "reflectStatus": True})}
    assert reflected_condition({}, {}, []) is None, "nothing opted in: no condition"
    missing = reflected_condition(by_name, {"gadgets.example.io": "foreign-2: no CustomResourceDefinition"}, [])
    assert missing is not None and (missing["status"], missing["reason"]) == (
        "False",
        "CustomResourceDefinitionMissing",
    )
    assert missing["message"].endswith("gadgets.example.io: foreign-2: no CustomResourceDefinition")
    fine = reflected_condition(by_name, {}, [])
    assert fine is not None and fine["message"] == "reflected: gadgets.example.io, widgets.example.io"
    # gadgets' home CRD has no status subresource: its reflectStatus is said to do nothing
    told = reflected_condition(by_name, {}, ["gadgets.example.io"])
    assert told is not None and told["status"] == "True"
    assert (
        "; reflectStatus has no effect for gadgets.example.io: their home CustomResourceDefinition" in told["message"]
    )
    unasked = {e.crd_name: e for e in entries(GADGETS)}  # no reflectStatus: nothing to say
    assert reflected_condition(unasked, {}, ["gadgets.example.io"]) == reflected_condition(unasked, {}, [])


def test_a_changed_reflect_status_wakes_the_loop_that_writes_the_condition() -> None:
    """The condition tells where reflectStatus cannot work: a flip of it alone must reach `_report`,
    which only the loop runs (woken by `_changed`), not only the types' reflectors."""
    spec = {"now": VirtualNodeSpec.model_validate({"clusterID": "foreign-1", "customResources": [GADGETS]})}
    peering = Peering(cast(Any, None), cast(Any, None), "home", "foreign-1", node_spec=lambda: spec["now"])
    resources = CustomResources(peering, status_source=lambda _: True)
    resources.crds = {"gadgets.example.io": cast(Any, None)}  # watched already: no type opted in or out
    resources.on_settings()
    resources._changed.clear()
    resources.on_settings()
    assert not resources._changed.is_set(), "nothing changed: the loop sleeps"
    spec["now"] = VirtualNodeSpec.model_validate(
        {"clusterID": "foreign-1", "customResources": [{**GADGETS, "reflectStatus": True}]}
    )
    resources.on_settings()
    assert resources._changed.is_set()


def test_the_virtual_kubelet_reads_them_and_writes_status_only_where_it_comes_back() -> None:
    rules = manifests.virtual_kubelet_rules("foreign-1", custom_resources=entries(WIDGETS, GADGETS))
    assert {
        "apiGroups": ["example.io"],
        "resources": ["gadgets", "widgets"],
        "verbs": ["get", "list", "watch"],
    } in rules
    assert {"apiGroups": ["example.io"], "resources": ["widgets/status"], "verbs": ["patch"]} in rules
    assert {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["get", "list", "watch"],
        "resourceNames": ["gadgets.example.io", "widgets.example.io"],
    } in rules
    own = names.virtual_node_name("foreign-1")
    assert {
        "apiGroups": [names.GROUP],
        "resources": ["virtualnodes/status"],
        "verbs": ["patch"],
        "resourceNames": [own],
    } in rules
    assert not any("customresourcedefinitions" in r["resources"] for r in manifests.virtual_kubelet_rules("foreign-1"))


def test_the_home_identity_may_write_exactly_the_opted_in_resources_in_twins() -> None:
    rules = manifests.home_in_twin_namespace_rules(entries(WIDGETS))
    assert rules[: len(manifests.HOME_IN_TWIN_NAMESPACE_RULES)] == manifests.HOME_IN_TWIN_NAMESPACE_RULES
    assert rules[len(manifests.HOME_IN_TWIN_NAMESPACE_RULES) :] == [
        {"apiGroups": ["example.io"], "resources": ["widgets"], "verbs": manifests.REFLECTION_VERBS}
    ]
    assert manifests.home_in_twin_namespace_rules() == manifests.HOME_IN_TWIN_NAMESPACE_RULES


def with_custom_resources() -> None:
    pulumi.runtime.set_config("liqo:reflection", json.dumps({"customResources": [WIDGETS]}))


def test_the_stack_grants_the_crd_reads_cluster_wide_by_name_and_the_policy_passes_it(mocks: RecordingMocks) -> None:
    with_custom_resources()
    run_program()
    for foreign in ("foreign-1", "foreign-2"):
        objects = {(m["kind"], m["metadata"]["name"]): m for m in mocks.in_cluster(foreign)}
        reader = names.home_identity_crd_reader("home")
        assert objects[("ClusterRole", reader)]["rules"] == manifests.custom_resource_definition_rules(entries(WIDGETS))
        binding = objects[("ClusterRoleBinding", reader)]
        assert binding["subjects"][0]["name"] == names.home_identity_name("home")
        twin_role = objects[("ClusterRole", manifests.HOME_IN_TWIN_NAMESPACE_ROLE)]
        assert twin_role["rules"] == manifests.home_in_twin_namespace_rules(entries(WIDGETS))
    [node] = [
        m for m in mocks.in_cluster("home") if m["kind"] == "VirtualNode" and m["spec"]["clusterID"] == "foreign-1"
    ]
    assert node["spec"]["customResources"] == [{**WIDGETS, "type": "AllowList", "workers": 3}]
    stack_objects = [(mocks.cluster_of(r), r.inputs) for r in mocks.objects()]
    assert policy.home_identity_privileges("home", stack_objects) == []


def test_without_custom_resources_the_home_identity_has_nothing_cluster_wide(mocks: RecordingMocks) -> None:
    run_program()
    kinds = {m["kind"] for m in mocks.in_cluster("foreign-1") if "home-home" in m["metadata"]["name"]}
    assert "ClusterRoleBinding" not in kinds


def identity_objects(reader_rules: list[dict[str, Any]], twin_rules: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    identity, tenant, reader = "liqo-home-home", "liqo-tenant-home", names.home_identity_crd_reader("home")
    return [
        ("foreign-1", manifests.role(identity, tenant, manifests.HOME_IDENTITY_TENANT_RULES, "peering")),
        ("foreign-1", manifests.binding("Role", identity, identity, identity, tenant, "peering", ns=tenant)),
        ("foreign-1", manifests.cluster_role(reader, reader_rules, "peering")),
        ("foreign-1", manifests.binding("ClusterRole", reader, reader, identity, tenant, "peering")),
        ("foreign-1", manifests.cluster_role(manifests.HOME_IN_TWIN_NAMESPACE_ROLE, twin_rules, "foreign-agent")),
    ]


def test_the_policy_flags_a_request_for_every_resource() -> None:
    named = manifests.custom_resource_definition_rules(entries(WIDGETS))
    twin = manifests.home_in_twin_namespace_rules(entries(WIDGETS))
    assert policy.home_identity_privileges("home", identity_objects(named, twin)) == []

    everything = [*twin, {"apiGroups": ["example.io"], "resources": ["*"], "verbs": ["get"]}]
    [found] = policy.home_identity_privileges("home", identity_objects(named, everything))
    assert found.policy == policy.HOME_IDENTITY_LEAST_PRIVILEGE
    assert "ClusterRole liqo-home-in-twin-namespace" in found.message and "resources ['*']" in found.message
    assert "liqo:reflection.customResources" in found.message

    every_crd = [{**named[0], "resourceNames": ["*"]}]
    [found] = policy.home_identity_privileges("home", identity_objects(every_crd, twin))
    assert "binds the home identity liqo-home-home cluster-wide" in found.message
    unnamed = [{k: v for k, v in named[0].items() if k != "resourceNames"}]
    assert len(policy.home_identity_privileges("home", identity_objects(unnamed, twin))) == 1
    writes = [{**named[0], "verbs": ["get", "create"]}]
    assert len(policy.home_identity_privileges("home", identity_objects(writes, twin))) == 1
