"""Home side: NamespaceOffloadingSelectors -> one NamespaceOffloading per matching namespace.

The stack (`liqo:namespaceSelectors`) and `liqo-stack offload namespaces --namespace-selector` only declare a
selector: namespaces are labelled, created and relabelled at any time, so a controller keeps the
offloadings in step. It watches every namespace (one cluster-wide watch, whatever their number),
the selectors and the NamespaceOffloadings (the offloading controller's informer, shared).

- A namespace that a selector matches and that has no offloading gets one, from the selector's
  template, labelled `liqo-stack.io/offloading-selector=<selector>`: the ownership marker.
- An offloading with that label is updated to its selector's template, or deleted (the twins go,
  as `liqo-stack unoffload namespace` does it) once no selector matches the namespace.
- An offloading without it (made by hand, or by the stack's `liqo:namespaces`) is never touched.
- Several selectors matching one namespace: the first by name owns it.
- A selector being deleted holds its finalizer until every offloading it made is gone.

Each step is an Event on the namespace that says why; each selector's status counts the
namespaces it matches, has offloaded, and has Ready.
"""

from __future__ import annotations

import logging
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType
from pydantic import ValidationError

from runtime.api import NamespaceOffloadingSpec, OffloadingPhase, names
from runtime.api.namespaceoffloading import namespace_reference, owned_offloading
from runtime.api.namespaceselector import (
    NamespaceOffloadingSelectorSpec,
    format_label_selector,
    is_system_namespace,
    label_selector_matches,
    selector_problems,
)
from runtime.api.resources import NamespaceOffloadingResource, NamespaceOffloadingSelectorResource
from runtime.kube import Event, Informer, WorkQueue, unless_gone
from runtime.kube.controlling import run_controller
from runtime.kube.warnings import Warnings

log = logging.getLogger(__name__)

FIELD_MANAGER = "liqo-offloading-selector"
SETTLED = {OffloadingPhase.READY.value, OffloadingPhase.NO_CLUSTER_SELECTED.value}
STATUS_DELAY_SECONDS = 1.0  # a selector's counts are written at most this often during a burst
SHOWN_NOT_OWNED = 20  # names listed in a selector's status; the count says how many in all


def _spec(obj: Any) -> NamespaceOffloadingSelectorSpec | None:
    """None when the API server kept what the model cannot read (written before a schema change)."""
    try:
        return NamespaceOffloadingSelectorSpec.model_validate(obj.get("spec") or {})
    except ValidationError as err:
        log.warning("NamespaceOffloadingSelector %s: %s", obj.metadata.name, err)
        return None


def _labels(obj: Any) -> dict[str, str]:
    meta = obj.metadata if obj is not None else None
    return dict((meta.labels if meta else None) or {})


