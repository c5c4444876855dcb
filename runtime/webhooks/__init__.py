"""Admission webhooks: pod mutation per offloading strategy (its constraints forged in
runtime.forging.pods) and NamespaceOffloading validation, served over TLS by the controller-manager."""

from runtime.webhooks.serving import WebhookServer, admit_offloading, admit_pod
from runtime.webhooks.sharedca import shared_ca
from runtime.webhooks.validation import validate_offloading

__all__ = [
    "WebhookServer",
    "admit_offloading",
    "admit_pod",
    "shared_ca",
    "validate_offloading",
]
