"""The package's schema (generated from the config models, package/schema.json) and how a Stack
component's properties become a stack config (liqo_stack/declaring/package)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi.errors import InputPropertiesError

from liqo_stack.declaring.config import ConfigError, StackConfig
from liqo_stack.declaring.package.properties import config_of, without_secrets
from liqo_stack.declaring.package.schema import STACK, package_schema, schema_text, type_token
from tests.unit.test_components import RecordingMocks, stack_config

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "package" / "schema.json"
PROPERTIES = {
    "home": {"clusterId": "home", "kubeconfig": "apiVersion: v1"},
    "foreignClusters": [{"clusterId": "foreign-1", "kubeconfigPath": "/k/foreign-1", "sharingPercentage": 50.0}],
    "namespaces": [{"name": "apps"}],
    "runtime": {"mode": "external", "webhookPort": 51015.0},
}


def test_the_schema_file_is_generated_from_the_config_models() -> None:
    assert SCHEMA_FILE.read_text() == schema_text(), "stale: run `python -m liqo_stack.declaring.package schema`"


def test_the_stack_takes_every_setting_of_the_stack_config_under_its_name() -> None:
    schema = package_schema()
    stack = schema["resources"][STACK]
    settings = {field.alias or name for name, field in StackConfig.model_fields.items()}
    assert set(stack["inputProperties"]) == settings | {"providers"}
    assert stack["requiredInputs"] == ["foreignClusters", "home"]
    foreign = schema["types"][type_token("ForeignCluster")]["properties"]
    assert foreign["kubeconfig"]["secret"] is True and foreign["identityKubeconfig"]["secret"] is True
    assert foreign["abandonUnreachableAfter"]["type"] == "string"  # a duration, written `30s`
    strategy = schema["types"][type_token("NamespaceOffloadingConfig")]["properties"]["podOffloadingStrategy"]
    assert strategy["$ref"] == "#/types/liqo-stack:index:PodOffloadingStrategy"
    assert json.loads(json.dumps(schema)) == schema


def test_properties_are_validated_as_the_stack_config_with_whole_numbers() -> None:
    config = config_of("liqo", PROPERTIES)
    assert config.runtime.webhook_port == 51015
    assert config.foreign_clusters[0].sharing_percentage == 50


def test_a_bad_property_is_named_by_its_path_in_the_program() -> None:
    bad = PROPERTIES | {"namespaces": [{"name": "Bad_Name"}], "sharingPrecentage": 10}
    with pytest.raises(ConfigError) as refused:
        config_of("liqo", bad)
    message = str(refused.value)
    assert "resources.liqo.properties.namespaces[0].name:" in message
    assert "resources.liqo.properties.sharingPrecentage: is not a known setting" in message
    assert "liqo:" not in message


def test_the_settings_output_leaves_kubeconfig_contents_out() -> None:
    settings = without_secrets(PROPERTIES | {"providers": {"home": object()}})
    assert "providers" not in settings
    assert settings["home"] == {"clusterId": "home"}
    assert settings["foreignClusters"][0]["kubeconfigPath"] == "/k/foreign-1"


# -- the component under Pulumi's mocks -----------------------------------------------------------------


@pytest.fixture
def mocks(tmp_path: Path) -> Iterator[RecordingMocks]:
    loop = asyncio.new_event_loop()  # Pulumi's test mode uses the thread's current event loop
    asyncio.set_event_loop(loop)
    recorder = RecordingMocks()
    pulumi.runtime.set_mocks(recorder, project="liqo-yaml", stack="unit", preview=False)
    yield recorder
    asyncio.set_event_loop(None)
    loop.close()


def stack_properties(tmp_path: Path) -> dict[str, Any]:
    """A `Stack`'s properties as a program gives them, from the Python stack's config of test_components."""
    return {key.removeprefix("liqo:"): json.loads(value) for key, value in stack_config(tmp_path).items()}


@pulumi.runtime.test  # type: ignore[untyped-decorator]
def construct(properties: dict[str, Any]) -> None:
    from liqo_stack.declaring.package.provider import Stack

    Stack("liqo", properties)


def test_the_component_declares_what_the_python_stack_declares(mocks: RecordingMocks, tmp_path: Path) -> None:
    properties = stack_properties(tmp_path)
    # a secret arrives as an output: the stack is declared once it is known
    properties["home"]["kubeconfig"] = pulumi.Output.secret(Path(properties["home"].pop("kubeconfigPath")).read_text())
    construct(properties)
    types = {r.typ for r in mocks.resources}
    assert {STACK, "liqo-stack:index:HomeControlPlane", "liqo-stack:index:Peering"} <= types
    assert {r.name for r in mocks.resources if r.typ == "pulumi:providers:kubernetes"} == {
        "home",
        "foreign-1",
        "foreign-2",
    }
    assert any(m.get("metadata", {}).get("name") == "demo" for m in mocks.in_cluster("home"))


def test_a_bad_property_fails_the_construct_naming_its_path(mocks: RecordingMocks, tmp_path: Path) -> None:
    properties = stack_properties(tmp_path)
    properties["namespaces"] = [{"name": "Bad_Name"}]
    with pytest.raises(InputPropertiesError) as refused:
        construct(properties)
    assert refused.value.errors == [
        {"property_path": "namespaces[0].name", "reason": refused.value.errors[0]["reason"]}  # type: ignore[index]
    ]
    assert "resources.liqo.properties.namespaces[0].name" in refused.value.message
    assert {r.typ for r in mocks.resources} <= {STACK}, "nothing but the component is registered"
