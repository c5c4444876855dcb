"""A `Stack` component's properties as a stack config: the provider, the policy pack and `liqo-stack
preview` read them with the same models and checks as the `liqo:` settings (liqo_stack/config.py).
Light on purpose (no Pulumi runtime): the policy pack imports it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from liqo_stack.declaring import config as stack_config
from liqo_stack.declaring.package.schema import SECRET_PROPERTIES, SETTINGS, STACK

PROVIDERS = "providers"  # the one property that is not a stack setting: a program's own providers


def properties_path(name: str) -> str:
    """What an error puts before a property's path: where it is written in a YAML program (a resource's
    key is its name there), and readable in the other languages."""
    return f"resources.{name}.properties."


def config_of(name: str, properties: Mapping[str, Any]) -> stack_config.StackConfig:
    """The stack config a `Stack` component's properties declare (everything but `providers`). Raises
    ConfigError naming each bad property by its path in the program."""
    settings = {key: whole_numbers(value) for key, value in properties.items() if key != PROVIDERS}
    return stack_config.parse(settings, where=properties_path(name))


def without_secrets(properties: Mapping[str, Any]) -> dict[str, Any]:
    """The settings among `properties` with every kubeconfig's content left out (paths stay): the
    component's `settings` output, which the policy pack reads (it sees a component's outputs only)."""

    def strip(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: strip(v) for k, v in value.items() if k not in SECRET_PROPERTIES}
        if isinstance(value, list | tuple):
            return [strip(item) for item in value]
        return value

    return {key: strip(value) for key, value in properties.items() if key != PROVIDERS}


def whole_numbers(value: Any) -> Any:
    """Property values as the config models take them: every number crosses the engine as a float
    (protobuf's Struct), so a whole one becomes an int again (no setting is a fraction)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [whole_numbers(item) for item in value]
    return value


def in_program_terms(message: str, name: str) -> str:
    """A message that names `liqo:` settings, naming the component's properties instead."""
    return stack_config.renamed_settings(message, properties_path(name))


__all__ = ["PROVIDERS", "SETTINGS", "STACK", "config_of", "in_program_terms", "properties_path", "without_secrets"]
