"""Quantities with every suffix Kubernetes accepts, nano and micro included."""

from __future__ import annotations

from decimal import Decimal

import pytest
from lightkube.resources.core_v1 import Pod

from runtime.api.advertisement import pod_requests
from runtime.api.quantities import parse_quantity


def test_nano_and_micro_suffixes() -> None:
    assert parse_quantity("250000000n") == Decimal("0.25")
    assert parse_quantity("1500u") == Decimal("0.0015")


def test_the_usual_suffixes_still_parse() -> None:
    assert parse_quantity("100m") == Decimal("0.1")
    assert parse_quantity("1Ki") == Decimal(1024)
    assert parse_quantity(None) is None


def test_a_malformed_quantity_is_an_error() -> None:
    with pytest.raises(ValueError):
        parse_quantity("abcn")
    with pytest.raises(ValueError):
        parse_quantity("12x")


def test_a_foreign_pod_requesting_nanocores_is_counted_not_fatal() -> None:
    """The foreign agent sums the requests of every pod in its cluster: one written in nanocores
    used to stop the advertisement with "Invalid unit suffix: n"."""
    pod = Pod.from_dict({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500000000n"}}}]},
    })  # fmt: skip
    assert pod_requests(pod)["cpu"] == Decimal("0.5")
