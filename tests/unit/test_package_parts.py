"""The package's part components (Home, Peering, ForeignSide, OffloadedNamespace; docs/package.md): in the
schema from the stack config's models, each declared alone under Pulumi's mocks as the provider constructs
it, a bad property named by its path with nothing registered, and an OffloadedNamespace that selects a
cluster the home does not offer refused."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi.errors import InputPropertiesError

import liqo_stack
from liqo_stack.declaring.config import ConfigError, StackConfig
from liqo_stack.declaring.package.parts import HomeSettings, OffloadedNamespaceSettings, parse_part
from liqo_stack.declaring.package.schema import (
    FOREIGN_SIDE,
    HOME,
    OFFLOADED_NAMESPACE,
    PEERING,
    STACK,
    package_schema,
    type_token,
)
from tests.unit.test_components import RecordingMocks, stack_config

PARTS = [HOME, PEERING, FOREIGN_SIDE, OFFLOADED_NAMESPACE]
OFFERED = {"foreign-1": {"labels": {"region": "europe"}, "virtualNode": "liqo-foreign-1"}, "foreign-2": {}}


def test_the_schema_lists_the_four_parts_beside_the_stack_from_the_config_models() -> None:
    schema = package_schema()
    assert set(schema["resources"]) == {STACK, *PARTS}
    assert all(schema["resources"][token]["isComponent"] for token in PARTS)
    home = schema["resources"][HOME]["inputProperties"]
    not_home = {"foreignClusters", "namespaces", "namespaceSelectors"}
    assert set(home) == {f.alias or n for n, f in StackConfig.model_fields.items()} - not_home | {"providers"}
    peering = schema["resources"][PEERING]
    assert peering["inputProperties"]["foreignCluster"]["$ref"] == "#/types/" + type_token("ForeignCluster")
    assert peering["inputProperties"]["home"]["$ref"] == "#/types/" + type_token("HomeSettings")
    assert set(peering["requiredInputs"]) == {"foreignCluster", "home"}
    side = schema["resources"][FOREIGN_SIDE]
    assert {"clusterId", "homes", "runtime", "kubeconfig"} <= set(side["inputProperties"])
    assert side["inputProperties"]["kubeconfig"]["secret"] is True
    assert side["properties"]["homeIdentities"]["secret"] is True
    offloaded = schema["resources"][OFFLOADED_NAMESPACE]
    assert {"name", "homeClusterId", "clusterSelector", "podOffloadingStrategy", "offeredClusters"} <= set(
        offloaded["inputProperties"]
    )
    assert set(offloaded["requiredInputs"]) == {"homeClusterId", "name"}
    identity = schema["types"][type_token("ForeignCluster")]["properties"]["identityKubeconfig"]
    assert identity["secret"] is True


def offloaded(**changes: Any) -> dict[str, Any]:
    return {"name": "apps", "homeClusterId": "home", "offeredClusters": OFFERED} | changes


def test_an_offloaded_namespace_selecting_a_cluster_not_offered_is_refused_naming_it() -> None:
    where = "resources.apps.properties."
    selector = ["liqo.io/remote-cluster-id in (foreign-1, foreign-9)"]
    with pytest.raises(ConfigError) as refused:
        parse_part(OffloadedNamespaceSettings, offloaded(clusterSelector=selector), where)
    assert f"{where}clusterSelector: selects cluster foreign-9, which home home does not peer" in str(refused.value)
    with pytest.raises(ConfigError, match=r"clusterSelector: selects none of the clusters home home offers"):
        parse_part(OffloadedNamespaceSettings, offloaded(clusterSelector=["region=asia"]), where)
    fine = parse_part(OffloadedNamespaceSettings, offloaded(clusterSelector=["region=europe"]), where)
    assert fine.plan()["clusters"] == {"foreign-1": {"twinNamespace": "apps-home"}}
    # without offeredClusters the selector is not checked against the home's clusters
    alone = parse_part(OffloadedNamespaceSettings, offloaded(offeredClusters=None, clusterSelector=["x=y"]), where)
    assert alone.plan()["twinNamespace"] == "apps-home" and "clusters" not in alone.plan()


def test_home_settings_are_the_stack_configs_without_foreign_clusters_and_namespaces() -> None:
    where = "resources.home.properties."
    with pytest.raises(ConfigError) as refused:
        parse_part(HomeSettings, {"home": {"clusterId": "home"}, "namespaces": []}, where)
    assert f"{where}namespaces: is not a known setting" in str(refused.value)
    settings = parse_part(HomeSettings, {"home": {"clusterId": "home"}, "runtime": {"mode": "external"}}, where)
    assert settings.runtime.mode.value == "external"


# -- each component alone, under Pulumi's mocks --------------------------------------------------------------


@pytest.fixture
def mocks() -> Iterator[RecordingMocks]:
    loop = asyncio.new_event_loop()  # Pulumi's test mode uses the thread's current event loop
    asyncio.set_event_loop(loop)
    recorder = RecordingMocks()
    pulumi.runtime.set_mocks(recorder, project="liqo-parts", stack="unit", preview=False)
    yield recorder
    asyncio.set_event_loop(None)
    loop.close()


@pulumi.runtime.test  # type: ignore[untyped-decorator]
def declared(make: Callable[[], Any]) -> None:
    make()


def kubeconfig_path(tmp_path: Path) -> str:
    stack_config(tmp_path)  # writes test_components' kubeconfig
    return str(tmp_path / "kubeconfig.yaml")


def home_properties(tmp_path: Path) -> dict[str, Any]:
    return {"home": {"clusterId": "home", "kubeconfigPath": kubeconfig_path(tmp_path)}, "runtime": {"mode": "external"}}


def test_home_and_two_peerings_declare_the_home_plane_and_a_peering_each(mocks: RecordingMocks, tmp_path: Path) -> None:
    path = kubeconfig_path(tmp_path)
    identity = tmp_path / "identity.yaml"
    identity.write_text(Path(path).read_text())

    def make() -> None:
        home = liqo_stack.Home("home", home_properties(tmp_path))
        plane = {"home": home.settings, "controlPlane": home.control_plane}
        liqo_stack.Peering(
            "foreign-1", plane | {"foreignCluster": {"clusterId": "foreign-1", "identityKubeconfigPath": str(identity)}}
        )
        liqo_stack.Peering("foreign-2", plane | {"foreignCluster": {"clusterId": "foreign-2", "kubeconfigPath": path}})

    declared(make)
    types = [r.typ for r in mocks.resources]
    assert types.count(HOME) == 1 and types.count(PEERING) == 4  # each Peering holds a peering's parts
    assert types.count("liqo-stack:index:HomeControlPlane") == 1
    agents = [r.name for r in mocks.resources if r.typ == "liqo-stack:index:ForeignAgent"]
    assert agents == ["foreign-2"], "the split form declares nothing in foreign-1"
    providers = sorted(r.name for r in mocks.resources if r.typ == "pulumi:providers:kubernetes")
    assert providers == ["foreign-1-home", "foreign-2-foreign-2", "foreign-2-home", "home"]  # no two URNs alike
    nodes = [r for r in mocks.objects() if r.typ.endswith("VirtualNode")]
    assert sorted(n.inputs["metadata"]["name"] for n in nodes) == ["liqo-foreign-1", "liqo-foreign-2"]


def test_a_foreign_side_alone_issues_an_identity_per_home(mocks: RecordingMocks, tmp_path: Path) -> None:
    properties = {
        "clusterId": "foreign-1",
        "kubeconfigPath": kubeconfig_path(tmp_path),
        "homes": [{"clusterId": "home"}, {"clusterId": "other-home"}],
        "runtime": {"mode": "external"},
    }
    declared(lambda: liqo_stack.ForeignSide("foreign-1", properties))
    tenants = sorted(r.name for r in mocks.resources if r.typ == "liqo-stack:index:ForeignTenant")
    assert tenants == ["home-foreign-1", "other-home-foreign-1"]
    assert [r.name for r in mocks.resources if r.typ == "liqo-stack:index:ForeignAgent"] == ["foreign-1"]


def test_an_offloaded_namespace_alone_declares_its_namespace_and_offloading_through_the_home_provider(
    mocks: RecordingMocks, tmp_path: Path
) -> None:
    def make() -> None:
        home = pulumi.ProviderResource("kubernetes", "app-home", {})
        liqo_stack.OffloadedNamespace("apps", offloaded(providers={"home": home}, clusterSelector=["region=europe"]))

    declared(make)
    objects = {r.inputs["kind"]: r for r in mocks.objects()}
    assert set(objects) == {"Namespace", "NamespaceOffloading"}
    spec = objects["NamespaceOffloading"].inputs["spec"]
    assert spec["clusterSelector"]["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "region"
    assert objects["Namespace"].inputs["metadata"]["name"] == "apps"
    # created once the home's controller took it up (the namespace then labelled for the pod webhook), so
    # the pods of a Deployment that depends on it are never admitted as local ones
    annotations = objects["NamespaceOffloading"].inputs["metadata"]["annotations"]
    assert annotations["pulumi.com/waitFor"] == "jsonpath={.status.offloadingPhase}"
    assert annotations["pulumi.com/timeoutSeconds"] == "120"


BAD: list[tuple[str, Callable[[Path], tuple[Any, dict[str, Any]]], str]] = [
    ("home", lambda p: (liqo_stack.Home, home_properties(p) | {"runtime": {"mode": "nowhere"}}), "runtime.mode"),
    (
        "foreign-1",
        lambda p: (
            liqo_stack.Peering,
            {
                "home": home_properties(p),
                "controlPlane": ["urn:a", "urn:b"],
                "foreignCluster": {"clusterId": "Foreign_1", "kubeconfigPath": kubeconfig_path(p)},
            },
        ),
        "foreignCluster.clusterId",
    ),
    (
        "side",
        lambda p: (
            liqo_stack.ForeignSide,
            {
                "clusterId": "foreign-1",
                "kubeconfigPath": kubeconfig_path(p),
                "homes": [{"clusterId": "home", "grant": 3}],
            },
        ),
        "homes[0].grant",
    ),
    (
        "apps",
        lambda p: (
            liqo_stack.OffloadedNamespace,
            offloaded(clusterSelector=["liqo.io/remote-cluster-id=foreign-9"], providers={}),
        ),
        "clusterSelector",
    ),
]


@pytest.mark.parametrize(("name", "make", "path"), BAD, ids=[case[2] for case in BAD])
def test_a_bad_property_of_each_part_names_its_path_and_registers_nothing(
    mocks: RecordingMocks,
    tmp_path: Path,
    name: str,
    make: Callable[[Path], tuple[Any, dict[str, Any]]],
    path: str,
) -> None:
    component, properties = make(tmp_path)
    with pytest.raises(InputPropertiesError) as refused:
        declared(lambda: component(name, properties))
    assert f"resources.{name}.properties.{path}" in refused.value.message
    assert [e["property_path"] for e in refused.value.errors or []] == [path]
    assert {r.typ for r in mocks.resources} <= {component.TYPE}, "nothing but the component is registered"


def test_a_peering_without_the_homes_control_plane_is_refused(mocks: RecordingMocks, tmp_path: Path) -> None:
    properties = {
        "home": home_properties(tmp_path),
        "foreignCluster": {"clusterId": "foreign-1", "kubeconfigPath": kubeconfig_path(tmp_path)},
    }
    with pytest.raises(InputPropertiesError, match=r"resources.p.properties.controlPlane: is required"):
        declared(lambda: liqo_stack.Peering("p", properties))


def test_an_application_stack_takes_the_clusters_on_offer_from_the_platform_stacks_outputs(tmp_path: Path) -> None:
    """What a StackReference to the platform stack reads: a Stack's (or the Peerings') `foreignClusters`
    output and `homeClusterId`, fed to an OffloadedNamespace as they are."""
    from liqo_stack.declaring.config import from_pulumi_config
    from liqo_stack.declaring.plan import stack_plan

    platform = stack_plan(from_pulumi_config(stack_config(tmp_path)))  # foreign-1 in region europe, foreign-2
    where = "resources.apps.properties."
    app = {"name": "apps", "homeClusterId": platform["homeClusterId"], "offeredClusters": platform["foreignClusters"]}
    europe = parse_part(OffloadedNamespaceSettings, app | {"clusterSelector": ["region=europe"]}, where)
    assert europe.plan()["clusters"] == {"foreign-1": {"twinNamespace": "apps-home"}}
    by_id = ["liqo.io/remote-cluster-id=foreign-2"]
    assert list(parse_part(OffloadedNamespaceSettings, app | {"clusterSelector": by_id}, where).plan()["clusters"]) == [
        "foreign-2"
    ]
    with pytest.raises(ConfigError, match=r"clusterSelector: selects cluster foreign-3, which home home does not peer"):
        parse_part(
            OffloadedNamespaceSettings, app | {"clusterSelector": ["liqo.io/remote-cluster-id=foreign-3"]}, where
        )


def test_the_policy_pack_checks_an_offloaded_namespace_on_its_own_properties() -> None:
    from liqo_stack.declaring.package.properties import in_program_terms
    from liqo_stack.foreseeing import policy

    where = "resources.apps.properties."
    same_name = parse_part(
        OffloadedNamespaceSettings, offloaded(name="kube-system", namespaceMappingStrategy="EnforceSameName"), where
    )
    found = policy.offloaded_namespace_violations(same_name, "home", len(OFFERED))
    assert sorted(v.policy for v in found) == [policy.NAMESPACE_WITHOUT_SELECTOR, policy.RESERVED_NAMESPACE_SAME_NAME]
    messages = [in_program_terms(v.message, "apps") for v in found]
    assert any(m.startswith(f"{where}namespaceMappingStrategy: namespace kube-system") for m in messages)
    assert any(m.startswith(f"{where}clusterSelector: namespace kube-system has no cluster selector") for m in messages)
    selected = parse_part(OffloadedNamespaceSettings, offloaded(clusterSelector=["region=europe"]), where)
    assert policy.offloaded_namespace_violations(selected, "home", len(OFFERED)) == []
    assert (
        policy.offloaded_namespace_violations(parse_part(OffloadedNamespaceSettings, offloaded(), where), "home", 1)
        == []
    )
