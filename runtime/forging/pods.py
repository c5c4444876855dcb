"""docs/reflection.md's pod translation: the home pod as the foreign cluster runs it, and the remote status
as the home cluster shows it; and docs/offloading.md's constraints on where a home pod may run (the pod
webhook's mutation). Pure functions on wire-format dicts; inputs are never changed."""

from __future__ import annotations

import copy
import datetime
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import msgspec
from lightkube.resources.core_v1 import Pod

from runtime.api import NodeSelector, NodeSelectorRequirement, OffloadingPhase, PodOffloadingStrategy, names
from runtime.api.advertisement import LARGEST_POD_LABELS, pod_requests
from runtime.api.namespaceoffloading import effective_strategy
from runtime.api.selectors import requirement_matches
from runtime.api.virtualnode import ApiServerAddress, VirtualNodeSpec
from runtime.forging.tokens import home_api_env, token_projections, token_volumes


def wire_copy(value: Any) -> Any:
    """A deep copy of a wire-format (JSON) value: through msgspec's encoder and decoder, 8x faster
    than copy.deepcopy on a pod spec (3.6 against 31 µs), which the virtual kubelet copies per event."""
    return msgspec.json.decode(msgspec.json.encode(value))


class TranslationError(ValueError):
    """The pod asks for something that can't be offloaded (reported as the pod's reason)."""


# Scheduling constraints that refer to the home cluster's nodes.
HOME_SCHEDULING_FIELDS = (
    "nodeName",
    "nodeSelector",
    "affinity",
    "schedulerName",
    "priorityClassName",
    "priority",
    "preemptionPolicy",
    "topologySpreadConstraints",
    "ephemeralContainers",
)
PRESETS = ("propagate", "soft", "hard")


@dataclass(frozen=True)
class CidrMapping:
    """Remote pod IPs in `remote` are shown at home in `home` (same prefix length)."""

    remote: ipaddress.IPv4Network | ipaddress.IPv6Network
    home: ipaddress.IPv4Network | ipaddress.IPv6Network

    @classmethod
    def parse(cls, remote: str, home: str) -> CidrMapping:
        try:
            remote_net, home_net = ipaddress.ip_network(remote), ipaddress.ip_network(home)
        except ValueError as err:
            raise ValueError(f"{remote!r} -> {home!r}: {err}") from err
        if remote_net.prefixlen != home_net.prefixlen or remote_net.version != home_net.version:
            raise ValueError(f"{remote} and {home} must have the same IP version and prefix length")
        return cls(remote_net, home_net)

    def translate(self, ip: str) -> str:
        address = ipaddress.ip_address(ip)
        if address not in self.remote:
            return ip
        offset = int(address) - int(self.remote.network_address)
        return str(ipaddress.ip_address(int(self.home.network_address) + offset))


def pod_cidr_mapping(spec: VirtualNodeSpec | None) -> CidrMapping | None:
    """The VirtualNode's remapping of the foreign pod range, when the stack gave it one."""
    if spec is None or not spec.pod_cidr or not spec.remapped_pod_cidr:
        return None
    return CidrMapping.parse(spec.pod_cidr, spec.remapped_pod_cidr)


def _anti_affinity(pod: dict[str, Any]) -> dict[str, Any] | None:
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    preset = annotations.get(names.ANTI_AFFINITY_PRESET_ANNOTATION)
    if preset is None:
        return None
    if preset not in PRESETS:
        raise TranslationError(
            f"annotation {names.ANTI_AFFINITY_PRESET_ANNOTATION}={preset!r}: allowed values are {', '.join(PRESETS)}"
        )
    if preset == "propagate":
        own = ((pod.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity")
        return {"podAntiAffinity": wire_copy(own)} if own else None
    labels = dict(meta.get("labels") or {})
    wanted = annotations.get(names.ANTI_AFFINITY_LABELS_ANNOTATION)
    if wanted is not None:
        keys = [k.strip() for k in wanted.split(",") if k.strip()]
        labels = {k: v for k, v in labels.items() if k in keys}
    if not labels:
        raise TranslationError(
            f"annotation {names.ANTI_AFFINITY_PRESET_ANNOTATION}={preset}: the pod has none of the labels "
            f"to build the anti-affinity from (see {names.ANTI_AFFINITY_LABELS_ANNOTATION})"
        )
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
    if preset == "hard":
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
        }
    }


