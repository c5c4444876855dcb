"""`DestroyGuard`: a stack's removal of its home control plane or of a peering stops, naming them, while
namespaces it did not declare are still offloaded there (an application team's `OffloadedNamespace` in
its own stack, a `liqo-stack offload namespace` by hand).

What is the stack's own: the NamespaceOffloadings and NamespaceOffloadingSelectors it declares carry its
name (`liqo-stack.io/declared-by: <organization>/<project>/<stack>`), and an offloading a selector made is
that selector's stack's. So the guard's own inputs never change with the namespaces a stack declares.

Why a check of its own: `pulumi destroy` does not run the program, and deleting the home's CRDs deletes
every NamespaceOffloading with them, deleting a VirtualNode withdraws every twin in that cluster, the
teams' with the stack's own. The engine deletes a resource's dependents first, so a guard that depends
on everything the control plane (or the peering) is made of is deleted first: its `delete` looks at the
home cluster and refuses while another's offloading is there. Nothing else has been deleted by then.

It is a dynamic resource, run by the Python language host: a Python program (`__main__.py`, or the
package's classes used from Python) gets it; the package's provider, serving YAML and TypeScript
programs, cannot declare one (their language host has no Python to run it in), so it declares none.

Its provider, what it counts as another's and what it says: liqo_stack/resources/destroy_guard.py. To go
on anyway, the `pulumi destroy` (or `up`) names what it may unoffload:
`LIQO_STACK_UNOFFLOAD_ON_DESTROY=<namespace>,<namespace>` (or `all`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
from pulumi.dynamic import Resource

from liqo_stack.resources.destroy_guard import CONSENT_VARIABLE, DestroyGuardProvider

TYPE = "pulumi-python:dynamic/liqo:DestroyGuard"  # as the engine names it (Resource's module and name below)

__all__ = ["CONSENT_VARIABLE", "TYPE", "DestroyGuard", "stack_identity"]


def stack_identity() -> str:
    """This stack, as its objects name it (names.DECLARED_BY_ANNOTATION)."""
    return f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"


class DestroyGuard(Resource, module="liqo", name="DestroyGuard"):
    """Deleted before everything in `guarded`; refuses while others' offloadings are there (see above): of
    the home control plane (`cluster` None), or of the peering with `cluster`."""

    def __init__(
        self,
        name: str,
        *,
        home_kubeconfig: pulumi.Input[str],
        guarded: Sequence[pulumi.Resource],
        cluster: str | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        what = (
            "removing the home control plane (its CRDs)" if cluster is None else f"removing the peering with {cluster}"
        )
        props: Mapping[str, Any] = {
            "kubeconfig": pulumi.Output.secret(home_kubeconfig),
            "what": what,
            "cluster": cluster or "",
            "stack": stack_identity(),
        }
        after = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(guarded)))
        super().__init__(DestroyGuardProvider(), name, dict(props), after)
