"""How the informer reads watch-stream lines: bookmarks, errors, ordinary events, and what it keeps."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Pod, Secret

from runtime.api import names
from runtime.forging.kinds import without_pod_token_values
from runtime.kube import Event, Informer
from runtime.kube.client import lines_of
from runtime.kube.informing import _Gone
from runtime.virtualkubelet.pods import without_spec


def informer() -> tuple[Informer, list[Event]]:
    watching = Informer(cast(AsyncClient, None), Pod, namespace="apps")  # reading lines needs no client
    events: list[Event] = []
    watching.add_handler(events.append)
    return watching, events


def line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode()


def test_a_pod_bookmark_moves_the_resource_version_and_emits_nothing() -> None:
    watching, events = informer()
    bookmark = {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "42"}, "spec": {"containers": None}}
    watching._on_watch_line(line("BOOKMARK", bookmark))
    assert watching.resource_version == "42"
    assert events == [] and watching.store == {}


def test_added_and_deleted_pods_update_the_store_and_reach_handlers() -> None:
    watching, events = informer()
    pod: dict[str, Any] = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": "web", "namespace": "apps", "resourceVersion": "7"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }
    watching._on_watch_line(line("ADDED", pod))
    assert list(watching.store) == ["apps/web"] and watching.resource_version == "7"
    watching._on_watch_line(line("DELETED", {**pod, "metadata": {**pod["metadata"], "resourceVersion": "8"}}))
    assert watching.store == {} and [(e.type, e.key) for e in events] == [
        ("ADDED", "apps/web"),
        ("DELETED", "apps/web"),
    ]


def test_an_error_event_raises_and_410_means_list_again() -> None:
    watching, _ = informer()
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "too old", "code": 410}
    with pytest.raises(_Gone):
        watching._on_watch_line(line("ERROR", status))
    with pytest.raises(ApiError):
        watching._on_watch_line(line("ERROR", {**status, "code": 500, "message": "boom"}))


def test_a_trimmed_informer_stores_and_hands_on_the_trimmed_object() -> None:
    watching = Informer(cast(AsyncClient, None), Pod, namespace="apps", trim=without_spec)
    events: list[Event] = []
    watching.add_handler(events.append)
    pod = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": "web", "namespace": "apps", "resourceVersion": "7"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        "status": {"phase": "Running"},
    }
    watching._on_watch_line(line("ADDED", pod))
    stored = watching.store["apps/web"]
    assert stored.spec is None and stored.status.phase == "Running" and events[0].obj is stored


def test_a_pod_token_secret_keeps_its_keys_not_its_tokens() -> None:
    token = Secret.from_dict({
        "metadata": {"name": "liqo-token-web", "labels": {names.SERVICE_ACCOUNT_TOKEN_LABEL: "true"}},
        "data": {"token": "c2VjcmV0", "ca.crt": "Y2E="},
    })  # fmt: skip
    other = Secret.from_dict({"metadata": {"name": "db"}, "data": {"password": "cHc="}})
    assert without_pod_token_values(token).data == {"token": "", "ca.crt": ""}
    assert without_pod_token_values(other).data == {"password": "cHc="}  # a reflected Secret is compared


@pytest.mark.parametrize("size", [1, 7, 65_536])
def test_stream_chunks_become_whole_lines_however_they_are_cut(size: int) -> None:
    """A watch stream is cut into chunks anywhere: lines come out whole, empty ones left out, a long
    one (an event with a large object) in one piece."""
    long = b"x" * 300_000
    stream = b"first\n\nsecond\n" + long + b"\nlast"

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(stream), size):
            yield stream[start : start + size]

    async def collect() -> list[bytes]:
        return [line async for line in lines_of(chunks())]

    assert asyncio.run(collect()) == [b"first", b"second", long, b"last"]
