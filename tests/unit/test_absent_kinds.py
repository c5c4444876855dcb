"""An informer of a kind that may not be there (runtime/kube/informing.py, `absent_ok`): the foreign
agent's Quotas in a cluster an older stack installed, which has no Quota CRD and no right to list one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx2
import pytest

from runtime.api.resources import QuotaResource
from runtime.kube import Informer


class Refusing:
    """A client whose lists are answered `code`, as lightkube's list path raises it (httpx2's error)."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.lists = 0

    def list(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        self.lists += 1
        request = httpx2.Request("GET", "https://foreign/apis/offloading.liqo.io/v1beta1/quotas")
        response = httpx2.Response(self.code, request=request)

        async def answer() -> AsyncIterator[Any]:
            raise httpx2.HTTPStatusError(f"{self.code}", request=request, response=response)
            yield  # an async generator

        return answer()


async def listed_again(client: Refusing) -> None:
    """Until the informer has asked a second time (each retry yields to the loop)."""
    while client.lists < 2:
        await asyncio.sleep(0)


@pytest.mark.parametrize("code", [404, 403])
def test_a_kind_that_is_not_there_counts_as_none_and_is_asked_again(code: int) -> None:
    async def scenario() -> tuple[bool, dict[str, Any], int]:
        client = Refusing(code)
        informer = Informer(cast(Any, client), QuotaResource, absent_ok=True, retry_delay=0.01)
        task = asyncio.create_task(informer.run())
        await asyncio.wait_for(informer.synced.wait(), 5)
        await asyncio.wait_for(listed_again(client), 5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return informer.synced.is_set(), informer.store, client.lists

    synced, store, lists = asyncio.run(scenario())
    assert synced and store == {}
    assert lists > 1, "listed again: the CRD may come"


def test_without_absent_ok_such_a_kind_never_syncs() -> None:
    async def scenario() -> bool:
        client = Refusing(404)
        informer = Informer(cast(Any, client), QuotaResource, retry_delay=0.01)
        task = asyncio.create_task(informer.run())
        await asyncio.wait_for(listed_again(client), 5)  # refused more than once, and still not synced
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return informer.synced.is_set()

    assert not asyncio.run(scenario())