class NamespaceSelectorController:
    def __init__(self, home: AsyncClient, offloadings: Informer, *, workers: int = 4) -> None:
        """`offloadings`: the NamespaceOffloading informer the offloading controller runs."""
        self.home = home
        self.offloadings = offloadings
        self.namespaces = Informer(home, Namespace)
        self.selectors = Informer(home, NamespaceOffloadingSelectorResource)
        self.events = Warnings(home, names.CONTROLLER_MANAGER)
        self.queue = WorkQueue(self.reconcile, workers=workers, name="namespaceselector")
        self.namespaces.add_handler(lambda event: self.queue.add(f"ns:{event.key}"))
        self.selectors.add_handler(self._on_selector)
        self.offloadings.add_handler(self._on_offloading)

    def _on_selector(self, event: Event) -> None:
        self.queue.add(f"sel:{event.key}")
        for namespace in self.namespaces.store:
            self.queue.add(f"ns:{namespace}")

    def _on_offloading(self, event: Event) -> None:
        namespace, _, name = event.key.partition("/")
        if name != names.NAMESPACE_OFFLOADING_NAME:
            return
        self.queue.add(f"ns:{namespace}")
        owner = _labels(event.obj).get(names.OFFLOADING_SELECTOR_LABEL)
        if owner:
            self.queue.add_after(f"sel:{owner}", STATUS_DELAY_SECONDS)

    async def run(self) -> None:
        await run_controller([self.namespaces, self.selectors], self.queue, shared=[self.offloadings])

    # -- which selector owns a namespace ------------------------------------------------------
    def _live_selectors(self) -> list[tuple[str, NamespaceOffloadingSelectorSpec]]:
        """Selectors not being deleted, with a usable namespace selector, by name."""
        found = []
        for name in sorted(self.selectors.store):
            obj = self.selectors.store[name]
            spec = None if obj.metadata.deletionTimestamp else _spec(obj)
            if spec is not None and not selector_problems(spec.namespace_selector):
                found.append((name, spec))
        return found

    def owner_of(self, namespace: str, labels: dict[str, str]) -> tuple[str, NamespaceOffloadingSelectorSpec] | None:
        if is_system_namespace(namespace):
            return None
        return next(
            ((name, s) for name, s in self._live_selectors() if label_selector_matches(s.namespace_selector, labels)),
            None,
        )

    # -- reconcile ------------------------------------------------------------------------------
    async def reconcile(self, key: str) -> None:
        kind, _, name = key.partition(":")
        if kind == "ns":
            await self._reconcile_namespace(name)
        else:
            await self._reconcile_selector(name)

    async def _reconcile_namespace(self, namespace: str) -> None:
        ns = self.namespaces.store.get(namespace)
        if ns is None or ns.metadata.deletionTimestamp:
            return  # a namespace going takes its offloading with it
        offloading = self.offloadings.store.get(f"{namespace}/{names.NAMESPACE_OFFLOADING_NAME}")
        owned_by = _labels(offloading).get(names.OFFLOADING_SELECTOR_LABEL)
        if offloading is not None and (owned_by is None or offloading.metadata.deletionTimestamp):
            return  # made by hand or by the stack: never ours to change; or already being unoffloaded
        owner = self.owner_of(namespace, _labels(ns))
        event_object = namespace_reference(namespace, ns.metadata.uid)
        if owner is None:
            if offloading is None:
                return
            twin = (offloading.get("status") or {}).get("remoteNamespaceName")
            with unless_gone():
                await self.home.delete(
                    NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=namespace
                )
            await self.events.warn(
                event_object,
                "UnoffloadedBySelector",
                f"no NamespaceOffloadingSelector matches the namespace's labels any more (it was offloaded by "
                f"{owned_by}): unoffloading it" + (f", its twin namespaces {twin} are deleted" if twin else ""),
                once=False,
                normal=True,
            )
            return
        owner_name, selector = owner
        current = NamespaceOffloadingSpec.model_validate(offloading.get("spec") or {}) if offloading else None
        desired = selector.offloading_spec()
        if current is not None:
            # the mapping of an offloaded namespace is immutable (docs/offloading.md): its twins keep their names
            desired.namespace_mapping_strategy = current.namespace_mapping_strategy
            desired.remote_namespace_name = current.remote_namespace_name
        if current is not None and owned_by == owner_name and current.to_wire() == desired.to_wire():
            return
        body = NamespaceOffloadingResource.from_dict(
            owned_offloading(namespace, desired, (names.OFFLOADING_SELECTOR_LABEL, owner_name))
        )
        await self.home.apply(body, field_manager=FIELD_MANAGER, force=True)
        if current is None:
            reason, what = "OffloadedBySelector", "offloaded"
        else:
            reason, what = "OffloadingUpdatedBySelector", "offloading updated"
        await self.events.warn(
            event_object,
            reason,
            f"{what}: its labels match NamespaceOffloadingSelector {owner_name} "
            f"({format_label_selector(selector.namespace_selector)})",
            once=False,
            normal=True,
        )

    async def _reconcile_selector(self, name: str) -> None:
        obj = self.selectors.store.get(name)
        if obj is None:
            return
        made = {
            key.partition("/")[0]: offloading
            for key, offloading in self.offloadings.store.items()
            if _labels(offloading).get(names.OFFLOADING_SELECTOR_LABEL) == name
        }
        finalizers = list(obj.metadata.finalizers or [])
        if obj.metadata.deletionTimestamp:
            if made:
                for namespace in made:  # each is deleted, or taken over by another selector
                    self.queue.add(f"ns:{namespace}")
                return
            if names.OFFLOADING_SELECTOR_FINALIZER in finalizers:
                kept = [f for f in finalizers if f != names.OFFLOADING_SELECTOR_FINALIZER]
                with unless_gone():
                    await self.home.patch(
                        NamespaceOffloadingSelectorResource,
                        name,
                        {"metadata": {"finalizers": kept or None}},
                        patch_type=PatchType.MERGE,
                    )
            return
        if names.OFFLOADING_SELECTOR_FINALIZER not in finalizers:
            await self.home.patch(
                NamespaceOffloadingSelectorResource,
                name,
                {"metadata": {"finalizers": [*finalizers, names.OFFLOADING_SELECTOR_FINALIZER]}},
                patch_type=PatchType.MERGE,
            )
        spec = _spec(obj)
        problems = selector_problems(spec.namespace_selector) if spec else ["the spec cannot be read: apply it again"]
        matched = sorted(
            namespace
            for namespace, ns in self.namespaces.store.items()
            if spec is not None
            and not problems
            and not is_system_namespace(namespace)
            and label_selector_matches(spec.namespace_selector, _labels(ns))
        )
        offloaded = {ns: o for ns, o in made.items() if not o.metadata.deletionTimestamp}  # not being unoffloaded
        ready = [
            namespace
            for namespace, offloading in offloaded.items()
            if (offloading.get("status") or {}).get("offloadingPhase") in SETTLED
        ]
        not_owned = [namespace for namespace in matched if namespace not in made]
        status: dict[str, Any] = {
            "observedGeneration": obj.metadata.generation,
            "matchedNamespaces": len(matched),
            "offloadedNamespaces": len(offloaded),
            "readyNamespaces": len(ready),
            "notOwned": not_owned[:SHOWN_NOT_OWNED] or None,
            "message": "; ".join(problems) or None,
        }
        old = obj.get("status") or {}
        if {k: old.get(k) for k in status} == status:
            return  # nothing changed: no write
        await self.home.patch(
            NamespaceOffloadingSelectorResource.Status, name, {"status": status}, patch_type=PatchType.MERGE
        )
