"""What a new pod-security floor would refuse among the pods running now (`pulumi preview` says it).

The foreign API server decides, not a copy of its rules: a server-side dry run of the relabel of each
twin namespace whose level changes, whose Pod Security warnings name the running pods the new level
forbids (they keep running: admission checks creates). Nothing is changed.
"""

from __future__ import annotations

from lightkube import ApiError, KubeConfig
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType

from liqo_stack import kube
from runtime.api import names


def refused_by_new_floor(kubeconfig: KubeConfig, home_id: str, level: str) -> dict[str, list[str]]:
    """Per twin namespace of `home_id` in that cluster whose floor is not `level` yet: the API server's
    warnings about its running pods at `level` (none: every pod there meets it)."""
    warnings: list[str] = []
    client = kube.client(kubeconfig, warnings=warnings)
    refused: dict[str, list[str]] = {}
    for twin in client.list(Namespace, labels={names.ORIGIN_LABEL: home_id}):
        labels = (twin.metadata.labels if twin.metadata else None) or {}
        if labels.get(names.POD_SECURITY_ENFORCE_LABEL) == level or twin.metadata is None:
            continue
        warnings.clear()
        patch = {"metadata": {"labels": dict.fromkeys(names.POD_SECURITY_LABELS, level)}}
        try:
            client.patch(Namespace, str(twin.metadata.name), patch, patch_type=PatchType.MERGE, dry_run=True)
        except ApiError as err:
            refused[str(twin.metadata.name)] = [f"the dry run was refused: {err.status.message}"]
            continue
        if warnings:
            refused[str(twin.metadata.name)] = list(warnings)
    return refused
