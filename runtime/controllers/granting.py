"""Foreign agent: what each home cluster may start here, decided before a ShadowPod becomes a pod.

The foreign side never relies on the home side's checks (its scheduler, its virtual node's
capacity): before the ShadowPod controller creates a pod, `Grants.admit` holds it to its home's
Quota (runtime/api/quota.py), in the home's tenant namespace:
- cordoned: no new pod of that home starts (its running pods go on);
- limitsEnforcement Soft or Hard: the requests of the home's pods here, this one included, stay
  within the grant (the Quota's resources, or what this cluster advertises to the home when it
  names none); Hard also wants requests equal to limits;
- no Quota: Soft, within the advertisement.
It also holds each pod to the nodes the Quota lets its home use (`confine`, runtime/api/nodeaccess.py):
the pod's nodeSelector gets the home's selector, and a toleration of a taint the home may not tolerate
is refused.

Decisions are serialized per home: `admit` checks and reserves in one step, with no await between,
on the one event loop of the leading agent, so concurrent creates cannot overshoot. What a home
uses is the sum over the ShadowPods the agent admitted and that are not finished; it is rebuilt
from the ShadowPods and pods in the API server when the agent starts (`seed`). A ShadowPod refused
is tried again when the home's use goes down or its grant changes.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from lightkube import AsyncClient

from runtime.api import names
from runtime.api.nodeaccess import NodeRules
from runtime.api.quota import (
    LimitsEnforcement,
    QuotaSpec,
    Requests,
    grant_problem,
    limits_problem,
    parsed_grant,
    spec_requests,
)
from runtime.api.resources import QuotaResource, ResourceAdvertisementResource
from runtime.api.shadowpod import pod_spec_of
from runtime.kube import Informer
from runtime.kube.informing import Event

log = logging.getLogger(__name__)

TWIN_RECHECK_SECONDS = 5.0


class Grants:
    def __init__(
        self,
        client: AsyncClient,
        cluster_id: str,
        requeue: Callable[[str], None],
        twin_origin: Callable[[str], str | None],
        recheck: Callable[[str, float], None] = lambda key, seconds: None,
        quotas: Informer | None = None,
    ) -> None:
        """`requeue`: puts a ShadowPod's key back in its controller's queue (a refused one, when
        room was made); `twin_origin`: the home cluster a namespace is a twin of (None: no twin);
        `quotas`: the Quotas' informer when another controller runs it (else this one's own)."""
        self.cluster_id = cluster_id
        self.requeue = requeue
        self.recheck = recheck
        self.twin_origin = twin_origin
        # a foreign cluster an older stack installed has no Quota CRD: no Quota, as if none were declared
        self.shared_quotas = quotas is not None
        self.quotas = quotas if quotas is not None else Informer(client, QuotaResource, absent_ok=True)
        self.advertisements = Informer(client, ResourceAdvertisementResource)
        # home -> ShadowPod key -> what its pod requests: the pods this agent let start, not finished
        self._admitted: dict[str, dict[str, Requests]] = defaultdict(dict)
        self._used: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))  # home -> in all
        self._refused: dict[str, set[str]] = defaultdict(set)  # home -> keys waiting for room
        self._quotas: dict[str, tuple[str | None, QuotaSpec]] = {}  # home -> (its version, parsed)
        self._grants: dict[str, tuple[Any, dict[str, Decimal]]] = {}  # home -> (what it came from, parsed)
        self._node_rules: dict[str, tuple[QuotaSpec, NodeRules]] = {}  # home -> (the Quota parsed, its rules)
        self._seeded = False
        self.quotas.add_handler(self._on_grant_changed)
        self.advertisements.add_handler(self._on_grant_changed)

    @property
    def informers(self) -> list[Informer]:
        """The informers this object runs (the Quotas' only when they are its own)."""
        return [self.advertisements] if self.shared_quotas else [self.quotas, self.advertisements]

    def _on_grant_changed(self, event: Event) -> None:
        tenant = event.key.partition("/")[0]
        for home, _ in list(self._refused.items()):
            if names.tenant_namespace(home) == tenant:
                self._retry(home)

    def _retry(self, home: str) -> None:
        for key in self._refused.pop(home, set()):
            self.requeue(key)

    # -- what is in use --------------------------------------------------------------------------
    def seed(self, shadows: dict[str, Any], pods: dict[str, Any], unpack: Callable[[Any], Any]) -> None:
        """Once, from the synced stores: every ShadowPod whose pod exists or ran, and not finished."""
        if self._seeded:
            return
        self._seeded = True
        for key, packed in shadows.items():
            shadow = unpack(packed)
            status = shadow.get("status") or {}
            if status.get("phase") in ("Succeeded", "Failed") or shadow.metadata.deletionTimestamp:
                continue
            if key in pods or status.get("podUID"):
                self.count(key, shadow)

    def count(self, key: str, shadow: Any) -> None:
        """The ShadowPod's pod runs (or is being made): what it requests counts against its home."""
        home = origin_of(shadow)
        if home is None:
            return
        try:
            requests = spec_requests(pod_spec_of(shadow))
        except ValueError:
            requests = {"pods": Decimal(1)}
        self._uncount(home, key)
        self._admitted[home][key] = requests
        total = self._used[home]
        for resource, amount in requests.items():
            total[resource] += amount

    def _uncount(self, home: str, key: str) -> bool:
        requests = self._admitted.get(home, {}).pop(key, None)
        if requests is None:
            return False
        total = self._used[home]
        for resource, amount in requests.items():
            total[resource] -= amount
        return True

    def counted(self, key: str, shadow: Any) -> bool:
        home = origin_of(shadow)
        return home is not None and key in self._admitted.get(home, {})

    def release(self, key: str, home: str | None = None) -> None:
        """The ShadowPod is gone, finished, or its pod was not made: its requests are free again."""
        homes = [home] if home is not None else list(self._admitted)
        for each in homes:
            if self._uncount(each, key):
                self._retry(each)
        for waiting in self._refused.values():
            waiting.discard(key)

    def used(self, home: str) -> Requests:
        """What the home's admitted pods request in all (kept as they come and go: a decision among
        1,000 pods does not add them up again)."""
        return {resource: amount for resource, amount in self._used.get(home, {}).items() if amount}

    # -- the decision ----------------------------------------------------------------------------
    def quota_of(self, home: str) -> QuotaSpec:
        """The home's Quota, parsed once per version of it."""
        quota = self.quotas.store.get(f"{names.tenant_namespace(home)}/{names.quota_name(home)}")
        if quota is None:
            return QuotaSpec()
        version = quota.metadata.resourceVersion
        cached = self._quotas.get(home)
        if cached is None or cached[0] != version:
            cached = (version, QuotaSpec.model_validate(quota.to_dict().get("spec") or {}))
            self._quotas[home] = cached
        return cached[1]

    def grant_of(self, home: str, quota: QuotaSpec) -> dict[str, Decimal]:
        """The Quota's resources, else what is advertised to the home; parsed once per version."""
        if quota.resources:
            source: Any = ("quota", tuple(sorted(quota.resources.items())))
            resources: dict[str, str] = quota.resources
        else:
            advertisement = self.advertisements.store.get(f"{names.tenant_namespace(home)}/{self.cluster_id}")
            source = ("advertisement", advertisement.metadata.resourceVersion if advertisement else None)
            resources = ((advertisement.to_dict().get("spec") or {}).get("resources") or {}) if advertisement else {}
        cached = self._grants.get(home)
        if cached is None or cached[0] != source:
            cached = (source, parsed_grant(resources))
            self._grants[home] = cached
        return cached[1]

    def node_rules(self, home: str) -> NodeRules:
        """The nodes the home may use here, from its Quota (built once per version of it)."""
        quota = self.quota_of(home)
        cached = self._node_rules.get(home)
        if cached is None or cached[0] is not quota:
            cached = (quota, NodeRules.of(quota.nodes))
            self._node_rules[home] = cached
        return cached[1]

    def confine(self, key: str, shadow: Any) -> tuple[dict[str, Any], str | None]:
        """The pod spec the ShadowPod's pod gets, held to the nodes its home may use here; or why it may
        not start (tried again when the home's Quota changes)."""
        spec = pod_spec_of(shadow)
        home = origin_of(shadow)
        if home is None:
            return spec, None  # `admit` refuses it
        confined, problem = self.node_rules(home).confine(spec)
        if problem is None:
            return confined, None
        self._refused[home].add(key)
        where = f"{self.cluster_id} (Quota {names.tenant_namespace(home)}/{names.quota_name(home)})"
        return confined, f"the pod leaves the nodes home cluster {home} may use in {where}: {problem}"

    def cordons(self, shadow: Any) -> str | None:
        """Why the ShadowPod's home may start nothing here now (it is cordoned); None: it may."""
        home = origin_of(shadow)
        if home is None or not self.quota_of(home).cordoned:
            return None
        return f"home cluster {home} is cordoned in {self.cluster_id}: its pods there are not started again"

    def admit(self, key: str, shadow: Any) -> str | None:
        """Why the ShadowPod's pod may not start now (None: it may, and its requests are counted). A
        refusal for want of room is tried again when room is made; one for its namespace, when
        `TWIN_RECHECK_SECONDS` passed (a twin made since, or relabelled)."""
        home = origin_of(shadow)
        namespace = shadow.metadata.namespace
        if home is None:
            return f"the ShadowPod has no {names.ORIGIN_LABEL} label: no home cluster is responsible for it"
        twin_of = self.twin_origin(namespace)
        if twin_of != home:
            # the admission policy refuses such a ShadowPod already; this holds without it too
            self.recheck(key, TWIN_RECHECK_SECONDS)
            return f"namespace {namespace} is not a twin namespace of home cluster {home} in {self.cluster_id}" + (
                f" (it serves {twin_of})" if twin_of else ""
            )
        if self.counted(key, shadow):
            return None  # already counted (a recreation of a pod it admitted)
        quota = self.quota_of(home)
        problem = self._problem(home, shadow, quota)
        if problem is not None:
            self._refused[home].add(key)
            return problem
        self.count(key, shadow)
        return None

    def _problem(self, home: str, shadow: Any, quota: QuotaSpec) -> str | None:
        where = f"{self.cluster_id} (Quota {names.tenant_namespace(home)}/{names.quota_name(home)})"
        if quota.cordoned:
            return f"home cluster {home} is cordoned in {where}: no new pod of it starts here"
        if quota.limits_enforcement is LimitsEnforcement.NONE:
            return None
        spec = pod_spec_of(shadow)
        problem = limits_problem(spec, quota.limits_enforcement)
        if problem is not None:
            return f"{problem}, in {where}"
        try:
            asked = spec_requests(spec)
        except ValueError as err:
            return f"the pod's resources cannot be read: {err}"
        over = grant_problem(asked, self.used(home), self.grant_of(home, quota))
        if over is not None:
            return f"the pod exceeds what {where} grants home cluster {home}: {over}"
        return None


def origin_of(shadow: Any) -> str | None:
    return (shadow.metadata.labels or {}).get(names.ORIGIN_LABEL)
