"""Admission webhooks: pod mutation per offloading strategy and NamespaceOffloading validation,
served over TLS by the controller-manager."""

from runtime.webhooks.certificates import ServingCertificate, issue_with
from runtime.webhooks.certificates import issue as issue_certificate
from runtime.webhooks.podmutation import mutate_pod, not_ready_reason
from runtime.webhooks.serving import WebhookServer, admit_offloading, admit_pod
from runtime.webhooks.sharedca import shared_ca
from runtime.webhooks.validation import validate_offloading

__all__ = [
    "ServingCertificate",
    "WebhookServer",
    "admit_offloading",
    "admit_pod",
    "issue_certificate",
    "issue_with",
    "mutate_pod",
    "not_ready_reason",
    "shared_ca",
    "validate_offloading",
]
