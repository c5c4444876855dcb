"""The component provider that serves liqo-stack as a Pulumi package (`package/`, docs/package.md).

A program in any Pulumi language declares the package's components (`liqo-stack:index:Stack`, `Home`,
`Peering`, `ForeignSide`, `OffloadedNamespace`); the engine starts this provider
(`package/pulumi-resource-liqo-stack`, from the directory the program's `packages:` names) and asks it
to construct each. The components are the classes Python programs use
(liqo_stack/declaring/package/components.py): their properties are validated by the stack config's
models, and a bad property fails the construct before any resource is registered, naming its path in
the program (`resources.<name>.properties.foreignClusters[0].clusterId` in a YAML program).
"""

from __future__ import annotations

import sys

import pulumi
from pulumi.provider import ConstructResult, Provider
from pulumi.provider import main as serve

from liqo_stack.declaring.package.components import COMPONENTS, Stack
from liqo_stack.declaring.package.schema import VERSION, schema_text

__all__ = ["Stack", "StackProvider", "main"]


class StackProvider(Provider):
    """Constructs the package's components; its schema is generated from the config models."""

    def __init__(self) -> None:
        super().__init__(VERSION, schema_text())

    def construct(
        self, name: str, resource_type: str, inputs: pulumi.Inputs, options: pulumi.ResourceOptions | None = None
    ) -> ConstructResult:
        component = COMPONENTS.get(resource_type)
        if component is None:
            raise ValueError(f"unknown resource type {resource_type}: this package has {sorted(COMPONENTS)}")
        made = component(name, inputs, options, guard_destroy=False)  # see components.DestroyGuard
        return ConstructResult(urn=made.urn, state=made.outputs)


def main() -> None:
    """Serve the provider to the engine (it passes its address as the first argument)."""
    serve(StackProvider(), sys.argv[1:])


if __name__ == "__main__":
    main()
