"""The component provider that serves liqo-stack as a Pulumi package (`package/`, docs/package.md).

A program in any Pulumi language declares `liqo-stack:index:Stack`; the engine starts this provider
(`package/pulumi-resource-liqo-stack`, from the directory the program's `packages:` names) and asks it
to construct the component. The properties are validated by the same models as the `liqo:` stack
config, and the stack is declared by the same function as the Python program
(liqo_stack.declaring.program.declare), its resources parented to the component. A bad property
fails the construct before any resource is registered, naming its path in the program
(`resources.<name>.properties.foreignClusters[0].clusterId` in a YAML program).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi.errors import InputPropertiesError, InputPropertyErrorDetails
from pulumi.provider import ConstructResult, Provider
from pulumi.provider import main as serve

from liqo_stack.declaring import config as stack_config
from liqo_stack.declaring.package.properties import PROVIDERS, SETTINGS, config_of, properties_path, without_secrets
from liqo_stack.declaring.package.schema import OUTPUTS, STACK, VERSION, schema_text
from liqo_stack.declaring.program import declare


def _providers(name: str, given: Any) -> dict[str, k8s.Provider]:
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise stack_config.ConfigError(f"{properties_path(name)}{PROVIDERS}: is not a map of cluster id to provider")
    wrong = sorted(cid for cid, value in given.items() if not isinstance(value, pulumi.ProviderResource))
    if wrong:
        raise stack_config.ConfigError(
            f"{properties_path(name)}{PROVIDERS}.{wrong[0]}: is not a kubernetes provider (pass a kubernetes.Provider)"
        )
    return dict(given)


def _refused(err: stack_config.ConfigError, name: str) -> InputPropertiesError:
    """The engine shows each property error with its path; the message keeps the full explanation."""
    prefix = properties_path(name)
    errors: list[InputPropertyErrorDetails] = []
    for line in str(err).splitlines():
        path, found, reason = line.strip().partition(": ")
        if found and path.startswith(prefix):
            errors.append({"property_path": path.removeprefix(prefix), "reason": reason})
    return InputPropertiesError(str(err), errors or None)


def _holds_outputs(value: Any) -> bool:
    if isinstance(value, pulumi.Output):
        return True
    if isinstance(value, Mapping):
        return any(_holds_outputs(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_outputs(item) for item in value)
    return False


class Stack(pulumi.ComponentResource):
    """`liqo-stack:index:Stack`: the home stack, declared from its properties (see the module's doc)."""

    def __init__(self, name: str, properties: Mapping[str, Any], opts: pulumi.ResourceOptions | None = None):
        super().__init__(STACK, name, None, opts)
        self.outputs: dict[str, pulumi.Output[Any]]
        if _holds_outputs(properties):
            # secrets and values from other resources arrive as outputs: declare once they are known
            plan = pulumi.Output.from_input(properties).apply(lambda known: self._declare(name, known))
            self.outputs = {key: pulumi.Output.unsecret(plan[key]) for key in OUTPUTS}
        else:
            plan_now = self._declare(name, properties)
            self.outputs = {key: pulumi.Output.from_input(plan_now[key]) for key in OUTPUTS}
        self.register_outputs(self.outputs)

    def _declare(self, name: str, properties: Mapping[str, Any]) -> Mapping[str, Any]:
        try:
            config = config_of(name, properties)
            stack = declare(
                config,
                _providers(name, properties.get(PROVIDERS)),
                pulumi.ResourceOptions(parent=self),
                where=properties_path(name),
            )
        except stack_config.ConfigError as err:
            raise _refused(err, name) from None
        return {**stack.plan, SETTINGS: without_secrets(properties)}


class StackProvider(Provider):
    """Constructs the package's one component; its schema is generated from the config models."""

    def __init__(self) -> None:
        super().__init__(VERSION, schema_text())

    def construct(
        self, name: str, resource_type: str, inputs: pulumi.Inputs, options: pulumi.ResourceOptions | None = None
    ) -> ConstructResult:
        if resource_type != STACK:
            raise ValueError(f"unknown resource type {resource_type}: this package has {STACK} only")
        stack = Stack(name, inputs, options)
        return ConstructResult(urn=stack.urn, state=stack.outputs)


def main() -> None:
    """Serve the provider to the engine (it passes its address as the first argument)."""
    serve(StackProvider(), sys.argv[1:])


if __name__ == "__main__":
    main()
