"""ServiceAccount tokens of offloaded pods (docs/reflection.md, `apiServerTokenSupport`): pure functions.

An offloaded pod that mounts its ServiceAccount token (the projected `kube-api-access-*` volume
the ServiceAccount admission plugin adds, or any projected `serviceAccountToken` source) gets in
its twin namespace one Secret holding, per projection, a token requested from the HOME API server
(TokenRequest bound to the home pod, with the projection's audience and expiry), the home root CA
and the home namespace. The remote pod's projected volume reads those keys where the projection
put the token, `ca.crt` and `namespace`; its containers reach the home API server through
KUBERNETES_SERVICE_HOST/PORT. The Secret is renewed at 80% of the token's life (at most a day), as
a kubelet renews projected tokens. Off: the remote pod mounts no token and no Secret is written
(docs/reflection.md's warning: whoever reads Secrets there could act as the pod at home).

The reflector that writes the Secrets is runtime.reflection.tokens.
"""

from __future__ import annotations

import base64
import copy
import datetime
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtime.api import VirtualNodeSpec, names
from runtime.api.virtualnode import ApiServerAddress
from runtime.forging.objects import ROOT_CA_CONFIGMAP as ROOT_CA_CONFIGMAP  # the token reflector reads it
from runtime.forging.objects import ownership_labels

HOME_TOKEN_VOLUME_PREFIX = "kube-api-access-"
CA_KEY = "ca.crt"
NAMESPACE_KEY = "namespace"
DEFAULT_EXPIRATION_SECONDS = 3600  # the API's default for a projected token
REFRESH_AT = 0.8  # of the token's life, as the kubelet does
MAX_REFRESH_SECONDS = 24 * 3600  # the kubelet renews a token at least daily


@dataclass(frozen=True)
class TokenProjection:
    """One `serviceAccountToken` source of a pod, and the Secret key its token goes under."""

    key: str
    audience: str | None
    expiration_seconds: int


def _token_key(volume: str, index: int, sources: list[Any]) -> str:
    tokens = [i for i, source in enumerate(sources) if "serviceAccountToken" in source]
    return f"{volume}.token" if len(tokens) == 1 else f"{volume}.{index}.token"


def token_projections(pod: Mapping[str, Any]) -> list[TokenProjection]:
    """The tokens the pod mounts, in volume order."""
    found = []
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        sources = (volume.get("projected") or {}).get("sources") or []
        for index, source in enumerate(sources):
            token = source.get("serviceAccountToken")
            if token is not None:
                found.append(
                    TokenProjection(
                        key=_token_key(volume["name"], index, sources),
                        audience=token.get("audience") or None,
                        expiration_seconds=int(token.get("expirationSeconds") or DEFAULT_EXPIRATION_SECONDS),
                    )
                )
    return found


