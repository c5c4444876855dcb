"""The package's schema (generated from the config models, package/schema.json) and how a Stack
component's properties become a stack config (liqo_stack/declaring/package)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from liqo_stack.declaring.config import ConfigError, StackConfig
from liqo_stack.declaring.package.properties import config_of, without_secrets
from liqo_stack.declaring.package.schema import STACK, package_schema, schema_text, type_token

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