@dataclass(frozen=True)
class HomeApiAccess:
    """apiServerTokenSupport on: the pod's tokens come from this Secret in its twin namespace, and
    its containers reach the home API server at this address (None: not declared)."""

    token_secret: str
    address: ApiServerAddress | None


def remote_pod_spec(home_pod: dict[str, Any], *, home_cluster_id: str, foreign_cluster_id: str) -> dict[str, Any]:
    """The PodSpec the foreign cluster runs (docs/reflection.md), with no token of the home API server."""
    return remote_pod_spec_with(home_pod, None)


def remote_pod_spec_with(
    home_pod: dict[str, Any], home_api: HomeApiAccess | None, node_selector: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The PodSpec the foreign cluster runs (docs/reflection.md). `home_api`: tokens for the home API server;
    `node_selector`: the VirtualNode's offloadingPatch.nodeSelector (its node pool there), which
    replaces the home one the seed's mutations remove."""
    spec = _remote_spec(home_pod, _anti_affinity(home_pod), home_api.token_secret if home_api else None)
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if home_api is not None and home_api.address is not None and token_projections(home_pod):
        home_api_env(spec, home_api.address)
    return spec


def shadow_pod(
    home_pod: dict[str, Any],
    *,
    twin: str,
    home_cluster_id: str,
    foreign_cluster_id: str,
    node: VirtualNodeSpec | None,
    node_selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ShadowPod (metadata and spec) the virtual kubelet creates in the twin namespace for a home
    pod on the virtual node of `foreign_cluster_id`, with that VirtualNode's settings (`node`: token
    support and the home API server's address, the skip lists) and, on a node pool's virtual node,
    the pool's `node_selector`. Raises TranslationError."""
    name = (home_pod.get("metadata") or {})["name"]
    home_api = (
        HomeApiAccess(names.token_secret_name(name), node.home_api_server)
        if node is not None and node.api_server_token_support
        else None
    )
    spec = remote_pod_spec_with(home_pod, home_api, node_selector)
    meta = remote_pod_metadata(
        home_pod, home_cluster_id=home_cluster_id, foreign_cluster_id=foreign_cluster_id, **skip_lists(node)
    )
    return {"metadata": {**meta, "name": name, "namespace": twin}, "spec": {"pod": spec}}


def pod_of_shadow(shadow: dict[str, Any]) -> dict[str, Any]:
    """The pod the foreign agent creates for a ShadowPod: its name, labels, annotations and pod spec,
    owned by it (once it exists: a ShadowPod not yet created has no UID to own the pod by)."""
    meta = shadow.get("metadata") or {}
    metadata: dict[str, Any] = {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "labels": dict(meta.get("labels") or {}),
        "annotations": dict(meta.get("annotations") or {}),
    }
    if meta.get("uid"):
        metadata["ownerReferences"] = [
            {
                "apiVersion": names.API_VERSION,
                "kind": "ShadowPod",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": dict((shadow.get("spec") or {}).get("pod") or {}),
    }


def _remote_spec(
    home_pod: dict[str, Any], affinity: dict[str, Any] | None, token_secret: str | None = None
) -> dict[str, Any]:
    spec = wire_copy(home_pod.get("spec") or {})
    for field in HOME_SCHEDULING_FIELDS:
        spec.pop(field, None)
    if affinity:
        spec["affinity"] = affinity
    if spec.get("runtimeClassName") == names.RUNTIME_CLASS_NAME:
        del spec["runtimeClassName"]
    # Verbatim but the virtual-node one (else the pod could land on a virtual node there): the
    # not-ready/unreachable tolerationSeconds the user chose keep applying to the remote pod (the
    # foreign DefaultTolerationSeconds plugin adds its own only where the pod has none).
    tolerations = [t for t in spec.get("tolerations") or [] if t.get("key") != names.VIRTUAL_NODE_TAINT_KEY]
    if tolerations:
        spec["tolerations"] = tolerations
    else:
        spec.pop("tolerations", None)
    spec.update(hostNetwork=False, hostIPC=False, hostPID=False)
    # A token is for the API server that issued it: the home one's come from the token reflector
    # (apiServerTokenSupport), and the foreign cluster never mounts one of its own into the pod.
    return token_volumes(spec, token_secret if token_projections(home_pod) else None)


# What Kubernetes lets change on a live pod; everything else in a pod spec is immutable.
LIVE_POD_FIELDS = ("activeDeadlineSeconds", "tolerations")
LIVE_CONTAINER_FIELDS = ("image", "resources")  # resources: through the resize subresource


def live_pod_spec(offloaded: dict[str, Any], home_pod: dict[str, Any]) -> dict[str, Any]:
    """The offloaded spec (a ShadowPod's) with what changed on the live home pod since: images,
    resources (in-place resize), activeDeadlineSeconds, tolerations. The anti-affinity stays as
    it was built at creation (docs/reflection.md: changing the preset annotations later has no effect)."""
    fresh = _remote_spec(home_pod, None)
    spec: dict[str, Any] = wire_copy(offloaded)
    for field in LIVE_POD_FIELDS:
        if field in fresh:
            spec[field] = fresh[field]
        else:
            spec.pop(field, None)
    for kind in ("containers", "initContainers"):
        by_name = {c.get("name"): c for c in fresh.get(kind) or []}
        for container in spec.get(kind) or []:
            now = by_name.get(container.get("name"))
            if now is None:
                continue
            for field in LIVE_CONTAINER_FIELDS:
                if field in now:
                    container[field] = wire_copy(now[field])
                else:
                    container.pop(field, None)
    return spec


def _selected_label_keys(affinity: dict[str, Any] | None) -> set[str]:
    """The label keys the anti-affinity terms of a remote pod select on."""
    anti = (affinity or {}).get("podAntiAffinity") or {}
    terms = [
        *(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []),
        *(t.get("podAffinityTerm") or {} for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution") or []),
    ]
    keys: set[str] = set()
    for term in terms:
        selector = term.get("labelSelector") or {}
        keys.update(selector.get("matchLabels") or {})
        keys.update(e.get("key") for e in selector.get("matchExpressions") or [] if e.get("key"))
    return keys


class SkipLists(TypedDict):
    labels_not_reflected: frozenset[str]
    annotations_not_reflected: frozenset[str]


def skip_lists(spec: VirtualNodeSpec | None) -> SkipLists:
    """The VirtualNode's labels and annotations not reflected, as `remote_pod_metadata` takes them."""
    patch = spec.offloading_patch if spec is not None else None
    return {
        "labels_not_reflected": frozenset((patch and patch.labels_not_reflected) or ()),
        "annotations_not_reflected": frozenset((patch and patch.annotations_not_reflected) or ()),
    }


def remote_pod_metadata(
    home_pod: dict[str, Any],
    *,
    home_cluster_id: str,
    foreign_cluster_id: str,
    labels_not_reflected: Iterable[str] = (),
    annotations_not_reflected: Iterable[str] = (),
) -> dict[str, Any]:
    """Labels (plus origin and destination) and annotations; name and namespace are the caller's.

    docs/reflection.md's skip lists (the VirtualNode's offloadingPatch) apply as to every reflected object,
    but never to what offloading itself needs: the ownership labels, and the labels the remote
    pod's anti-affinity selects on (the remote pods must carry them for the terms to match)."""
    meta = home_pod.get("metadata") or {}
    try:
        needed = _selected_label_keys(_anti_affinity(home_pod))
    except TranslationError:
        needed = set()  # such a pod is never offloaded: the spec's translation reports it
    skipped_labels = set(labels_not_reflected) - needed
    skipped_annotations = set(annotations_not_reflected)
    labels = {
        **{k: v for k, v in (meta.get("labels") or {}).items() if k not in skipped_labels},
        names.ORIGIN_LABEL: home_cluster_id,
        names.DESTINATION_LABEL: foreign_cluster_id,
    }
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in skipped_annotations}
    return {"labels": labels, "annotations": annotations}


def nothing_to_tell(remote_status: dict[str, Any], home_status: dict[str, Any]) -> bool:
    """A remote pod just created or scheduled (Pending, no container yet, every condition met)
    while the home pod shows no more than a freshly scheduled pod.

    Reflecting it would cost a write per pod in a burst and tell nothing. A pod the foreign
    scheduler cannot place (a False condition) or a container waiting on its image (a container
    status) is news; so is anything the home pod shows that would have to go (a recreated remote
    pod after a running one, a reason left by a back-off).
    """
    return (
        remote_status.get("phase", "Pending") == "Pending"
        and not remote_status.get("containerStatuses")
        and not remote_status.get("initContainerStatuses")
        and not remote_status.get("reason")
        and all(c.get("status") == "True" for c in remote_status.get("conditions") or [])
        and home_status.get("phase", "Pending") == "Pending"
        and not any(home_status.get(k) for k in ("containerStatuses", "initContainerStatuses", "podIP", "reason"))
    )


# A pod's phase only moves forward (Pending -> Running -> Succeeded | Failed), as with a kubelet.
PHASE_RANK = {"Pending": 0, "Unknown": 0, "Running": 1, "Succeeded": 2, "Failed": 2}
TERMINAL_PHASES = ("Succeeded", "Failed")
# Conditions the home control plane sets on the pod itself (eviction, preemption); they stay.
HOME_CONDITIONS = ("DisruptionTarget",)
# Status fields about the remote pod object itself, meaningless for the home one.
REMOTE_ONLY_FIELDS = ("observedGeneration", "hostIP", "hostIPs", "podIP", "podIPs", "nominatedNodeName")
CONTAINER_STATUS_KINDS = ("containerStatuses", "initContainerStatuses")


def restart_counts(status: dict[str, Any]) -> dict[str, int]:
    """Restarts per container (init containers included) that a pod status shows."""
    return {
        c["name"]: int(c.get("restartCount") or 0) for kind in CONTAINER_STATUS_KINDS for c in status.get(kind) or []
    }


def home_pod_status(
    remote_status: dict[str, Any],
    *,
    home_status: dict[str, Any] | None = None,
    pod_cidr_mapping: CidrMapping | None,
    host_ip: str,
    recreations: int,
    previous_restarts: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The home pod's whole status from the remote one (docs/reflection.md): what the remote lacks is absent.

    IPs are remapped and hostIP is the virtual kubelet's; restarts add those of the remote pods
    this one replaced, recreations included (`previous_restarts` per container, else one per
    recreation), and never go below what the home pod shows; the phase never goes backwards; a
    container the home pod showed stays listed (waiting) while a recreated remote pod has none.
    """
    home = home_status or {}

    def ip(value: str) -> str:
        return pod_cidr_mapping.translate(value) if pod_cidr_mapping else value

    status: dict[str, Any] = {
        key: wire_copy(value)
        for key, value in remote_status.items()
        if key not in REMOTE_ONLY_FIELDS and key not in CONTAINER_STATUS_KINDS
    }
    phase = remote_status.get("phase", "Pending")
    if PHASE_RANK.get(home.get("phase", "Pending"), 0) > PHASE_RANK.get(phase, 0):
        status["phase"] = home["phase"]
    conditions = [{k: v for k, v in c.items() if k != "observedGeneration"} for c in status.get("conditions") or []]
    remote_types = {c.get("type") for c in conditions}
    conditions += [
        c
        for c in home.get("conditions") or []
        if c.get("type") in HOME_CONDITIONS and c.get("type") not in remote_types
    ]
    if conditions:
        status["conditions"] = conditions
    else:
        status.pop("conditions", None)

    shown = restart_counts(home)
    before = previous_restarts or {}
    for kind in CONTAINER_STATUS_KINDS:
        remote = {c["name"]: c for c in remote_status.get(kind) or []}
        entries = []
        for name, container in remote.items():
            count = before.get(name, recreations) + int(container.get("restartCount") or 0)
            entries.append({**wire_copy(container), "restartCount": max(count, shown.get(name, 0))})
        for container in home.get(kind) or []:
            if container["name"] not in remote:  # a recreated remote pod without containers yet
                entries.append(
                    {
                        "name": container["name"],
                        "image": container.get("image", ""),
                        "imageID": "",
                        "ready": False,
                        "started": False,
                        "restartCount": max(before.get(container["name"], recreations), shown[container["name"]]),
                        "state": {"waiting": {"reason": "ContainerCreating"}},
                    }
                )
        if entries:
            status[kind] = entries
    if remote_status.get("podIP"):
        status["podIP"] = ip(remote_status["podIP"])
        status["podIPs"] = [{"ip": ip(entry["ip"])} for entry in remote_status.get("podIPs") or []] or [
            {"ip": status["podIP"]}
        ]
    status["hostIP"] = host_ip
    status["hostIPs"] = [{"ip": host_ip}]
    return status


def merge_patch(current: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) turning `current` into `desired`: keys that must go are
    null, maps recurse, anything else (lists included) is replaced. Empty when equal."""
    patch: dict[str, Any] = {key: None for key in current if key not in desired}
    for key, value in desired.items():
        old = current.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            nested = merge_patch(old, value)
            if nested:
                patch[key] = nested
        elif key not in current or old != value:
            patch[key] = wire_copy(value)
    return patch


ABORTED_REASON = "OffloadingAborted"  # offloaded, and the twin namespace went away
KILLED_EXIT_CODE = 137  # the container was killed with its twin namespace


def aborted_status(status: dict[str, Any], message: str, now: str, reason: str = ABORTED_REASON) -> dict[str, Any]:
    """A pod whose remote side was removed under it: Failed, not ready, its containers killed."""
    aborted = {**status, "phase": "Failed", "reason": reason, "message": message}
    aborted["conditions"] = [
        {**c, "status": "False", "reason": reason, "lastTransitionTime": now}
        if c.get("status") == "True" and c.get("type") != "PodScheduled"
        else c
        for c in status.get("conditions") or []
    ]
    for kind in ("containerStatuses", "initContainerStatuses"):
        if status.get(kind):
            aborted[kind] = [_killed(c, now, reason) for c in status[kind]]
    return aborted


def _killed(container: dict[str, Any], now: str, reason: str = ABORTED_REASON) -> dict[str, Any]:
    if "terminated" in (container.get("state") or {}):
        return container
    started = ((container.get("state") or {}).get("running") or {}).get("startedAt")
    terminated = {"exitCode": KILLED_EXIT_CODE, "reason": reason, "finishedAt": now}
    if started:
        terminated["startedAt"] = started
    return {**container, "ready": False, "started": False, "state": {"terminated": terminated}}


def controlled(pod: Any) -> bool:
    """A controller owns the pod: deleted, it is made anew (where its namespace now allows)."""
    return any(ref.controller for ref in pod.metadata.ownerReferences or [])


def ever_ran(status: dict[str, Any]) -> bool:
    """Whether the pod got past Pending remotely (Liqo's test: a phase past Pending or containers)."""
    return status.get("phase", "Pending") != "Pending" or bool(status.get("containerStatuses"))


def not_offloaded_message(namespace: str, foreign_cluster_id: str, *, offloaded: bool) -> str:
    """A pod on the virtual node of a cluster its namespace is not offloaded to: why, and what to run."""
    if offloaded:  # offloaded, but the cluster selector leaves this cluster out
        return (
            f"namespace {namespace} is not offloaded to {foreign_cluster_id} (its cluster selector leaves it out): "
            f"select it with `liqo-stack offload namespace {namespace} --selector ...`"
        )
    return (
        f"namespace {namespace} is not offloaded to {foreign_cluster_id}: "
        f"offload it with `liqo-stack offload namespace {namespace}`; the pod starts once it is"
    )


def unschedulable_since(status: dict[str, Any]) -> tuple[datetime.datetime, str] | None:
    """When the foreign scheduler found no node for the pod, and its message; None if it did not."""
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
            and condition.get("lastTransitionTime")
        ):
            since = datetime.datetime.fromisoformat(condition["lastTransitionTime"])
            return since, condition.get("message") or ""
    return None


# -- where a home pod may run: the constraints the pod webhook (runtime/webhooks/serving.py) adds -----------
# A pod of an offloaded namespace runs where docs/offloading.md says, by constraints added to the pod:
# - LocalAndRemote: the pod tolerates the virtual-node taint, so the scheduler may choose; with a
#   cluster selector, virtual nodes outside it are excluded (physical nodes stay allowed).
# - Local: nothing added: the taint keeps the pod on physical nodes.
# - Remote: the pod tolerates the taint and must land on a virtual node the selector matches.
# - `runtimeClassName: liqo` means Remote whatever the namespace's strategy.
# - While the namespace is being unoffloaded, pods are admitted as local ones, untouched: docs/offloading.md's
#   unoffload reschedules the offloaded pods locally, so their controllers' replacements must not fail.
# The pod's own required node affinity is kept: each of its terms is ANDed with each of ours.
# With the namespace's move-unfit-pods policy on (runtime.api.namespaceoffloading.move_unfit_after),
# each virtual-node term also asks, by `Gt` on its largest-pod labels, for a virtual node with one
# foreign node that fits the pod's cpu and memory requests: a pod moved off a virtual node none of
# whose foreign nodes could run it does not come back to it while that holds (physical terms are
# left alone, so Local and LocalAndRemote pods may still run at home).

VIRTUAL_NODE_REQUIREMENT = {"key": names.TYPE_LABEL, "operator": "In", "values": [names.VIRTUAL_NODE_TYPE]}
PHYSICAL_NODE_REQUIREMENT = {"key": names.TYPE_LABEL, "operator": "DoesNotExist"}
VIRTUAL_NODE_TOLERATION = {
    "key": names.VIRTUAL_NODE_TAINT_KEY,
    "operator": "Equal",
    "value": names.VIRTUAL_NODE_TAINT_VALUE,
    "effect": names.VIRTUAL_NODE_TAINT_EFFECT,
}


def fit_requirements(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """A virtual node one of whose foreign nodes fits the pod's requests: `Gt` (request - 1) on its
    largest-pod label per requested resource (`Gt` is strict, the labels are whole units)."""
    requests = pod_requests(Pod.from_dict({"metadata": {}, **pod}))
    return [
        {"key": label, "operator": "Gt", "values": [str(int(requests[resource] * unit) - 1)]}
        for resource, (label, unit) in LARGEST_POD_LABELS.items()
        if requests.get(resource, 0) > 0
    ]


def fits(requirements: list[dict[str, Any]], labels: Mapping[str, str]) -> bool:
    """Whether a node with these labels meets the fit requirements (a pod moved off a node that does
    could be placed there again)."""
    return all(requirement_matches(NodeSelectorRequirement.model_validate(r), labels) for r in requirements)


def _virtual_terms(selector: NodeSelector, fits: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Virtual nodes the selector allows, one list of ANDed requirements per ORed term."""
    if not selector.node_selector_terms:
        return [[VIRTUAL_NODE_REQUIREMENT, *fits]]
    return [
        [VIRTUAL_NODE_REQUIREMENT, *[r.to_wire() for r in term.match_expressions or []], *fits]
        for term in selector.node_selector_terms
        if term.match_expressions
    ] or [
        [VIRTUAL_NODE_REQUIREMENT, {"key": names.TYPE_LABEL, "operator": "NotIn", "values": [names.VIRTUAL_NODE_TYPE]}]
    ]


def allowed_terms(
    strategy: PodOffloadingStrategy, selector: NodeSelector, fits: list[dict[str, Any]] | None = None
) -> list[list[dict[str, Any]]] | None:
    """Node selector terms the pod must satisfy, or None when nothing needs adding; `fits`: ANDed
    with every virtual-node term (the move-unfit-pods policy)."""
    fits = fits or []
    if strategy is PodOffloadingStrategy.LOCAL:
        return None
    if strategy is PodOffloadingStrategy.REMOTE:
        return _virtual_terms(selector, fits)
    if not selector.node_selector_terms and not fits:
        return None  # toleration alone: any node, physical or virtual
    return [[PHYSICAL_NODE_REQUIREMENT], *_virtual_terms(selector, fits)]


def mutate_pod(
    pod: dict[str, Any], strategy: PodOffloadingStrategy, selector: NodeSelector, *, move_unfit: bool = False
) -> dict[str, Any]:
    """The pod with the constraints of its namespace's offloading added (`move_unfit`: its policy of
    moving pods no foreign node fits is on). The input is not changed:
    what changes (the spec, its tolerations and affinity) is copied, the rest shared, since every
    pod created in an offloaded namespace waits on this (a whole copy was most of its cost)."""
    spec = dict(pod.get("spec") or {})
    mutated = {**pod, "spec": spec}
    effective = effective_strategy(pod, strategy)
    if effective is PodOffloadingStrategy.LOCAL:
        return mutated
    tolerations = list(spec.get("tolerations") or [])
    if VIRTUAL_NODE_TOLERATION not in tolerations:
        tolerations.append(dict(VIRTUAL_NODE_TOLERATION))
    spec["tolerations"] = tolerations
    ours = allowed_terms(effective, selector, fit_requirements(pod) if move_unfit else None)
    if ours is None:
        return mutated
    affinity = copy.deepcopy(spec.get("affinity") or {})
    spec["affinity"] = affinity
    required = affinity.setdefault("nodeAffinity", {}).setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    theirs = required.get("nodeSelectorTerms") or []
    if theirs:
        required["nodeSelectorTerms"] = [
            {**term, "matchExpressions": [*(term.get("matchExpressions") or []), *extra]}
            for term in theirs
            for extra in ours
        ]
    else:
        required["nodeSelectorTerms"] = [{"matchExpressions": extra} for extra in ours]
    return mutated


def unoffloading(offloading: Any | None) -> bool:
    """The namespace's offloading is being deleted: its pods are admitted as local ones, unchanged."""
    return offloading is not None and bool((offloading.get("metadata") or {}).get("deletionTimestamp"))


def not_ready_reason(namespace: str, offloading: Any | None) -> str | None:
    """Why a pod of a `liqo.io/scheduling-enabled=true` namespace can't be admitted yet (docs/offloading.md:
    pod creations are rejected until pod offloading is possible); None when it can."""
    if offloading is None:
        return (
            f"namespace {namespace} is labelled {names.SCHEDULING_ENABLED_LABEL}=true but has no "
            f"NamespaceOffloading yet: offload it (liqo-stack offload namespace {namespace}); "
            "controllers retry the pod by themselves"
        )
    meta = offloading.get("metadata") or {}
    status = offloading.get("status") or {}
    phase = status.get("offloadingPhase")
    if status.get("observedGeneration") != meta.get("generation") or phase in (None, OffloadingPhase.IN_PROGRESS):
        return f"the offloading of namespace {namespace} is not ready yet (phase {phase or 'pending'}); retry shortly"
    return None
