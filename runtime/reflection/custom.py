"""Custom resources follow their pods (issue 39): the types opted in on the VirtualNode
(`spec.customResources`, by group, version and resource) are reflected by the generic reflector.

A type is reflected once its CRDs say how: at home (its kind; whether it has a status subresource)
and in the foreign cluster (there, Established, serving the version). Both CRDs are watched by name
(the stack lets the home identity read exactly these CRDs), so a CRD missing in the foreign
cluster is a False `CustomResourcesReflected` condition on the VirtualNode and a Warning event, not
a retry loop, and reflection starts by itself when the CRD appears; a CRD that goes stops it.

Spec (every field but status) goes home -> foreign with the ownership labels, conflict events and
drift repair of every reflected kind. Status comes back foreign -> home when the type asks for it
(`reflectStatus`) and the home CRD has a status subresource, from one foreign cluster per namespace
(`status_source`): two clusters' copies writing one home status would undo each other forever.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable, Mapping
from typing import Any

from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.types import PatchType

from runtime.api import names
from runtime.api.crds import crd_kind, reflection_problem
from runtime.api.resources import VirtualNodeResource
from runtime.api.virtualnode import CustomResourceReflection
from runtime.forging.custom import CRD_MISSING_REASON, custom_content, has_status_subresource, reflected_condition
from runtime.forging.kinds import ReflectedKind
from runtime.forging.objects import is_owned
from runtime.kube import Informer, unless_gone
from runtime.kube.supervising import stop_side_by_side
from runtime.kube.twins import Twins
from runtime.reflection.context import Peering
from runtime.reflection.reflector import ReflectionMetrics, Reflector

log = logging.getLogger(__name__)


def without_schemas(crd: Any) -> Any:
    """Informer trim: a CRD as kept here, without its schemas (often most of its size), read by nobody."""
    for version in crd.spec.versions or []:
        version.schema = None
    return crd


class CustomReflector(Reflector):
    """The generic reflector for one custom type, plus its status back home."""

    def __init__(
        self,
        entry: CustomResourceReflection,
        kind: str,
        peering: Peering,
        *,
        status_subresource: bool,
        status_source: Callable[[str], bool],
        reflection_metrics: ReflectionMetrics | None = None,
    ) -> None:
        resource = create_namespaced_resource(entry.group, entry.version, kind, entry.resource)
        super().__init__(
            ReflectedKind(entry.crd_name, resource, custom_content), peering, reflection_metrics=reflection_metrics
        )
        self.identity = (entry.version, kind, status_subresource)  # what a new reflector is needed for
        self.status_subresource = status_subresource
        self.status_source = status_source
        self.status_field_manager = f"liqo-reflection-{entry.crd_name}-status"

    def reflects_status(self) -> bool:
        spec = self.peering.node_spec()
        entry = spec.custom_resource(self.kind.name) if spec is not None else None
        return entry is not None and entry.reflect_status and self.status_subresource

    async def _reconcile(self, key: str) -> None:
        await super()._reconcile(key)
        if self.reflects_status():
            await self._status_back(key)

    async def _status_back(self, key: str) -> None:
        """The copy's status onto the home object, when this cluster is the namespace's status source."""
        namespace, _, name = key.partition("/")
        scope = self.synced_scope(namespace)
        settings = self.settings()
        if scope is None or settings.workers == 0 or not self.status_source(namespace):
            return
        home_obj, remote_obj = scope["home"].store.get(key), scope["foreign"].store.get(f"{scope.twin}/{name}")
        if home_obj is None or remote_obj is None:
            return
        home, remote = home_obj.to_dict(), remote_obj.to_dict()
        peering = self.peering
        if (
            home["metadata"].get("deletionTimestamp")
            or not is_owned(remote, peering.home_cluster_id, peering.foreign_cluster_id)
            or not self._allowed(home, settings)
        ):
            return
        status = remote.get("status")
        if status is None or status == home.get("status"):
            return  # nothing reported there yet (the home status stays), or already home
        body = {
            "apiVersion": home["apiVersion"],
            "kind": home["kind"],
            "metadata": {"name": name, "namespace": namespace},
            "status": status,
        }
        self._count_write("status")
        with unless_gone():
            await peering.home.patch(
                self.kind.resource.Status,
                name,
                body,
                namespace=namespace,
                patch_type=PatchType.APPLY,
                field_manager=self.status_field_manager,
                force=True,
            )


class CustomResources:
    """The twin member that keeps one `CustomReflector` per opted-in type whose CRDs allow it, and
    says on the VirtualNode which cannot be reflected and why."""

    def __init__(
        self,
        peering: Peering,
        *,
        status_source: Callable[[str], bool],
        reflection_metrics: ReflectionMetrics | None = None,
    ) -> None:
        self.peering = peering
        self.status_source = status_source
        self.stats = reflection_metrics
        self.crds: dict[str, tuple[Informer, Informer]] = {}  # CRD name -> (home, foreign) informers by name
        self._crd_tasks: dict[str, list[asyncio.Task[None]]] = {}
        self.reflectors: dict[str, CustomReflector] = {}  # CRD name -> its reflector, while it can run
        self.problems: dict[str, str] = {}  # CRD name -> why it is not reflected (known CRDs only)
        self.twins: Twins = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._applied: dict[str, Any] = {}  # per type, the settings its reflector last reconciled with
        self._status_asked: dict[str, bool] = {}  # per type, reflectStatus as the condition last told it

    # -- what the manager asks --------------------------------------------------------------------
    def entries(self) -> dict[str, CustomResourceReflection]:
        spec = self.peering.node_spec()
        return {entry.crd_name: entry for entry in (spec.custom_resources if spec is not None else [])}

    # -- TwinMember ----------------------------------------------------------------------------------
    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())
        self._changed.set()

    def follow(self, twins: Twins) -> None:
        self.twins = dict(twins)
        for reflector in self.reflectors.values():
            reflector.follow(self.twins)

    def on_settings(self) -> None:
        """The VirtualNode changed: types opted in or out are taken up by the loop; workers at once,
        and a type whose policy or status setting changed reconciles every object."""
        entries = self.entries()
        for name, reflector in self.reflectors.items():
            reflector.on_settings()
            chosen = (reflector.settings(), reflector.reflects_status())
            if self._applied.get(name) != chosen:
                self._applied[name] = chosen
                reflector.requeue_all()
        status_asked = {name: entry.reflect_status for name, entry in entries.items()}
        if (
            set(entries) != set(self.crds)
            or any(
                entries[name].version != reflector.identity[0]
                for name, reflector in self.reflectors.items()
                if name in entries
            )
            or status_asked != self._status_asked  # the condition tells where reflectStatus cannot work
        ):
            self._status_asked = status_asked
            self._changed.set()

    def retry_failed(self) -> int:
        return sum(reflector.retry_failed() for reflector in self.reflectors.values())

    def status_source_changed(self, namespace: str) -> None:
        """The namespace's offloading changed, maybe which cluster gives its custom objects their
        status: the types whose status comes back look again."""
        for reflector in self.reflectors.values():
            scope = reflector.scopes.get(namespace)
            if scope is not None and reflector.reflects_status():
                reflector.requeue(scope)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)  # a cancellation of this stop still ends it
        for name in list(self.crds):
            self._unwatch(name)
        reflectors = list(self.reflectors.values())
        self.reflectors.clear()
        await stop_side_by_side(reflector.stop() for reflector in reflectors)

    # -- the loop: woken by CRD events and VirtualNode changes (and a failed update, retried) ----------
    async def _run(self) -> None:
        failures = 0
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                await self._update()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception:  # an API server refusing or away: the same update again, later
                failures += 1
                delay = min(2.0**failures, 30.0)
                log.exception(
                    "custom resources of %s: update failed, again in %.0fs", self.peering.foreign_cluster_id, delay
                )
                await asyncio.sleep(delay)
                self._changed.set()

    def _watch(self, name: str) -> None:
        def informer(client: Any) -> Informer:
            found = Informer(client, CustomResourceDefinition, fields={"metadata.name": name}, trim=without_schemas)
            found.add_handler(lambda _: self._changed.set())
            return found

        home, foreign = informer(self.peering.home), informer(self.peering.foreign)
        self.crds[name] = (home, foreign)
        self._crd_tasks[name] = [asyncio.create_task(i.run()) for i in (home, foreign)]
        for watched in (home, foreign):  # an empty list dispatches nothing: its sync must wake us too
            self._crd_tasks[name].append(asyncio.create_task(self._wake_when_synced(watched)))

    async def _wake_when_synced(self, informer: Informer) -> None:
        await informer.synced.wait()
        self._changed.set()

    def _unwatch(self, name: str) -> None:
        self.crds.pop(name, None)
        for task in self._crd_tasks.pop(name, []):
            task.cancel()

    async def _update(self) -> None:
        entries = self.entries()
        for name in set(self.crds) - set(entries):  # opted out: its copies stay, as with workers 0
            self._unwatch(name)
            self.problems.pop(name, None)
            if name in self.reflectors:
                await self.reflectors.pop(name).stop()
        for name in set(entries) - set(self.crds):
            self._watch(name)
        for name, entry in entries.items():
            home, foreign = self.crds[name]
            if not (home.synced.is_set() and foreign.synced.is_set()):
                continue  # not known yet: decided once both are
            await self._decide(entry, self._crd(home, name), self._crd(foreign, name))
        await self._report(entries)

    @staticmethod
    def _crd(informer: Informer, name: str) -> dict[str, Any] | None:
        found = informer.store.get(name)
        return found.to_dict() if found is not None else None

    async def _decide(
        self, entry: CustomResourceReflection, home: dict[str, Any] | None, foreign: dict[str, Any] | None
    ) -> None:
        name, there = entry.crd_name, self.peering.foreign_cluster_id
        problem = None
        if (found := reflection_problem(home, foreign, entry.version)) is not None:
            side, why = found
            problem = f"{'home' if side == 'home' else there}: {why}"
        running = self.reflectors.get(name)
        if problem is not None or home is None:
            self.problems[name] = problem or ""
            if running is not None:
                await self.reflectors.pop(name).stop()
            return
        self.problems.pop(name, None)
        identity = (entry.version, crd_kind(home), has_status_subresource(home, entry.version))
        if running is not None and running.identity == identity:
            return
        if running is not None:
            await self.reflectors.pop(name).stop()
        reflector = CustomReflector(
            entry,
            identity[1],
            self.peering,
            status_subresource=identity[2],
            status_source=self.status_source,
            reflection_metrics=self.stats,
        )
        self.reflectors[name] = reflector
        self._applied[name] = (reflector.settings(), reflector.reflects_status())
        await reflector.start()
        reflector.follow(self.twins)
        log.info("reflecting %s %s into %s", name, entry.version, there)

    # -- the VirtualNode's condition, and an event when a CRD is missing ------------------------------
    async def _report(self, entries: Mapping[str, CustomResourceReflection]) -> None:
        node = self.peering.virtual_node()
        if node is None:
            return
        known = {name for name in entries if name in self.reflectors or name in self.problems}
        conditions = list((node.get("status") or {}).get("conditions") or [])
        ours = next((c for c in conditions if c.get("type") == names.CUSTOM_RESOURCES_REFLECTED_CONDITION), None)
        if entries and known != set(entries):
            return  # some CRDs not known yet: nothing to say
        no_status = [name for name, reflector in self.reflectors.items() if not reflector.status_subresource]
        wanted = reflected_condition(entries, self.problems, no_status)
        if wanted is not None and wanted["status"] == "False":
            await self.peering.warnings.warn(node, CRD_MISSING_REASON, wanted["message"])
        if ours is None and wanted is None:
            return
        if ours is not None and wanted is not None and all(ours.get(k) == v for k, v in wanted.items()):
            return
        others = [c for c in conditions if c.get("type") != names.CUSTOM_RESOURCES_REFLECTED_CONDITION]
        if wanted is not None:
            same_status = ours is not None and ours.get("status") == wanted["status"]
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            wanted["lastTransitionTime"] = ours.get("lastTransitionTime") if same_status and ours else now
            others.append(wanted)
        meta = node["metadata"]
        with unless_gone():  # a merge patch replaces the list: every other condition is sent back as it was
            await self.peering.home.patch(
                VirtualNodeResource.Status,
                meta["name"],
                {"status": {"conditions": others}},
                namespace=meta["namespace"],
                patch_type=PatchType.MERGE,
            )
