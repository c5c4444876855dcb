"""Fixtures the integration tests share (the session's clusters come from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace


@pytest.fixture
def namespaces(home: Client, foreign: dict[str, Client], unique_name: str) -> Iterator[tuple[str, str]]:
    """A home namespace and a foreign-1 namespace standing for its twin, with no runtime around them."""
    twin = f"{unique_name}-twin"
    home.create(Namespace(metadata=ObjectMeta(name=unique_name)))
    foreign["foreign-1"].create(Namespace(metadata=ObjectMeta(name=twin)))
    yield unique_name, twin
    home.delete(Namespace, unique_name)
    foreign["foreign-1"].delete(Namespace, twin)
