"""Objects the stack would take over: those it declares for a home in a foreign cluster (its tenant
namespace and identity) that exist there and that liqo-stack did not create.

pulumi-kubernetes creates with server-side apply, which is an upsert: the create of an object that
exists adopts it without a word (and with it whatever it holds: a namespace another home's agent made
as its twin, with that home's RoleBinding in it). So the program reads those objects before it
registers any resource, at `pulumi preview` and at `pulumi up` alike, and fails naming each one that
is not its own. It reads with the kubeconfig of the stack config; a program that passes its own
provider for the cluster is not checked (it says so). What is between the read and the create
(seconds, in an `up`) is not covered: the foreign agent never adopts a namespace either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx2
import yaml
from lightkube import ApiError, Client, KubeConfig
from lightkube.resources.core_v1 import Namespace, ServiceAccount

from liqo_stack import kube
from runtime.api import names


@dataclass(frozen=True)
class Declared:
    kind: Any
    name: str
    namespace: str | None = None

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind.__name__} {where}{self.name}"


def tenant_objects(home_id: str) -> list[Declared]:
    """What the stack declares for a home, by a name known beforehand, that holds what the home may reach:
    its tenant namespace and its identity (liqo_stack/declaring/components/tenant.py). Not the identity's
    token Secret: its name is drawn at random when it is made (`<prefix>-<8 hex>`), so no object waits
    under it."""
    tenant, identity = names.tenant_namespace(home_id), names.home_identity_name(home_id)
    return [Declared(Namespace, tenant), Declared(ServiceAccount, identity, tenant)]


def not_ours(obj: Declared, labels: Mapping[str, str], home_id: str) -> str | None:
    """Why the existing `obj`, with `labels`, is not liqo-stack's own for `home_id` (None: it is)."""
    origin = labels.get(names.ORIGIN_LABEL)
    if origin is not None or names.DESTINATION_LABEL in labels:
        return f"it carries twin labels ({names.ORIGIN_LABEL}={origin}): a foreign agent made it for a home"
    manager = labels.get(names.MANAGED_BY_LABEL)
    if manager != names.MANAGED_BY:
        said = f"{names.MANAGED_BY_LABEL}={manager}" if manager else f"no {names.MANAGED_BY_LABEL} label"
        return f"it carries {said}: liqo-stack did not create it"
    tenant_of = labels.get(names.TENANT_HOME_LABEL)
    if obj.kind is Namespace and tenant_of != home_id:
        return f"its label {names.TENANT_HOME_LABEL} is {tenant_of or 'absent'}, not {home_id}"
    return None


def taken(client: Client, home_ids: Iterable[str]) -> list[str]:
    """Each object the stack would declare for these homes that exists and is not its own, and why."""
    found = []
    for home_id in home_ids:
        for obj in tenant_objects(home_id):
            existing = kube.get_or_none(client, obj.kind, obj.name, obj.namespace)
            if existing is None or existing.metadata is None:
                continue
            why = not_ours(obj, existing.metadata.labels or {}, home_id)
            if why is not None:
                found.append(f"{obj} exists and is not liqo-stack's ({why})")
                if obj.kind is Namespace:
                    break  # what is in a namespace that is not ours is not ours either
    return found


def check(kubeconfig_text: str, cluster_id: str, home_ids: Iterable[str], setting: str) -> str | None:
    """None when nothing the stack declares for these homes in that cluster (read with `kubeconfig_text`)
    would take over an object; else what to tell the user, naming `setting` and each object."""
    try:
        client = kube.client(KubeConfig.from_dict(yaml.safe_load(kubeconfig_text)))
        found = taken(client, home_ids)
    except (ApiError, httpx2.HTTPError, OSError, ValueError) as err:
        return (
            f"{setting}: {cluster_id} could not be read to check that the stack takes over no object there "
            f"({type(err).__name__}: {err}); nothing was changed"
        )
    if not found:
        return None
    return (
        f"{setting}: the stack would take over objects in {cluster_id} that it did not create:\n  - "
        + "\n  - ".join(found)
        + f"\nNothing was changed. Delete them in {cluster_id} if they are not wanted, or hand them over (the label "
        f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY}, and no {names.ORIGIN_LABEL} or {names.DESTINATION_LABEL} "
        "label), then run again."
    )
