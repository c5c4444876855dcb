"""Keeps the caBundle of liqo's webhook configurations equal to the CA of the running webhook server.

The stack declares the configurations without a caBundle; the controller-manager issues its own
serving certificate at start and writes its CA here, and again whenever something (a new
`pulumi up`) drops or changes it. Only the caBundle is written, with a JSON patch.
"""

from __future__ import annotations

import base64
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.admissionregistration_v1 import (
    MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
)
from lightkube.types import PatchType

from runtime.api import names
from runtime.kube import Event, Informer, WorkQueue
from runtime.kube.controlling import run_controller
from runtime.kube.informing import Handler

OURS: dict[type[Any], str] = {
    MutatingWebhookConfiguration: names.POD_MUTATING_WEBHOOK_CONFIGURATION,
    ValidatingWebhookConfiguration: names.OFFLOADING_VALIDATING_WEBHOOK_CONFIGURATION,
}


class CaBundleController:
    def __init__(self, client: AsyncClient, ca_pem: bytes) -> None:
        self.client = client
        self.ca_bundle = base64.b64encode(ca_pem).decode()
        self.informers = {kind: Informer(client, kind) for kind in OURS}
        self.queue = WorkQueue(self.reconcile, workers=1, name="webhook-ca-bundle")
        for kind, informer in self.informers.items():
            informer.add_handler(self._handler_for(OURS[kind]))

    def _handler_for(self, name: str) -> Handler:
        def handle(event: Event) -> None:
            if event.key == name:
                self.queue.add(name)

        return handle

    async def run(self) -> None:
        await run_controller(list(self.informers.values()), self.queue)

    def synced(self) -> bool:
        """Every configuration that exists carries our CA (the API server can call the webhooks)."""
        return all(self._stale(kind) == [] for kind in OURS)

    def _stale(self, kind: type[Any]) -> list[int]:
        current = self.informers[kind].store.get(OURS[kind])
        webhooks = (current.webhooks if current is not None else None) or []
        return [i for i, hook in enumerate(webhooks) if hook.clientConfig.caBundle != self.ca_bundle]

    async def reconcile(self, name: str) -> None:
        for kind, ours in OURS.items():
            if ours != name:
                continue
            current = self.informers[kind].store[name]
            patch = []
            for index in self._stale(kind):
                # `test` first: the patch fails, rather than lands on another webhook, if the list moved
                patch.append({"op": "test", "path": f"/webhooks/{index}/name", "value": current.webhooks[index].name})
                patch.append({"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": self.ca_bundle})
            if patch:
                await self.client.patch(kind, name, patch, patch_type=PatchType.JSON)
