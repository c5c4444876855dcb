"""What the home's NamespaceOffloading controller takes from a watched NamespaceMap: the namespaces whose
reported twin changed, and only those (runtime/controllers/namespaceoffloading.py, MapWatches). The watch
itself against real API servers: tests/integration/test_offloading_follows_reports.py."""

from __future__ import annotations

from typing import Any

from runtime.api.resources import NamespaceMapResource
from runtime.controllers.namespaceoffloading import MapWatches, changed_namespaces, reported_entries
from runtime.kube import Event


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
