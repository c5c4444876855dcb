"""The token Secrets of offloaded pods in their twin namespaces (what they hold: runtime.forging.tokens).

Per home pod on the virtual node (its key): its Secret is written when missing or due, renewed at
80% of the token's life, and deleted with the home pod. The reflector decides from synced stores
and the Secret's annotations only, so a restart renews nothing that is still fresh.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Any

from lightkube import ApiError
from lightkube.resources.core_v1 import ConfigMap, Secret, ServiceAccount

from runtime.api import names
from runtime.api.virtualnode import ApiServerAddress
from runtime.forging.kinds import without_pod_token_values
from runtime.forging.objects import is_owned
from runtime.forging.tokens import (
    CA_KEY,
    ROOT_CA_CONFIGMAP,
    parse_stamp,
    refresh_at,
    renewal_due,
    service_account_of,
    token_projections,
    token_secret,
    tokens_wanted,
)
from runtime.kube import Event, Informer, ObjectSource, unless_gone
from runtime.kube.twins import TwinFollower, TwinScope, Watched
from runtime.reflection.context import Peering

log = logging.getLogger(__name__)

FIELD_MANAGER = "liqo-reflection-token"


class TokenReflector(TwinFollower):
    """Per home pod on the virtual node (its key), the token Secret in the pod's twin namespace."""

    def __init__(
        self,
        peering: Peering,
        pods: ObjectSource,
        *,
        # as many as the pod offloader's: a remote pod starts only once its token Secret is there
        workers: int = 16,
        home_config_map: Callable[[str, str], dict[str, Any] | None] = lambda namespace, name: None,
    ) -> None:
        """`pods`: the home pods on the virtual node (the pod offloader's informer);
        `home_config_map`: (namespace, name) -> a home ConfigMap an informer already holds, if any."""
        super().__init__("reflection-token", workers=workers, metrics=peering.metrics)
        self.peering = peering
        self.pods = pods
        self.home_config_map = home_config_map
        pods.add_handler(self._on_pod)
        self._support = self.support()

    def _on_pod(self, event: Event) -> None:
        # What decides a pod's Secret (its UID, ServiceAccount and projected volumes) never changes on a
        # live pod: its arrival, its deletion and the start of it matter, not its status updates (the
        # most of its events, each of which cost a reconcile that found nothing to do).
        if event.type != "MODIFIED" or event.obj.metadata.deletionTimestamp:
            self.queue.add(event.key)

    def support(self) -> tuple[bool, ApiServerAddress | None] | None:
        spec = self.peering.node_spec()
        return (spec.api_server_token_support, spec.home_api_server) if spec else None

    def on_settings(self) -> None:
        """apiServerTokenSupport changed on the VirtualNode: every pod's Secret is decided again."""
        if (support := self.support()) != self._support:
            self._support = support
            for key in self.pods.store:
                self.queue.add(key)

    def open_scope(self, namespace: str, twin: str) -> dict[str, Watched]:
        secrets = Informer(
            self.peering.foreign,
            Secret,
            namespace=twin,
            labels={names.SERVICE_ACCOUNT_TOKEN_LABEL: "true"},
            trim=without_pod_token_values,  # renewal_due reads the keys only
            packed=True,
        )
        return {"secrets": secrets}

    def on_event(self, scope: TwinScope, informer: str, event: Event) -> None:
        pod = ((event.obj.metadata.annotations or {}) if event.obj is not None else {}).get(names.TOKEN_POD_ANNOTATION)
        if pod:
            self.queue.add(f"{scope.namespace}/{pod}")

    def requeue(self, scope: TwinScope) -> None:
        for key in self.pods.store:
            if key.startswith(f"{scope.namespace}/"):
                self.queue.add(key)
        # Secrets of pods gone while nobody watched (a restart): their keys come from the Secrets
        for secret in scope["secrets"].store.values():
            pod = (secret.metadata.annotations or {}).get(names.TOKEN_POD_ANNOTATION)
            if pod:
                self.queue.add(f"{scope.namespace}/{pod}")

    async def start(self) -> None:
        self._support = self.support()
        await super().start()

    async def reconcile(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        scope = self.synced_scope(namespace)
        if scope is None:
            return  # decided once the twin's Secrets are known: their sync requeues the namespace
        peering = self.peering
        twin, secrets = scope.twin, scope["secrets"]
        pod_obj = self.pods.store.get(key)
        pod = pod_obj.to_dict() if pod_obj is not None else None
        secret_name = names.token_secret_name(name)
        remote_obj = secrets.store.get(f"{twin}/{secret_name}")
        remote = remote_obj.to_dict() if remote_obj is not None else None
        ours = remote is not None and is_owned(remote, peering.home_cluster_id, peering.foreign_cluster_id)
        if not tokens_wanted(pod, peering.node_spec()) or pod is None:
            if remote is not None and ours and not (remote.get("metadata") or {}).get("deletionTimestamp"):
                with unless_gone():
                    await peering.foreign.delete(Secret, secret_name, namespace=twin)
            return
        if remote is not None and not ours:
            await self._conflict(pod, twin, secret_name)
            return
        wait = renewal_due(pod, remote, datetime.datetime.now(datetime.UTC))
        if wait > 0:
            self.queue.add_after(key, wait + 1)
            return
        desired, renew = await self._mint(pod, twin)
        body: Any = Secret.from_dict(desired)
        try:
            if remote is None:
                await peering.foreign.create(body)  # never over a Secret of that name that is not ours
            else:
                await peering.foreign.apply(body, field_manager=FIELD_MANAGER, force=True)
        except ApiError as err:
            if err.status.code == 409 and remote is None:
                # the store shows no Secret of that name: ours not shown yet (its event brings the
                # pod back), or another's in the way
                with unless_gone():
                    existing = await peering.foreign.get(Secret, secret_name, namespace=twin)
                    if not is_owned(existing.to_dict(), peering.home_cluster_id, peering.foreign_cluster_id):
                        await self._conflict(pod, twin, secret_name)
                return
            raise
        if renew is not None:
            self.queue.add_after(key, max(1.0, (renew - datetime.datetime.now(datetime.UTC)).total_seconds() + 1))

    async def _conflict(self, pod: dict[str, Any], twin: str, secret_name: str) -> None:
        consequence = "the pod's ServiceAccount token is not reflected there"
        home = {"apiVersion": "v1", "kind": "Pod", **pod}
        await self.peering.conflict(home, "ReflectionConflict", f"Secret {twin}/{secret_name}", consequence)

    async def _mint(self, pod: dict[str, Any], twin: str) -> tuple[dict[str, Any], datetime.datetime | None]:
        """New tokens from the home API server, bound to the home pod; the Secret and when to renew it."""
        meta = pod["metadata"]
        namespace, account = meta["namespace"], service_account_of(pod)
        tokens: dict[str, str] = {}
        renew: datetime.datetime | None = None
        for projection in token_projections(pod):
            request: Any = ServiceAccount.Token.from_dict(
                {
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenRequest",
                    "metadata": {"name": account, "namespace": namespace},
                    "spec": {
                        "audiences": [projection.audience] if projection.audience else [],
                        "expirationSeconds": projection.expiration_seconds,
                        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
                    },
                }
            )
            issued = datetime.datetime.now(datetime.UTC)
            granted: Any = await self.peering.home.create(request, name=account, namespace=namespace)
            tokens[projection.key] = granted.status.token
            expires = granted.status.expirationTimestamp
            if isinstance(expires, str):
                expires = parse_stamp(expires)
            if expires is None:
                expires = issued + datetime.timedelta(seconds=projection.expiration_seconds)
            due = refresh_at(issued, expires.astimezone(datetime.UTC))
            renew = due if renew is None else min(renew, due)
        ca = await self._root_ca(namespace)
        secret = token_secret(
            pod,
            twin=twin,
            tokens=tokens,
            ca=ca,
            renew_at=renew or datetime.datetime.now(datetime.UTC),
            home_cluster_id=self.peering.home_cluster_id,
            foreign_cluster_id=self.peering.foreign_cluster_id,
        )
        return secret, renew

    async def _root_ca(self, namespace: str) -> str | None:
        """The namespace's root CA: from the ConfigMap reflection already watches (a read per pod
        saved), else from the API server."""
        known = self.home_config_map(namespace, ROOT_CA_CONFIGMAP)
        if known is not None:
            return (known.get("data") or {}).get(CA_KEY)
        with unless_gone():
            root: Any = await self.peering.home.get(ConfigMap, ROOT_CA_CONFIGMAP, namespace=namespace)
            return (root.data or {}).get(CA_KEY)
        return None
