"""When the on-demand controller watches the pods and claims at home: while a namespace is labelled,
or holds the NamespaceOffloading it made, and only then (its handlers keep the two sets; no API server
is asked, the watches themselves start only in `run`)."""

from __future__ import annotations

from typing import Any, cast

from lightkube.resources.core_v1 import Namespace, Node

from runtime.api import names
from runtime.api.ondemand import OnDemandDefaults
from runtime.api.resources import NamespaceOffloadingResource
from runtime.controllers.ondemand import OnDemandController
from runtime.kube.informing import Event, EventType, Informer


def controller() -> OnDemandController:
    no_client = cast(Any, None)
    return OnDemandController(
        no_client,
        Informer(no_client, NamespaceOffloadingResource),
        Informer(no_client, Namespace),
        Informer(no_client, Node),
        OnDemandDefaults(),
    )


def send(informer: Informer, kind: EventType, key: str, obj: Any) -> None:
    informer._dispatch([Event(kind, key, obj)])


def namespace(name: str, labels: dict[str, str]) -> Any:
    return Namespace.from_dict({"metadata": {"name": name, "labels": labels}})


def offloading(namespace: str, name: str, labels: dict[str, str]) -> Any:
    return NamespaceOffloadingResource.from_dict({"metadata": {"name": name, "namespace": namespace, "labels": labels}})


def test_a_labelled_namespace_needs_the_watches_until_its_label_goes() -> None:
    on_demand = controller()
    assert not on_demand.watches_needed()
    send(on_demand.namespaces, "ADDED", "plain", namespace("plain", {}))
    assert not on_demand.watches_needed()
    send(on_demand.namespaces, "ADDED", "batch", namespace("batch", {names.ON_DEMAND_LABEL: "true"}))
    assert on_demand.watches_needed()
    send(on_demand.namespaces, "MODIFIED", "batch", namespace("batch", {}))
    assert not on_demand.watches_needed()


def test_only_the_namespaces_own_offloading_made_on_demand_keeps_the_watches() -> None:
    on_demand = controller()
    ours = offloading("batch", names.NAMESPACE_OFFLOADING_NAME, {names.OFFLOADED_ON_DEMAND_LABEL: "true"})
    send(on_demand.offloadings, "ADDED", f"batch/{names.NAMESPACE_OFFLOADING_NAME}", ours)
    assert on_demand.watches_needed()
    # another NamespaceOffloading in the namespace (one made before the webhook refused other names)
    send(on_demand.offloadings, "ADDED", "batch/other", offloading("batch", "other", {}))
    assert on_demand.watches_needed()
    send(on_demand.offloadings, "DELETED", f"batch/{names.NAMESPACE_OFFLOADING_NAME}", ours)
    assert not on_demand.watches_needed()
    by_hand = offloading("manual", names.NAMESPACE_OFFLOADING_NAME, {})  # not ours: never touched, no watches
    send(on_demand.offloadings, "ADDED", f"manual/{names.NAMESPACE_OFFLOADING_NAME}", by_hand)
    assert not on_demand.watches_needed()
