"""What requeues an offloading in the home's NamespaceOffloading controller (runtime/controllers/
namespaceoffloading.py): from a watched NamespaceMap, the namespaces whose reported twin changed, and only
those (MapWatches); from the offloadings, a change of what a reconcile acts on, not the controller's own
status write coming back. The watch itself against real API servers:
tests/integration/test_offloading_follows_reports.py."""

from __future__ import annotations

import asyncio
import base64
import copy
from typing import Any, cast

from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret

from runtime.api.resources import NamespaceMapResource, NamespaceOffloadingResource, VirtualNodeResource
from runtime.controllers.namespaceoffloading import (
    MapWatches,
    NamespaceOffloadingController,
    changed_namespaces,
    reported_entries,
)
from runtime.kube import Event
from tests.support.peering import kubeconfig_with_token


def namespace_map(desired: dict[str, str], current: dict[str, dict[str, Any]]) -> Any:
    return NamespaceMapResource.from_dict(
        {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "NamespaceMap",
            "metadata": {"name": "home", "namespace": "liqo-tenant-home"},
            "spec": {"desiredMapping": desired},
            "status": {"currentMapping": current},
        }
    )


def accepted(twin: str) -> dict[str, str]:
    return {"remoteNamespace": twin, "phase": "Accepted"}


def test_a_reported_entry_that_appears_changes_or_goes_names_its_namespace() -> None:
    before = {"a": accepted("a-home"), "b": accepted("b-home"), "c": accepted("c-home")}
    after = {"a": accepted("a-home"), "b": {"remoteNamespace": "b-home", "phase": "Terminating"}, "d": accepted("d")}
    assert changed_namespaces(before, after) == {"b", "c", "d"}
    assert changed_namespaces(after, after) == set()


def test_only_the_status_counts_the_requests_are_the_controllers_own_writes() -> None:
    seen: list[str] = []
    watches = MapWatches("home", seen.append)
    first = namespace_map({"a": "a-home"}, {"a": accepted("a-home")})
    watches.observe("foreign-1", Event("ADDED", "liqo-tenant-home/home", first))
    assert seen == ["a"], "first sight: what it reports is news"

    requested = namespace_map({"a": "a-home", "b": "b-home"}, {"a": accepted("a-home")})
    watches.observe("foreign-1", Event("MODIFIED", "liqo-tenant-home/home", requested))
    assert seen == ["a"], "a request this controller wrote requeues nothing"

    reported = namespace_map({"a": "a-home", "b": "b-home"}, {"a": accepted("a-home"), "b": accepted("b-home")})
    watches.observe("foreign-1", Event("MODIFIED", "liqo-tenant-home/home", reported))
    assert seen == ["a", "b"]

    watches.observe("foreign-2", Event("ADDED", "liqo-tenant-home/home", first))
    assert seen == ["a", "b", "a"], "each cluster's reports on their own"

    watches.observe("foreign-1", Event("DELETED", "liqo-tenant-home/home", reported))
    assert seen == ["a", "b", "a", "a", "b"], "a map gone: every namespace it reported"


def test_a_map_without_status_reports_nothing() -> None:
    assert reported_entries(None) == {}
    assert reported_entries(NamespaceMapResource.from_dict({"metadata": {"name": "home"}, "spec": {}})) == {}


def offloading(**changes: Any) -> Any:
    body: dict[str, Any] = {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "NamespaceOffloading",
        "metadata": {"name": "offloading", "namespace": "apps", "generation": 1, "finalizers": ["f"]},
        "spec": {"podOffloadingStrategy": "LocalAndRemote"},
    }
    for path, value in changes.items():
        section, _, field = path.partition("__")
        body.setdefault(section, {})[field] = value
    return NamespaceOffloadingResource.from_dict(copy.deepcopy(body))


