"""Seed 002's pod translation: the home pod as the foreign cluster runs it, and the remote status
as the home cluster shows it. Pure functions on wire-format dicts; inputs are never changed."""

from __future__ import annotations

import copy
import ipaddress
from dataclasses import dataclass
from typing import Any

from runtime.api import names


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
# Added at home by the DefaultTolerationSeconds plugin; the foreign cluster adds its own.
HOME_DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
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
        return {"podAntiAffinity": copy.deepcopy(own)} if own else None
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


def _is_home_token_volume(volume: dict[str, Any]) -> bool:
    sources = (volume.get("projected") or {}).get("sources") or []
    return str(volume.get("name", "")).startswith("kube-api-access-") and any(
        "serviceAccountToken" in source for source in sources
    )


def remote_pod_spec(home_pod: dict[str, Any], *, home_cluster_id: str, foreign_cluster_id: str) -> dict[str, Any]:
    """The PodSpec the foreign cluster runs (seed 002)."""
    spec = copy.deepcopy(home_pod.get("spec") or {})
    affinity = _anti_affinity(home_pod)
    for field in HOME_SCHEDULING_FIELDS:
        spec.pop(field, None)
    if affinity:
        spec["affinity"] = affinity
    if spec.get("runtimeClassName") == names.RUNTIME_CLASS_NAME:
        del spec["runtimeClassName"]
    tolerations = [
        t
        for t in spec.get("tolerations") or []
        if t.get("key") != names.VIRTUAL_NODE_TAINT_KEY
        and not (t.get("key") in HOME_DEFAULT_TOLERATIONS and t.get("tolerationSeconds") is not None)
    ]
    if tolerations:
        spec["tolerations"] = tolerations
    else:
        spec.pop("tolerations", None)
    spec.update(hostNetwork=False, hostIPC=False, hostPID=False)
    # The home token is for the home API server; giving the pod a token for it is reflection's job.
    # Meanwhile the foreign cluster must not mount a token of its own into the pod.
    dropped = {v["name"] for v in spec.get("volumes") or [] if _is_home_token_volume(v)}
    if dropped:
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in dropped]
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        if container.get("volumeMounts"):
            container["volumeMounts"] = [m for m in container["volumeMounts"] if m.get("name") not in dropped]
    spec.pop("serviceAccountName", None)
    spec.pop("serviceAccount", None)
    spec["automountServiceAccountToken"] = False
    return spec


def remote_pod_metadata(home_pod: dict[str, Any], *, home_cluster_id: str, foreign_cluster_id: str) -> dict[str, Any]:
    """Labels (plus origin and destination) and annotations; name and namespace are the caller's."""
    meta = home_pod.get("metadata") or {}
    labels = {
        **(meta.get("labels") or {}),
        names.ORIGIN_LABEL: home_cluster_id,
        names.DESTINATION_LABEL: foreign_cluster_id,
    }
    return {"labels": labels, "annotations": dict(meta.get("annotations") or {})}


def nothing_to_tell(remote_status: dict[str, Any]) -> bool:
    """A remote pod just created or scheduled: Pending, no container yet, every condition met.

    The home pod shows as much already; reflecting it would cost a write per pod in a burst. A
    pod the foreign scheduler cannot place (a False condition) or a container waiting on its
    image (a container status) is news, and is reflected.
    """
    return (
        remote_status.get("phase", "Pending") == "Pending"
        and not remote_status.get("containerStatuses")
        and not remote_status.get("initContainerStatuses")
        and not remote_status.get("reason")
        and all(c.get("status") == "True" for c in remote_status.get("conditions") or [])
    )


def home_pod_status(
    remote_status: dict[str, Any], *, pod_cidr_mapping: CidrMapping | None, host_ip: str, recreations: int
) -> dict[str, Any]:
    """The home pod's status from the remote one: IPs remapped, restarts include recreations."""

    def ip(value: str) -> str:
        return pod_cidr_mapping.translate(value) if pod_cidr_mapping else value

    status: dict[str, Any] = {
        key: copy.deepcopy(remote_status[key])
        for key in ("phase", "conditions", "message", "reason", "startTime", "qosClass")
        if key in remote_status
    }
    for key in ("containerStatuses", "initContainerStatuses"):
        if key in remote_status:
            status[key] = [
                {**c, "restartCount": int(c.get("restartCount") or 0) + recreations} for c in remote_status[key]
            ]
    if remote_status.get("podIP"):
        status["podIP"] = ip(remote_status["podIP"])
        status["podIPs"] = [{"ip": ip(entry["ip"])} for entry in remote_status.get("podIPs") or []] or [
            {"ip": status["podIP"]}
        ]
    status["hostIP"] = host_ip
    status["hostIPs"] = [{"ip": host_ip}]
    return status
