"""docs/offloading.md's health check: which answers of the foreign API server fail it, and when the node turns."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from runtime.kube.errors import status_code_of
from runtime.virtualkubelet.node import (
    FORBIDDEN_REASON,
    SERVER_ERROR_REASON,
    THROTTLED,
    UNAUTHORIZED_REASON,
    UNREACHABLE_REASON,
    VirtualNodeController,
    health_failure,
    node_conditions,
)


@pytest.mark.parametrize(
    ("code", "failure"),
    [
        (200, None),
        (404, None),  # no advertisement yet: a live, authorized server
        (401, UNAUTHORIZED_REASON),
        (403, FORBIDDEN_REASON),
        (500, SERVER_ERROR_REASON),
        (503, SERVER_ERROR_REASON),
        (504, SERVER_ERROR_REASON),
        (None, UNREACHABLE_REASON),
    ],
)
def test_what_an_answer_counts_as(code: int | None, failure: str | None) -> None:
    assert health_failure(code) == failure


def test_the_status_code_of_errors() -> None:
    assert status_code_of(ApiError(status=Status(code=403, message="forbidden"))) == 403
    request = httpx2.Request("GET", "https://foreign:6443/x")
    bare = httpx2.HTTPStatusError("HTTP 502", request=request, response=httpx2.Response(502, request=request))
    assert status_code_of(bare) == 502, "an answer that is no Kubernetes Status (a proxy's)"
    assert status_code_of(httpx2.ConnectError("refused", request=request)) is None
    assert status_code_of(TimeoutError()) is None


class Queue:
    def __init__(self) -> None:
        self.added: list[str] = []

    def add(self, key: str) -> None:
        self.added.append(key)


def controller() -> Any:
    """The controller's health state alone (no clients: observe() only counts and queues)."""
    node: Any = VirtualNodeController.__new__(VirtualNodeController)
    node.node_name, node.foreign_cluster_id = "liqo-foreign", "foreign"
    node.healthy, node.failures, node.failure_reason = True, 0, UNREACHABLE_REASON
    node.unhealthy_since = None
    node.queue = Queue()
    node.on_recovered = []
    return node


def ready(node: Any) -> dict[str, str]:
    return next(
        c for c in node_conditions(node.healthy, node.failures, [], node.failure_reason) if c["type"] == "Ready"
    )


def test_the_node_turns_not_ready_after_the_threshold_with_the_reason_of_the_failure() -> None:
    node = controller()
    node.observe(401, 2)
    assert node.healthy and not node.queue.added, "one failure is below the threshold"
    node.observe(401, 2)
    assert (ready(node)["status"], ready(node)["reason"]) == ("False", UNAUTHORIZED_REASON)
    assert "credentials" in ready(node)["message"] and "2 health checks" in ready(node)["message"]
    node.observe(503, 2)
    assert ready(node)["reason"] == SERVER_ERROR_REASON, "the reason follows the latest failure"
    node.observe(200, 2)
    assert ready(node)["status"] == "True" and node.failures == 0
    assert node.queue.added == ["liqo-foreign"] * 3


def test_a_throttled_check_is_no_verdict() -> None:
    node = controller()
    node.observe(403, 2)
    node.observe(THROTTLED, 2)
    assert node.healthy and node.failures == 1, "a 429 does not count toward the threshold"
    node.observe(403, 2)
    assert (ready(node)["status"], ready(node)["reason"]) == ("False", FORBIDDEN_REASON)
    node.observe(THROTTLED, 2)
    assert not node.healthy, "nor does it pass"


def test_how_long_the_cluster_has_been_unreachable_counts_from_the_node_turning_not_ready() -> None:
    """What an abandon (removal.py, abandonUnreachableAfter) waits on: not the first failed check,
    the Node's NotReady; a success clears it."""
    node = controller()
    node.observe(None, 2)
    assert node.unreachable_for() is None, "one failure of two: still Ready"
    node.observe(None, 2)
    first = node.unreachable_for()
    assert first is not None and first >= 0
    node.observe(500, 2)  # another failure keeps the clock
    assert node.unreachable_for() >= first
    node.observe(200, 2)
    assert node.unreachable_for() is None


def test_the_peering_is_told_once_when_its_node_turns_ready_again_and_not_on_failures_below_the_threshold() -> None:
    """What lets the reflection retry at once what failed during an outage (kubelet.py: retry_failed)."""
    node = controller()
    told: list[str] = []
    node.on_recovered.append(lambda: told.append("recovered"))
    node.observe(None, 2)
    node.observe(200, 2)
    assert told == [], "a failure below the threshold never turned the node NotReady"
    node.observe(None, 2)
    node.observe(None, 2)
    node.observe(None, 2)
    assert told == [] and not node.healthy
    node.observe(200, 2)
    node.observe(200, 2)
    assert told == ["recovered"]
