"""AdmissionReview answers of the webhooks (the real API server round trip is in tests/e2e)."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from runtime.api import names
from runtime.webhooks import WebhookServer, admit_offloading, admit_pod

READY: dict[str, Any] = {
    "metadata": {"name": "offloading", "namespace": "apps", "generation": 2},
    "spec": {"podOffloadingStrategy": "Remote"},
    "status": {"observedGeneration": 2, "offloadingPhase": "Ready"},
}


def request(obj: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"uid": "u-1", "namespace": "apps", "operation": "CREATE", "object": obj, **extra}


def pod() -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}


def test_a_pod_gets_a_json_patch_of_the_changed_spec_fields() -> None:
    answer = admit_pod(request(pod()), {"apps": READY}.get)["response"]
    assert answer["uid"] == "u-1" and answer["allowed"] is True and answer["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(answer["patch"]))
    assert {op["path"] for op in ops} == {"/spec/tolerations", "/spec/affinity"}
    assert all(op["op"] == "add" for op in ops)
    toleration = ops[[op["path"] for op in ops].index("/spec/tolerations")]["value"]
    assert toleration[0]["key"] == names.VIRTUAL_NODE_TAINT_KEY


def test_a_pod_is_denied_while_the_offloading_is_missing_or_behind() -> None:
    nothing: dict[str, Any] = {}
    missing = admit_pod(request(pod()), nothing.get)["response"]
    assert missing["allowed"] is False and missing["status"]["code"] == 403
    assert "liqo-stack offload namespace apps" in missing["status"]["message"]
    behind = {**READY, "metadata": {**READY["metadata"], "generation": 3}}
    answer = admit_pod(request(pod()), {"apps": behind}.get)["response"]
    assert answer["allowed"] is False and "not ready yet" in answer["status"]["message"]


def test_a_pod_is_admitted_as_a_local_one_while_the_namespace_is_unoffloaded() -> None:
    """docs/offloading.md: unoffloading reschedules the offloaded pods locally; their replacements are not refused."""
    leaving = {**READY, "metadata": {**READY["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert admit_pod(request(pod()), {"apps": leaving}.get)["response"] == {"uid": "u-1", "allowed": True}


def test_local_strategy_allows_without_a_patch() -> None:
    local = {**READY, "spec": {"podOffloadingStrategy": "Local"}}
    answer = admit_pod(request(pod()), {"apps": local}.get)["response"]
    assert answer == {"uid": "u-1", "allowed": True}


def test_offloading_updates_are_checked_against_the_old_object_and_deletes_pass() -> None:
    old = {"metadata": {"name": "offloading"}, "spec": {"namespaceMappingStrategy": "DefaultName"}}
    new = {"metadata": {"name": "offloading"}, "spec": {"namespaceMappingStrategy": "EnforceSameName"}}
    denied = admit_offloading(request(new, operation="UPDATE", oldObject=old))["response"]
    assert denied["allowed"] is False and "namespaceMappingStrategy is immutable" in denied["status"]["message"]
    assert admit_offloading(request(new, operation="DELETE", oldObject=old))["response"]["allowed"] is True
    assert admit_offloading(request(old))["response"]["allowed"] is True


def test_the_server_times_each_review_it_answers_even_a_malformed_one() -> None:
    """`liqo_webhook_admission_seconds`: one observation per request, per path, bad ones included
    (a caller waits on those too)."""
    registry = CollectorRegistry()
    server = WebhookServer({"apps": READY}.get, "127.0.0.1", 0, ssl.create_default_context(), registry=registry)

    async def send() -> tuple[int, int]:
        async with TestClient(TestServer(server.app)) as client:
            review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request(pod())}
            good = await client.post(names.POD_MUTATION_PATH, json=review)
            bad = await client.post(names.POD_MUTATION_PATH, data=b"not json")
            return good.status, bad.status

    assert asyncio.run(send()) == (200, 400)
    timed = registry.get_sample_value("liqo_webhook_admission_seconds_count", {"path": names.POD_MUTATION_PATH})
    assert timed == 2
    within = registry.get_sample_value(
        "liqo_webhook_admission_seconds_bucket", {"path": names.POD_MUTATION_PATH, "le": "10.0"}
    )
    assert within == 2
    untouched = {"path": names.OFFLOADING_VALIDATION_PATH}
    assert registry.get_sample_value("liqo_webhook_admission_seconds_count", untouched) in (None, 0)
