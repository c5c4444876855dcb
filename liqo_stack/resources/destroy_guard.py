"""The destroy guards' provider (liqo_stack/declaring/components/destroy_guard.py declares them): what it
counts as another's, and its delete, which reads the home's NamespaceOffloadings and refuses while another's
is there. Kept apart from the declaring side so that the process the engine starts to run it (`python -m
pulumi.dynamic`, at each `pulumi` command of a stack that has guards) imports no more than it needs: not
Pulumi's Kubernetes SDK (about a second of CPU each time).

To go on anyway, the `pulumi destroy` (or `up`) names what it may unoffload:
`LIQO_STACK_UNOFFLOAD_ON_DESTROY=<namespace>,<namespace>` (or `all`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

# What reads the home cluster (lightkube, httpx2, YAML, the runtime's API models) is imported by the functions
# that do, which run on a delete only: the engine starts this provider at every command of a stack with guards,
# with that import on the command's path (about 0.2 s of its 0.4).

CONSENT_VARIABLE = "LIQO_STACK_UNOFFLOAD_ON_DESTROY"

# The engine deletes a stack's guards together and the dynamic provider serves each call on a thread of its
# own. Two threads decoding one of lightkube's msgspec models for the first time together crash the process
# (a segfault in msgspec, seen with 0.19 to 0.22), so the guards read home one at a time.
_READING_HOME = threading.Lock()


@dataclass(frozen=True)
class Offloaded:
    """A namespace offloaded at home, the clusters it is offloaded to (its twin Ready or awaited there, as
    its status says), and the stack
    that declared it (directly, or through the NamespaceOffloadingSelector that made it), if one did."""

    namespace: str
    clusters: tuple[str, ...]
    declared_by: str | None = None


def _as_dict(item: Any) -> dict[str, Any]:
    return item.to_dict() if hasattr(item, "to_dict") else dict(item)


def offloaded_of(offloadings: Iterable[Any], selectors: Iterable[Any] = ()) -> list[Offloaded]:
    """The offloadings listed at home (lightkube objects or dicts), those already being deleted left out;
    `selectors`: the NamespaceOffloadingSelectors, whose stack is that of the offloadings they made."""
    from runtime.api import names
    from runtime.api.namespaceoffloading import Placement, placement

    selector_stacks = {}
    for selector in map(_as_dict, selectors):
        metadata = selector.get("metadata") or {}
        selector_stacks[metadata.get("name")] = (metadata.get("annotations") or {}).get(names.DECLARED_BY_ANNOTATION)
    result = []
    for item in map(_as_dict, offloadings):
        metadata = item.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            continue
        made_by = (metadata.get("labels") or {}).get(names.OFFLOADING_SELECTOR_LABEL)
        declared_by = (metadata.get("annotations") or {}).get(names.DECLARED_BY_ANNOTATION)
        status = item.get("status") or {}
        # the status reports every peered cluster: those it is offloaded to are those not withdrawn
        reported = status.get("remoteNamespacesConditions") or {}
        selected = [cid for cid in reported if placement(status, cid)[0] is not Placement.WITHDRAWN]
        result.append(
            Offloaded(
                namespace=metadata.get("namespace", ""),
                clusters=tuple(sorted(selected)),
                declared_by=declared_by or (selector_stacks.get(made_by) if made_by else None),
            )
        )
    return result


def left_to_others(
    offloaded: Iterable[Offloaded], *, stack: str, cluster: str | None, consent: str = ""
) -> list[Offloaded]:
    """What the removal would take from others: offloadings `stack` did not declare, with a twin in
    `cluster` (None: anywhere, or nowhere yet), and not named in `consent` (the consent variable's value:
    namespaces, or `all`)."""
    given = {part.strip() for part in consent.split(",") if part.strip()}
    if "all" in given:
        return []
    return sorted(
        (
            o
            for o in offloaded
            if o.declared_by != stack and (cluster is None or cluster in o.clusters) and o.namespace not in given
        ),
        key=lambda o: o.namespace,
    )


def refusal(left: list[Offloaded], what: str) -> str:
    listed = "\n".join(
        f"  {o.namespace}" + (f" (twins in {', '.join(o.clusters)})" if o.clusters else " (no twin yet)") for o in left
    )
    namespaces = ",".join(o.namespace for o in left)
    return (
        f"{what} would unoffload namespaces this stack did not declare, with their twins and the pods in them:\n"
        f"{listed}\n"
        "Nothing was deleted. Unoffload them first (their own stack's `pulumi destroy`, or `liqo-stack unoffload "
        "namespace NAME`) and run this again; or, to unoffload them too, run it again with "
        f"{CONSENT_VARIABLE}={namespaces}"
    )


def _offloadings_at_home(kubeconfig: str) -> tuple[list[Any], list[Any]] | None:
    """The home's NamespaceOffloadings and NamespaceOffloadingSelectors; None when there is nothing to
    guard: the kinds are not served (their CRDs gone), or the home does not answer, and then neither can
    what the guard protects be deleted (it is all at home: the CRDs, the VirtualNodes), so the engine's own
    deletes fail there, not here."""
    import httpx2
    import yaml
    from lightkube import KubeConfig

    from liqo_stack import kube
    from runtime.api.resources import NamespaceOffloadingResource, NamespaceOffloadingSelectorResource

    with _READING_HOME:
        client = kube.client(KubeConfig.from_dict(yaml.safe_load(kubeconfig)))
        try:
            offloadings = kube.list_if_served(client, NamespaceOffloadingResource, namespace="*")
            selectors = kube.list_if_served(client, NamespaceOffloadingSelectorResource)
        except httpx2.TransportError:
            return None
    return None if offloadings is None else (offloadings, selectors or [])


class DestroyGuardProvider(ResourceProvider):
    """Holds nothing in a cluster; only its delete reads one (the home's NamespaceOffloadings)."""

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return (type(self), ())  # pickled by reference: the state names this module, not a copy of the code

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult("guard", props)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # never replaced: a replace would delete the old guard, which is a check
        changed = [key for key in set(olds) | set(news) if key != "__provider" and olds.get(key) != news.get(key)]
        return DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(news)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_, props)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        found = _offloadings_at_home(props["kubeconfig"])
        if found is None:
            return
        left = left_to_others(
            offloaded_of(*found),
            stack=props["stack"],
            cluster=props.get("cluster") or None,
            consent=os.environ.get(CONSENT_VARIABLE, ""),
        )
        if left:
            raise RuntimeError(refusal(left, props["what"]))