def service_account_of(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec") or {}
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


def is_home_token_volume(volume: Mapping[str, Any]) -> bool:
    """The volume the ServiceAccount admission plugin adds at home."""
    sources = (volume.get("projected") or {}).get("sources") or []
    return str(volume.get("name", "")).startswith(HOME_TOKEN_VOLUME_PREFIX) and any(
        "serviceAccountToken" in source for source in sources
    )


def _secret_volume(volume: dict[str, Any], secret_name: str) -> dict[str, Any]:
    """A projected volume with token sources, reading the token(s), the home CA and the home
    namespace from the token Secret at the paths the projection chose; anything else stays."""
    projected = volume["projected"]
    sources = projected.get("sources") or []
    items: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    for index, source in enumerate(sources):
        if "serviceAccountToken" in source:
            items.append(
                {"key": _token_key(volume["name"], index, sources), "path": source["serviceAccountToken"]["path"]}
            )
        elif (source.get("configMap") or {}).get("name") == ROOT_CA_CONFIGMAP:
            # the foreign cluster's own root CA would not verify the home API server
            wanted = source["configMap"].get("items") or [{"key": CA_KEY, "path": CA_KEY}]
            items += [{"key": CA_KEY, "path": item["path"]} for item in wanted if item.get("key") == CA_KEY]
        elif "downwardAPI" in source:
            # the twin namespace is not the one the pod's ServiceAccount lives in
            downward = copy.deepcopy(source["downwardAPI"])
            entries = downward.get("items") or []
            home_ns = [e for e in entries if (e.get("fieldRef") or {}).get("fieldPath") == "metadata.namespace"]
            items += [{"key": NAMESPACE_KEY, "path": e["path"]} for e in home_ns]
            rest = [e for e in entries if e not in home_ns]
            if rest:
                kept.append({"downwardAPI": {**downward, "items": rest}})
        else:
            kept.append(copy.deepcopy(source))
    return {**volume, "projected": {**projected, "sources": [{"secret": {"name": secret_name, "items": items}}, *kept]}}


def token_volumes(spec: dict[str, Any], secret_name: str | None) -> dict[str, Any]:
    """The remote pod's volumes: with tokens (`secret_name` given) every projected token source reads
    the token Secret; without, the home token volume goes with its mounts, and the foreign cluster
    mounts no token of its own. `spec` is a copy the caller owns; it is changed and returned."""
    volumes = spec.get("volumes") or []
    if secret_name is not None:
        spec["volumes"] = [
            _secret_volume(v, secret_name)
            if any("serviceAccountToken" in s for s in (v.get("projected") or {}).get("sources") or [])
            else v
            for v in volumes
        ]
    else:
        dropped = {v["name"] for v in volumes if is_home_token_volume(v)}
        if dropped:
            spec["volumes"] = [v for v in volumes if v["name"] not in dropped]
            for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
                if container.get("volumeMounts"):
                    container["volumeMounts"] = [m for m in container["volumeMounts"] if m.get("name") not in dropped]
    spec.pop("serviceAccountName", None)
    spec.pop("serviceAccount", None)
    spec["automountServiceAccountToken"] = False
    return spec


HOME_API_ENV = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


def home_api_env(spec: dict[str, Any], address: ApiServerAddress) -> dict[str, Any]:
    """Containers reach the home API server; a value the user set stays. Changes and returns `spec`."""
    wanted = {"KUBERNETES_SERVICE_HOST": address.host, "KUBERNETES_SERVICE_PORT": str(address.port)}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        env = list(container.get("env") or [])
        have = {e.get("name") for e in env}
        env += [{"name": k, "value": v} for k, v in wanted.items() if k not in have]
        container["env"] = env
    return spec


def request_digest(pod: Mapping[str, Any]) -> str:
    """What the tokens were asked for: the ServiceAccount and each projection."""
    asked = [service_account_of(pod), *[[p.key, p.audience, p.expiration_seconds] for p in token_projections(pod)]]
    return hashlib.sha256(json.dumps(asked).encode()).hexdigest()[:16]


def refresh_at(issued: datetime.datetime, expires: datetime.datetime) -> datetime.datetime:
    """When a token issued then and valid until then is renewed: at 80% of its life, within a day."""
    life = (expires - issued).total_seconds()
    return issued + datetime.timedelta(seconds=min(life * REFRESH_AT, MAX_REFRESH_SECONDS))


def _stamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_stamp(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return None


def token_secret(
    pod: Mapping[str, Any],
    *,
    twin: str,
    tokens: Mapping[str, str],
    ca: str | None,
    renew_at: datetime.datetime,
    home_cluster_id: str,
    foreign_cluster_id: str,
) -> dict[str, Any]:
    """The foreign Secret of one pod: its tokens by key, the home CA and the home namespace."""
    meta = pod.get("metadata") or {}
    data = {key: token for key, token in tokens.items()}
    if ca is not None:
        data[CA_KEY] = ca
    data[NAMESPACE_KEY] = meta["namespace"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": names.token_secret_name(meta["name"]),
            "namespace": twin,
            "labels": {
                **ownership_labels(home_cluster_id, foreign_cluster_id),
                names.SERVICE_ACCOUNT_TOKEN_LABEL: "true",
            },
            "annotations": {
                names.TOKEN_POD_ANNOTATION: meta["name"],
                names.TOKEN_POD_UID_ANNOTATION: meta.get("uid") or "",
                names.TOKEN_REQUEST_ANNOTATION: request_digest(pod),
                names.TOKEN_REFRESH_AT_ANNOTATION: _stamp(renew_at),
            },
        },
        "type": "Opaque",
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    }


def renewal_due(pod: Mapping[str, Any], secret: Mapping[str, Any] | None, now: datetime.datetime) -> float:
    """Seconds until the pod's token Secret must be (re)written: 0 when missing, bound to another pod
    (same name, new UID), asked for differently, edited (a key missing) or due for renewal."""
    if secret is None:
        return 0.0
    meta = secret.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    pod_meta = pod.get("metadata") or {}
    keys = {p.key for p in token_projections(pod)} | {NAMESPACE_KEY}
    if (
        annotations.get(names.TOKEN_POD_UID_ANNOTATION) != pod_meta.get("uid")
        or annotations.get(names.TOKEN_REQUEST_ANNOTATION) != request_digest(pod)
        or not keys <= set((secret.get("data") or {}).keys())
        or (meta.get("labels") or {}).get(names.SERVICE_ACCOUNT_TOKEN_LABEL) != "true"
    ):
        return 0.0
    renew = parse_stamp(annotations.get(names.TOKEN_REFRESH_AT_ANNOTATION))
    if renew is None:
        return 0.0
    return max(0.0, (renew - now).total_seconds())


def tokens_wanted(pod: Mapping[str, Any] | None, spec: VirtualNodeSpec | None) -> bool:
    """The pod (not being deleted) mounts a token and the VirtualNode lets tokens go."""
    return (
        pod is not None
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
        and spec is not None
        and spec.api_server_token_support
        and bool(token_projections(pod))
    )
