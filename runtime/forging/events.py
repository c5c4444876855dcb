"""The home copy of a foreign event (docs/reflection.md): which foreign events come back, and what
the home one says. Pure functions on wire-format dicts; the reflector (runtime/reflection/events.py)
decides from synced stores and writes only when `needs_write` says so."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.api import ReflectionPolicy, names
from runtime.forging.objects import covers, policy_allows

# docs/reflection.md: the kinds whose events come back, by the kind an event names
REFLECTED_EVENT_KINDS = ("Pod", "Service", "EndpointSlice", "Ingress", "ConfigMap", "Secret", "PersistentVolumeClaim")


def _seconds(stamp: Any) -> str | None:
    """A Time (seconds) from a Time or MicroTime: the home event is a core/v1 one with counts."""
    if not stamp:
        return None
    text = str(stamp)
    return f"{text[:19]}Z" if len(text) >= 19 else text


def occurrences(event: Mapping[str, Any]) -> tuple[int, str | None, str | None]:
    """How many times the foreign event happened, first and last (series for events.k8s.io ones)."""
    series = event.get("series") or {}
    count = max(int(event.get("count") or 0), int(series.get("count") or 0), 1)
    first = _seconds(event.get("firstTimestamp")) or _seconds(event.get("eventTime"))
    last = (
        _seconds(series.get("lastObservedTime"))
        or _seconds(event.get("lastTimestamp"))
        or _seconds(event.get("eventTime"))
        or first
    )
    return count, first or last, last


def home_event(
    foreign_event: Mapping[str, Any],
    home_object: Mapping[str, Any],
    *,
    foreign_cluster_id: str,
    node_name: str,
) -> dict[str, Any]:
    """The home copy of a foreign event, about `home_object`."""
    meta = foreign_event.get("metadata") or {}
    home_meta = home_object.get("metadata") or {}
    involved = foreign_event.get("involvedObject") or {}
    count, first, last = occurrences(foreign_event)
    source = foreign_event.get("source") or {}
    component = source.get("component") or foreign_event.get("reportingComponent") or "unknown"
    reference = {
        "apiVersion": home_object.get("apiVersion"),
        "kind": home_object.get("kind"),
        "name": home_meta.get("name"),
        "namespace": home_meta.get("namespace"),
        "uid": home_meta.get("uid"),
    }
    if involved.get("fieldPath"):
        reference["fieldPath"] = involved["fieldPath"]  # e.g. spec.containers{app}: same at home
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": names.reflected_event_name(str(home_meta.get("name")), str(meta.get("uid"))),
            "namespace": home_meta.get("namespace"),
            "labels": {names.EVENT_REFLECTED_FROM_LABEL: foreign_cluster_id},
        },
        "involvedObject": reference,
        "reason": foreign_event.get("reason"),
        "message": foreign_event.get("message"),
        "type": foreign_event.get("type") or "Normal",
        # who said it there; the host is the virtual node, where the object runs as seen from home
        "source": {"component": component, "host": node_name},
        "count": count,
        "firstTimestamp": first,
        "lastTimestamp": last,
    }
    return body


def about_teardown(foreign_event: Mapping[str, Any], twin: str) -> bool:
    """A foreign controller complaining that the twin namespace is being deleted (the API server refuses
    new content in a terminating namespace, e.g. FailedToUpdateEndpointSlices while an unoffload or a
    deselection tears the twin down): the foreign side's business, nothing a home user can act on."""
    return f"in namespace {twin} because it is being terminated" in str(foreign_event.get("message") or "")


def event_allowed(policy: ReflectionPolicy, foreign_event: Mapping[str, Any], home_object: Mapping[str, Any]) -> bool:
    """docs/reflection.md's policy for the `event` kind. Events are written by foreign controllers, so the user's
    annotation is the one on the home object the event is about (or on the event itself): DenyList
    reflects all but those annotated `liqo.io/skip-reflection`, AllowList only those annotated
    `liqo.io/allow-reflection`."""
    verdicts = [
        policy_allows(policy, (obj.get("metadata") or {}).get("annotations") or {})
        for obj in (foreign_event, home_object)
    ]
    return any(verdicts) if policy is ReflectionPolicy.ALLOW_LIST else all(verdicts)


def needs_write(desired: Mapping[str, Any], existing: Mapping[str, Any] | None) -> bool:
    """The home event does not yet say what the foreign one says (a count or a time that moved)."""
    if existing is None:
        return True
    fields = ("involvedObject", "reason", "message", "type", "count")
    wanted = {k: desired.get(k) for k in fields if desired.get(k) is not None}
    have = {k: existing.get(k) for k in fields}
    return not covers(wanted, have) or _seconds(existing.get("lastTimestamp")) != desired.get("lastTimestamp")
