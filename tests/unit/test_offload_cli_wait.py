"""`liqo-stack offload namespace` waits for every selected cluster's outcome before it reports a
failure phase: SomeFailed comes with the first cluster that failed, while others may still be working."""

from __future__ import annotations

from typing import Any

from liqo_stack.operating.cli.offload import still_pending


def conditions(required: str, ready: str) -> list[dict[str, Any]]:
    return [{"type": "OffloadingRequired", "status": required}, {"type": "Ready", "status": ready}]


def test_a_selected_cluster_without_an_outcome_is_pending() -> None:
    status = {
        "offloadingPhase": "SomeFailed",
        "remoteNamespacesConditions": {
            "foreign-1": conditions("True", "False"),
            "foreign-2": conditions("True", "Unknown"),
            "foreign-3": conditions("False", "Unknown"),  # not selected: never waited for
        },
    }
    assert still_pending(status) == ["foreign-2"]


def test_nothing_is_pending_once_every_selected_cluster_has_an_outcome() -> None:
    settled = {"foreign-1": conditions("True", "False"), "foreign-2": conditions("True", "True")}
    status = {"remoteNamespacesConditions": settled}
    assert still_pending(status) == []
    assert still_pending({}) == []
