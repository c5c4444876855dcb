"""Two home namespaces asking one foreign cluster for the same twin: one keeps it, the other is refused."""

from __future__ import annotations

from runtime.controllers.namespacemap import twin_holders


def test_each_twin_has_one_holder_the_first_by_name_when_none_holds_it_yet() -> None:
    assert twin_holders({"beta": "shared", "alpha": "shared", "solo": "solo-home"}, {}) == {
        "shared": "alpha",
        "solo-home": "solo",
    }


def test_the_namespace_already_served_keeps_its_twin() -> None:
    reported = {"beta": {"remoteNamespace": "shared", "phase": "Accepted"}}
    assert twin_holders({"alpha": "shared", "beta": "shared"}, reported) == {"shared": "beta"}
    failed = {"beta": {"remoteNamespace": "shared", "phase": "CreationFailed"}}
    assert twin_holders({"alpha": "shared", "beta": "shared"}, failed) == {"shared": "alpha"}