def test_an_offloading_is_reconciled_for_what_it_acts_on_not_for_its_own_status_coming_back() -> None:
    controller = NamespaceOffloadingController(cast(Any, None), "home")  # no request is made here
    requeued: list[str] = []
    controller.queue.add = lambda key, **_: requeued.append(key)  # type: ignore[method-assign]
    key = "apps/offloading"

    def seen(kind: str, obj: Any) -> list[str]:
        requeued.clear()
        controller._on_offloading(Event(cast(Any, kind), key, obj))
        return list(requeued)

    assert seen("ADDED", offloading()) == [key]
    assert seen("MODIFIED", offloading(status__offloadingPhase="Ready")) == [], "its own status write"
    assert seen("MODIFIED", offloading(metadata__resourceVersion="9")) == []
    assert seen("MODIFIED", offloading(spec__podOffloadingStrategy="Remote")) == [key], "a new spec"
    assert seen("MODIFIED", offloading(spec__podOffloadingStrategy="Remote", metadata__finalizers=[])) == [key]
    deleting = offloading(
        spec__podOffloadingStrategy="Remote",
        metadata__finalizers=[],
        metadata__deletionTimestamp="2026-11-30T00:00:00Z",
    )
    assert seen("MODIFIED", deleting) == [key], "being deleted"
    assert seen("DELETED", deleting) == [key]
    assert seen("MODIFIED", offloading()) == [key], "after it went, nothing is taken as seen"


def test_only_a_peerings_credentials_secret_written_anew_requeues_the_offloadings() -> None:
    """A reissued token written to a credentials Secret, or the Secret deleted: that cluster's map watch
    stops and every offloading is reconciled (each watches again through the new client). The same
    kubeconfig written again, and the liqo namespace's other Secrets, change nothing."""

    async def scenario() -> None:
        controller = NamespaceOffloadingController(cast(Any, None), "home")  # no request is made here
        requeued: list[str] = []
        controller.queue.add = lambda key, **_: requeued.append(key)  # type: ignore[method-assign]
        controller.offloadings.store["apps/offloading"] = offloading()
        controller.virtual_nodes.store["liqo/foreign-1"] = VirtualNodeResource.from_dict(
            {
                "metadata": {"name": "liqo-foreign-1", "namespace": "liqo"},
                "spec": {"clusterID": "foreign-1", "kubeconfigSecretRef": {"name": "own-credentials"}},
            }
        )

        def written(secret_name: str, token: str, kind: str = "MODIFIED") -> list[str]:
            requeued.clear()
            secret = credentials_secret(secret_name, token)
            controller.foreign.credentials.store[f"liqo/{secret_name}"] = secret
            controller._on_credentials(Event(cast(Any, kind), f"liqo/{secret_name}", secret))
            return list(requeued)

        assert written("own-credentials", "first") == ["apps/offloading"], "the Secret its VirtualNode names"
        client = await controller.foreign.client("foreign-1", "own-credentials")  # as a reconcile does
        controller.maps.follow("foreign-1", client)
        assert written("own-credentials", "first") == [], "the same kubeconfig again"
        assert controller.maps.client_of("foreign-1") is client, "its watch goes on"
        assert written("own-credentials", "second") == ["apps/offloading"], "a new token"
        assert controller.maps.client_of("foreign-1") is None, "watched again by the next reconcile, anew"
        controller.maps.follow("foreign-1", await controller.foreign.client("foreign-1", "own-credentials"))
        assert written("own-credentials", "second", "DELETED") == ["apps/offloading"]
        assert controller.maps.client_of("foreign-1") is None, "no credentials: not watched"
        assert written("liqo-webhook-tls", "x") == []
        assert written("liqo-credentials-foreign-1", "x") == [], "not the default name when another is named"
        await controller.maps.close()
        await controller.foreign.close()

    asyncio.run(scenario())


def credentials_secret(name: str, token: str) -> Secret:
    kubeconfig = kubeconfig_with_token(token, "https://127.0.0.1:1")  # nobody there: the watch only tries
    return Secret(
        metadata=ObjectMeta(name=name, namespace="liqo"),
        data={"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
    )
