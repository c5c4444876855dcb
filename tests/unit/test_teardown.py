"""A twin torn down (unoffload, a cluster deselected) and a pod on a cluster its namespace is not offloaded to."""

from __future__ import annotations

from runtime.controllers.namespacemap import withdrawn_until_gone
from runtime.forging.events import about_teardown
from runtime.forging.pods import not_offloaded_message


def test_a_withdrawn_mapping_is_reported_terminating_until_its_twin_is_gone() -> None:
    reported = {
        "shop": {"remoteNamespace": "shop-home", "phase": "Accepted"},
        "gone": {"remoteNamespace": "gone-home", "phase": "Terminating"},
        "kept": {"remoteNamespace": "kept-home", "phase": "Accepted"},
    }
    leaving = {"shop-home"}  # gone-home is no longer there: its mapping goes
    assert withdrawn_until_gone({"kept": "kept-home"}, reported, leaving) == {
        "shop": {"remoteNamespace": "shop-home", "phase": "Terminating"}
    }
    assert withdrawn_until_gone({"shop": "shop-home"}, reported, leaving) == {}, "requested again: not withdrawn"


def test_foreign_complaints_about_a_terminating_twin_are_not_reflected() -> None:
    message = (
        "Error updating Endpoint Slices for Service try-a-home/web: failed to create EndpointSlice for Service "
        'try-a-home/web: endpointslices.discovery.k8s.io "web-x1" is forbidden: unable to create new content in '
        "namespace try-a-home because it is being terminated"
    )
    event = {"reason": "FailedToUpdateEndpointSlices", "type": "Warning", "message": message}
    assert about_teardown(event, "try-a-home")
    assert not about_teardown(event, "other-home")
    assert not about_teardown({"reason": "FailedScheduling", "message": "0/2 nodes are available"}, "try-a-home")


def test_a_pod_on_a_cluster_its_namespace_is_not_offloaded_to_is_told_the_command() -> None:
    message = not_offloaded_message("try-c", "foreign-1", offloaded=False)
    assert message.startswith("namespace try-c is not offloaded to foreign-1")
    assert "`liqo-stack offload namespace try-c`" in message
    deselected = not_offloaded_message("try-c", "foreign-1", offloaded=True)
    assert (
        "cluster selector leaves it out" in deselected and "liqo-stack offload namespace try-c --selector" in deselected
    )
