"""The toolkit's client waits out a 429 as client-go does (liqo_stack/kube.py)."""

from __future__ import annotations

import httpx2
import pytest

from liqo_stack import kube


def answering(statuses: list[int], retry_after: str = "0") -> tuple[kube.RetryAfterTransport, list[int]]:
    sent: list[int] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        status = statuses[min(len(sent), len(statuses) - 1)]
        sent.append(status)
        return httpx2.Response(status, headers={"Retry-After": retry_after}, json={"kind": "Status"})

    return kube.RetryAfterTransport(httpx2.MockTransport(answer)), sent


def test_a_429_is_sent_again_until_the_server_answers() -> None:
    transport, sent = answering([429, 429, 200])
    with httpx2.Client(transport=transport, base_url="https://api") as http:
        assert http.post("/apis/x", json={"a": 1}).status_code == 200
    assert sent == [429, 429, 200]


def test_a_server_that_keeps_refusing_gets_client_gos_ten_retries_then_its_429() -> None:
    transport, sent = answering([429])
    with httpx2.Client(transport=transport, base_url="https://api") as http:
        assert http.get("/apis/x").status_code == 429
    assert len(sent) == kube.MAX_RETRIES + 1


@pytest.mark.parametrize(("header", "seconds"), [("1", 1.0), ("120", kube.MAX_RETRY_AFTER_SECONDS), ("soon", 1.0)])
def test_the_wait_follows_retry_after_within_a_cap(header: str, seconds: float) -> None:
    assert kube._retry_after(header) == seconds
