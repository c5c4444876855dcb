"""Foreign agent, namespace side: turns a home cluster's NamespaceMap into twin namespaces.

Runs in the foreign cluster with the agent's own identity. For each requested twin it creates
the namespace (labelled with the home cluster it serves) and binds the home identity to the
`liqo-home-in-twin-namespace` role there, and nowhere else. Before it creates one it checks the
name is that home's to take (runtime/api/twinnames.py: its DefaultName, or a name the foreign side
allows it in its tenant namespace's annotation; never a reserved name or another served home's
DefaultName space), whatever the admission of the map let through (an older API server, a map
written before the policy). A namespace of that name that was not created for this home cluster
is never adopted, changed or deleted: the mapping fails with a message saying why. Twins no longer
requested (or whose NamespaceMap is gone) are deleted, only while they are still this agent's twin
of that home (their labels, read again just before, and unchanged up to the delete): a twin an
admin or a stack has claimed since is left, and only the home's RoleBinding there goes. The agent
deletes the ShadowPods and pods of a twin it deletes (one that has any) itself, at once, rather than
leave them to the namespace controller, which begins 5 s later and takes a second pass for pods
still terminating. Their mapping stays in the status as Terminating until the namespace is gone.
State lives in the API server alone.

Each twin carries the pod-security floor the foreign side declared for its home: the Pod Security
Admission labels of the home's tenant namespace (`baseline` for each one it lacks), so this API
server itself refuses a pod the floor forbids, whoever creates it. A changed floor relabels the
twins; the pods running there keep running (admission checks creates).

Each twin also gets a ResourceQuota of object counts and storage (names.TWIN_OBJECTS_QUOTA): the
defaults, with what the home's Quota says in `objects` over them, so the API server itself refuses
what a home would keep there beyond them. It is the agent's (the home identity may not touch it), and
it follows a change of the Quota.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod, ResourceQuota
from lightkube.resources.rbac_authorization_v1 import RoleBinding
from lightkube.types import PatchType

from runtime.api import names, twinnames
from runtime.api.namespacemap import MappingPhase
from runtime.api.quota import QuotaSpec, twin_object_limits, twin_object_quota
from runtime.api.resources import NamespaceMapResource, QuotaResource, ShadowPodResource
from runtime.kube import Event, Informer, WorkQueue, unless_gone
from runtime.kube.client import delete_unchanged
from runtime.kube.controlling import run_controller

log = logging.getLogger(__name__)

FIELD_MANAGER = "liqo-foreign-agent"
TWIN_ROLE = "liqo-home-in-twin-namespace"
HOME_BINDING = "liqo-home"


def twin_labels(home_id: str, foreign_id: str) -> dict[str, str]:
    return {
        names.ORIGIN_LABEL: home_id,
        names.DESTINATION_LABEL: foreign_id,
        names.MANAGED_BY_LABEL: names.MANAGED_BY,
    }


def is_twin_of(labels: dict[str, str], home_id: str, foreign_id: str) -> bool:
    """Still the twin this cluster's agent made for that home: its labels as the agent wrote them
    (twin_labels), and none a stack's object carries (a component, a tenant's home)."""
    return (
        labels.get(names.ORIGIN_LABEL) == home_id  # first: what tells most namespaces apart, at once
        and labels.get(names.DESTINATION_LABEL) == foreign_id
        and labels.get(names.MANAGED_BY_LABEL) == names.MANAGED_BY
        and names.COMPONENT_LABEL not in labels
        and names.TENANT_HOME_LABEL not in labels
    )


def twin_floor(tenant_labels: dict[str, str] | None) -> dict[str, str]:
    """The Pod Security labels of a home's twins: its tenant namespace's, `baseline` where it has none."""
    labels = tenant_labels or {}
    return {label: labels.get(label) or names.DEFAULT_POD_SECURITY_FLOOR for label in names.POD_SECURITY_LABELS}


def twin_holders(desired: dict[str, str], reported: dict[str, Any]) -> dict[str, str]:
    """Per requested twin, the one home namespace it serves: the one it already serves (as the
    status reports), else the first by name; any other home namespace asking for it is refused."""
    holders: dict[str, str] = {}
    for local in sorted(desired):
        twin = desired[local]
        serving = reported.get(local) or {}
        already = serving.get("remoteNamespace") == twin and serving.get("phase") == MappingPhase.ACCEPTED.value
        if twin not in holders or already:
            holders[twin] = local
    return holders


def withdrawn_until_gone(desired: dict[str, str], reported: dict[str, Any], leaving: set[str]) -> dict[str, Any]:
    """Withdrawn mappings whose twin is still there (being deleted): reported Terminating until it is
    gone, so the home side (and `liqo-stack unoffload`) waits for the twin itself, not for the request."""
    return {
        local: {"remoteNamespace": entry["remoteNamespace"], "phase": MappingPhase.TERMINATING.value}
        for local, entry in reported.items()
        if local not in desired and isinstance(entry, dict) and entry.get("remoteNamespace") in leaving
    }


class NamespaceMapController:
    def __init__(self, client: AsyncClient, cluster_id: str, *, workers: int = 2) -> None:
        self.client = client
        self.cluster_id = cluster_id
        self.maps = Informer(client, NamespaceMapResource)
        self.namespaces = Informer(client, Namespace, labels={names.MANAGED_BY_LABEL: names.MANAGED_BY})
        # each home's Quota: the object limits of its twins (an older stack installed no Quota CRD: none)
        self.quotas = Informer(client, QuotaResource, absent_ok=True)
        self.queue = WorkQueue(self.reconcile, workers=workers, name="namespacemap")
        # maps whose every twin was ensured (namespace, RoleBinding) since this process started: later
        # reconciles ask the API server only about the twins that changed, not about hundreds again
        self._checked: set[str] = set()
        self._object_limits: dict[str, dict[str, str]] = {}  # twin -> the limits its ResourceQuota was given
        self.maps.add_handler(lambda event: self.queue.add(event.key))
        self.namespaces.add_handler(self._on_namespace)
        self.quotas.add_handler(self._on_quota)

    def _on_namespace(self, event: Event) -> None:
        labels = event.obj.metadata.labels or {}
        home = labels.get(names.ORIGIN_LABEL) or labels.get(names.TENANT_HOME_LABEL)  # a twin, or a floor change
        if home:
            tenant = names.tenant_namespace(home)
            self.queue.add(f"{tenant}/{names.namespace_map_name(home)}")  # also when its map is gone

    def _on_quota(self, event: Event) -> None:
        tenant = event.key.partition("/")[0]
        home = (event.obj.metadata.labels or {}).get(names.TENANT_HOME_LABEL) or event.key.partition("/")[2]
        self.queue.add(f"{tenant}/{names.namespace_map_name(home)}")

    def object_limits(self, home_id: str) -> dict[str, str]:
        """The limits of the home's twins' ResourceQuotas: the defaults, and its Quota's `objects`."""
        quota = self.quotas.store.get(f"{names.tenant_namespace(home_id)}/{names.quota_name(home_id)}")
        spec = QuotaSpec.model_validate(quota.to_dict().get("spec") or {}) if quota is not None else None
        return twin_object_limits(spec)

    async def run(self) -> None:
        await run_controller([self.maps, self.namespaces, self.quotas], self.queue)

    async def _tenant(self, tenant: str) -> tuple[dict[str, str], dict[str, str]] | None:
        """The tenant namespace's labels and annotations (None: no such namespace)."""
        ns = self.namespaces.store.get(tenant)
        if ns is None:  # a tenant made without liqo-stack's managed-by label is not in the store
            try:
                ns = await self.client.get(Namespace, tenant)
            except ApiError as err:
                if err.status.code == 404:
                    return None
                raise
        meta = ns.metadata
        return (dict(meta.labels or {}), dict(meta.annotations or {})) if meta else ({}, {})

    def _served_homes(self) -> set[str]:
        """The homes this cluster serves: those with a tenant namespace."""
        homes = ((ns.metadata.labels or {}).get(names.TENANT_HOME_LABEL) for ns in self.namespaces.store.values())
        return {home for home in homes if home}

    async def reconcile(self, key: str) -> None:
        tenant, _, name = key.partition("/")
        tenant_labels, tenant_annotations = await self._tenant(tenant) or (None, {})
        home_id = (tenant_labels or {}).get(names.TENANT_HOME_LABEL)
        floor = twin_floor(tenant_labels)
        allowed = twinnames.parse_allowed(tenant_annotations.get(names.TWIN_NAMES_ANNOTATION))
        mapping = self.maps.store.get(key)
        if home_id is None:
            home_id = name  # tenant namespace gone: the map's name is its home cluster id
        desired: dict[str, str] = dict((mapping or {}).get("spec", {}).get("desiredMapping") or {}) if mapping else {}
        reported = ((mapping or {}).get("status") or {}).get("currentMapping") or {}
        holders = twin_holders(desired, reported)
        limits = self.object_limits(home_id)
        current: dict[str, Any] = {}
        wanted_twins = set()
        # One mapping's failure is that mapping's condition only: the others, the status and the
        # withdrawals go on.
        for local, twin in desired.items():
            wanted_twins.add(twin)
            if holders[twin] != local:
                current[local] = self._failed(
                    twin,
                    f"namespace {twin} in {self.cluster_id} is already the twin of home namespace {holders[twin]}; "
                    "two home namespaces cannot share a twin: choose another name or mapping strategy",
                )
            elif not names.is_dns_label(twin):
                current[local] = self._failed(twin, f"twin namespace name {twin!r} {names.DNS_LABEL_RULE}")
            elif (
                key in self._checked
                and self._still_accepted(home_id, local, twin, reported, floor)
                and self._object_limits.get(twin) == limits
            ):
                current[local] = reported[local]
            else:
                try:
                    current[local] = await self._ensure_twin(home_id, tenant, local, twin, floor, allowed, limits)
                except ApiError as err:  # refused by this API server (quota, policy, ...): say so, go on
                    current[local] = self._failed(
                        twin, f"{self.cluster_id} refused namespace {twin}: {err.status.message}"
                    )
        ours = set()
        for ns in list(self.namespaces.store.values()):
            labels = ns.metadata.labels or {}
            leaving = is_twin_of(labels, home_id, self.cluster_id) and ns.metadata.name not in wanted_twins
            if leaving and (ns.metadata.deletionTimestamp or await self._delete_twin(ns.metadata.name, home_id)):
                ours.add(ns.metadata.name)
        for local, entry in reported.items():  # withdrawn, and not (or no longer) ours to delete
            gone = isinstance(entry, dict) and entry.get("remoteNamespace") not in ours | wanted_twins
            if local not in desired and gone and entry.get("phase") != MappingPhase.CREATION_FAILED.value:
                await self._revoke_binding(entry["remoteNamespace"], home_id)
        current.update(withdrawn_until_gone(desired, reported, ours))
        if mapping is not None and reported != current:
            # a merge patch keeps keys it does not mention: withdrawn mappings are set to null
            patch = {"status": {"currentMapping": {**dict.fromkeys(reported), **current}}}
            await self.client.patch(
                NamespaceMapResource.Status,
                name,
                patch,
                namespace=tenant,
                patch_type=PatchType.MERGE,
                field_manager=FIELD_MANAGER,
            )
        if mapping is not None:
            self._checked.add(key)

    def _still_accepted(
        self, home_id: str, local: str, twin: str, reported: dict[str, Any], floor: dict[str, str]
    ) -> bool:
        """Reported Accepted, and its namespace (the informer's store) still ours, at the floor, and not going."""
        entry = reported.get(local)
        ns = self.namespaces.store.get(twin)
        labels = (ns.metadata.labels or {}) if ns is not None else {}
        return (
            all(labels.get(label) == level for label, level in floor.items())
            and isinstance(entry, dict)
            and entry.get("phase") == MappingPhase.ACCEPTED.value
            and entry.get("remoteNamespace") == twin
            and ns is not None
            and not ns.metadata.deletionTimestamp
            and is_twin_of(labels, home_id, self.cluster_id)
        )

    @staticmethod
    def _failed(twin: str, message: str) -> dict[str, Any]:
        return {"remoteNamespace": twin, "phase": MappingPhase.CREATION_FAILED.value, "message": message}

    async def _ensure_twin(
        self,
        home_id: str,
        tenant: str,
        local: str,
        twin: str,
        floor: dict[str, str],
        allowed: tuple[str, ...],
        limits: dict[str, str],
    ) -> dict[str, Any]:
        """A twin it made before is kept (its name was allowed then); a new one only if the name is the home's."""
        try:
            existing = await self.client.get(Namespace, twin)
        except ApiError as err:
            if err.status.code != 404:
                raise
            existing = None
        if existing is not None:
            labels = existing.metadata.labels or {} if existing.metadata else {}
            if not is_twin_of(labels, home_id, self.cluster_id):
                await self._revoke_binding(twin, home_id)  # a twin claimed since: the home's access there goes
                if labels.get(names.ORIGIN_LABEL) == home_id:
                    return self._failed(
                        twin,
                        f"namespace {twin} in {self.cluster_id} was home cluster {home_id}'s twin and has been "
                        "claimed since (its labels changed): it is left untouched, and the home's access there removed",
                    )
                return self._failed(
                    twin,
                    f"namespace {twin} already exists in {self.cluster_id} and was not created for home cluster "
                    f"{home_id}: it is left untouched; choose another namespaceMappingStrategy or name",
                )
            if existing.metadata and existing.metadata.deletionTimestamp:
                return {"remoteNamespace": twin, "phase": MappingPhase.TERMINATING.value}
            changed = {label: level for label, level in floor.items() if labels.get(label) != level}
            if changed:
                log.info("twin namespace %s: pod-security floor now %s", twin, changed)
                await self.client.patch(
                    Namespace,
                    twin,
                    {"metadata": {"labels": changed}},
                    patch_type=PatchType.MERGE,
                    field_manager=FIELD_MANAGER,
                )
        else:
            refused = twinnames.refusal(home_id, local, twin, allowed, self._served_homes())
            if refused is not None:
                return self._failed(twin, f"{self.cluster_id} refused twin namespace {twin}: {refused}")
            meta = ObjectMeta(name=twin, labels={**twin_labels(home_id, self.cluster_id), **floor})
            await self.client.create(Namespace(metadata=meta), field_manager=FIELD_MANAGER)
        await self._ensure_object_quota(home_id, twin, limits)  # before the home identity may write there
        binding = cast(
            RoleBinding,
            RoleBinding.from_dict(
                {
                    "metadata": {
                        "name": HOME_BINDING,
                        "namespace": twin,
                        "labels": twin_labels(home_id, self.cluster_id),
                    },
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": TWIN_ROLE},
                    "subjects": [
                        {"kind": "ServiceAccount", "name": names.home_identity_name(home_id), "namespace": tenant}
                    ],
                }
            ),
        )
        await self.client.apply(binding, field_manager=FIELD_MANAGER, force=True)
        return {"remoteNamespace": twin, "phase": MappingPhase.ACCEPTED.value}

    async def _ensure_object_quota(self, home_id: str, twin: str, limits: dict[str, str]) -> None:
        """The twin's ResourceQuota of objects, at `limits` (server-side apply: a limit dropped goes)."""
        quota = ResourceQuota.from_dict(twin_object_quota(twin, home_id, self.cluster_id, limits))
        await self.client.apply(cast(ResourceQuota, quota), field_manager=FIELD_MANAGER, force=True)
        if self._object_limits.get(twin) not in (None, limits):
            log.info("twin namespace %s: object limits now %s", twin, limits)
        self._object_limits[twin] = dict(limits)

    async def _delete_twin(self, twin: str, home_id: str) -> bool:
        """Delete a twin no longer requested, only while it is still this home's twin, as read now and
        unchanged up to the delete (a precondition): False when it is not (claimed, or gone)."""
        try:
            ns = await self.client.get(Namespace, twin)
        except ApiError as err:
            if err.status.code == 404:
                return False
            raise
        meta = ns.metadata
        if meta is None or not is_twin_of(dict(meta.labels or {}), home_id, self.cluster_id):
            return False
        if meta.deletionTimestamp:
            return True
        log.info("deleting twin namespace %s: no longer requested", twin)
        self._object_limits.pop(twin, None)
        try:
            await delete_unchanged(
                self.client, Namespace, twin, uid=str(meta.uid), resource_version=str(meta.resourceVersion)
            )
        except ApiError as err:
            if err.status.code == 404:
                return False
            if err.status.code == 409:  # changed since it was read: decided again on what it is now
                raise RuntimeError(
                    f"twin namespace {twin} changed while it was being deleted; checking it again"
                ) from err
            raise
        await self._delete_pods_of(twin)
        return True

    async def _delete_pods_of(self, twin: str) -> None:
        """The ShadowPods of a twin being deleted and their pods, at once (the ShadowPods first, so
        that none is recreated; the garbage collector would take the pods only later). The namespace
        controller starts on a deleted namespace only after 5 s, and when its first pass finds pods
        still terminating it looks again only 5 s later: with the pods gone before it starts, one
        pass empties the twin (about 5 s to go instead of 10)."""
        try:
            if await anext(aiter(self.client.list(ShadowPodResource, namespace=twin, chunk_size=1)), None) is None:
                return  # no pod to hurry: the twin goes in one pass as it is
            await self.client.deletecollection(ShadowPodResource, namespace=twin)
            await self.client.deletecollection(Pod, namespace=twin)
        except ApiError as err:  # the namespace controller deletes them anyway, only later
            log.warning("twin namespace %s: its pods are left to the namespace's deletion: %s", twin, err)

    async def _revoke_binding(self, twin: str, home_id: str) -> None:
        """The home's RoleBinding in a namespace that is no longer its twin goes (only the one this agent made)."""
        try:
            binding = await self.client.get(RoleBinding, HOME_BINDING, namespace=twin)
        except ApiError as err:
            if err.status.code == 404:
                return
            raise
        labels = dict((binding.metadata.labels if binding.metadata else None) or {})
        if all(labels.get(key) == value for key, value in twin_labels(home_id, self.cluster_id).items()):
            log.info("namespace %s is no longer home cluster %s's twin: removing its access there", twin, home_id)
            with unless_gone():
                await self.client.delete(RoleBinding, HOME_BINDING, namespace=twin)
