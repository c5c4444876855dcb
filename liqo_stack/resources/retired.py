"""What a stack made before pulumi-kubernetes needs to upgrade with a plain `pulumi up`.

Such a stack holds `pulumi-python:dynamic:Resource`s whose state names their provider by reference:
`liqo_stack.resources.kube_object.KubeObjectProvider` (one Kubernetes object each) and
`liqo_stack.resources.token_kubeconfig.TokenKubeconfigProvider` (a kubeconfig, owning nothing).
On the upgrade, the program declares each object again as a pulumi-kubernetes resource, which
server-side applies it with the same field manager (`liqo-stack`): the live object is taken over in
place, same uid, and nothing is recreated. The engine then deletes the old dynamic resources, and
their retired provider only forgets them: deleting the live object would delete what the new
resource now manages. Nothing else is ever asked of it; it reports no change and reads nothing.
"""

from __future__ import annotations

from typing import Any

from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider


class RetiredProvider(ResourceProvider):
    """Forgets; never touches a cluster."""

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return (type(self), ())

    def diff(self, _id: str, _olds: dict[str, Any], _news: dict[str, Any]) -> DiffResult:
        return DiffResult(changes=False)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_, props)

    def create(self, props: dict[str, Any]) -> CreateResult:
        raise RuntimeError("retired: liqo-stack declares Kubernetes objects through pulumi-kubernetes now")

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """The object stays: its pulumi-kubernetes resource owns it now."""
