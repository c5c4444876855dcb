"""The admission webhooks over HTTPS: AdmissionReview in, allowed/denied/JSONPatch out.

- POST /mutate/pod: pods created in namespaces labelled `liqo.io/scheduling-enabled=true`; rejected
  until the namespace's offloading is ready, else constrained per its pod offloading strategy.
- POST /validate/namespaceoffloading: the seed-003 rules of runtime/webhooks/validation.py.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

import msgspec
from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram

from runtime.api import NamespaceOffloadingSpec, names
from runtime.api.namespaceoffloading import move_unfit_after
from runtime.forging.pods import mutate_pod, not_ready_reason, unoffloading
from runtime.webhooks.validation import validate_offloading

log = logging.getLogger(__name__)

# The namespace's NamespaceOffloading as a dict (from the controller's informer), or None.
OffloadingLookup = Callable[[str], Any | None]
# The stack-wide move-unfit-pods-after seconds (from the VirtualNodes), or None.
UnfitPolicyLookup = Callable[[], int | None]


JsonPatch = list[dict[str, Any]]

# Finer than the API server's admission-webhook histogram (5 ms, 25 ms, 100 ms, 500 ms, ...): the
# webhook's own share of an admission is a few milliseconds, and the 50 ms target falls between.
ADMISSION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def review_response(uid: str, *, message: str | None = None, patch: JsonPatch | None = None) -> dict[str, Any]:
    """An AdmissionReview answer: allowed unless `message` is given; `patch` is a JSONPatch."""
    response: dict[str, Any] = {"uid": uid, "allowed": message is None}
    if message is not None:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": message}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def spec_patch(before: dict[str, Any], after: dict[str, Any]) -> JsonPatch:
    """JSONPatch ops turning `before`'s spec into `after`'s, one `add` per changed top-level field
    (`add` on an existing member replaces it)."""
    old, new = before.get("spec") or {}, after.get("spec") or {}
    return [
        {"op": "add", "path": f"/spec/{field.replace('~', '~0').replace('/', '~1')}", "value": value}
        for field, value in new.items()
        if old.get(field) is not value and old.get(field) != value  # shared (not copied) is unchanged
    ]


def admit_pod(
    request: dict[str, Any], offloading_of: OffloadingLookup, stack_unfit_policy: UnfitPolicyLookup = lambda: None
) -> dict[str, Any]:
    """`stack_unfit_policy`: the stack-wide move-unfit-pods-after seconds (None: off)."""
    uid, namespace, pod = request["uid"], request["namespace"], request["object"]
    offloading = offloading_of(namespace)
    if unoffloading(offloading):
        return review_response(uid)  # docs/offloading.md: moving home, the replacements run locally
    problem = not_ready_reason(namespace, offloading)
    if problem is not None:
        return review_response(uid, message=problem)
    assert offloading is not None  # not_ready_reason says why when it is None
    spec = NamespaceOffloadingSpec.model_validate(offloading.get("spec") or {})
    policy = move_unfit_after((offloading.get("metadata") or {}).get("annotations"), stack_unfit_policy())
    mutated = mutate_pod(pod, spec.pod_offloading_strategy, spec.cluster_selector, move_unfit=policy is not None)
    return review_response(uid, patch=spec_patch(pod, mutated))


def admit_offloading(request: dict[str, Any], home_cluster_id: str = "") -> dict[str, Any]:
    if request.get("operation") == "DELETE":
        return review_response(request["uid"])
    problems = validate_offloading(
        request["object"],
        request.get("oldObject"),
        namespace=request.get("namespace") or "",
        home_cluster_id=home_cluster_id,
    )
    return review_response(request["uid"], message="; ".join(problems) if problems else None)


class WebhookServer:
    def __init__(
        self,
        offloading_of: OffloadingLookup,
        host: str,
        port: int,
        tls: ssl.SSLContext,
        *,
        home_cluster_id: str = "",
        stack_unfit_policy: UnfitPolicyLookup = lambda: None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        """`registry`: where `liqo_webhook_admission_seconds` is reported (the process's /metrics)."""
        self.offloading_of = offloading_of
        self.stack_unfit_policy = stack_unfit_policy
        self.home_cluster_id = home_cluster_id
        self.host, self.port, self.tls = host, port, tls
        self.app = web.Application()
        self.app.add_routes([web.post(names.POD_MUTATION_PATH, self._mutate_pod)])
        self.app.add_routes([web.post(names.OFFLOADING_VALIDATION_PATH, self._validate)])
        self._runner: web.AppRunner | None = None
        # The API server's own histogram times the whole call: its side too, which on a loaded
        # machine is most of it (docs/performance.md#admission). This one times ours alone.
        self.admission_seconds = Histogram(
            "liqo_webhook_admission_seconds",
            "from a webhook handler's start (the request's headers read) to its answer, the body's arrival included",
            ["path"],
            buckets=ADMISSION_BUCKETS,
            registry=registry or CollectorRegistry(),
        )

    async def _review(self, request: web.Request, decide: Callable[[dict[str, Any]], dict[str, Any]]) -> web.Response:
        started = time.perf_counter()
        try:
            return await self._answer(request, decide)
        finally:
            self.admission_seconds.labels(request.path).observe(time.perf_counter() - started)

    async def _answer(self, request: web.Request, decide: Callable[[dict[str, Any]], dict[str, Any]]) -> web.Response:
        try:
            # msgspec: half the decode time of json, on the path of every pod created in an offloaded namespace
            admission = msgspec.json.decode(await request.read())["request"]
        except (msgspec.DecodeError, KeyError, TypeError):
            admission = None
        if not isinstance(admission, dict):
            return web.json_response({"error": "expected an AdmissionReview with a request"}, status=400)
        try:
            answer = decide(admission)
        except Exception as err:  # a bug must deny with a message, never crash the server
            log.exception("webhook %s failed", request.path)
            answer = review_response(admission.get("uid", ""), message=f"liqo webhook error: {err}")
        return web.Response(body=msgspec.json.encode(answer), content_type="application/json")

    async def _mutate_pod(self, request: web.Request) -> web.Response:
        return await self._review(
            request, lambda admission: admit_pod(admission, self.offloading_of, self.stack_unfit_policy)
        )

    async def _validate(self, request: web.Request) -> web.Response:
        return await self._review(request, lambda admission: admit_offloading(admission, self.home_cluster_id))

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.tls)
        await site.start()
        log.info("webhooks on https://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
