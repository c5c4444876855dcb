"""The benches' CPU plan: each cluster its own CPUs where there are enough."""

from __future__ import annotations

from tests.bench.pinning import cpu_plan


def test_two_clusters_on_two_cores_get_one_each() -> None:
    assert cpu_plan(["home", "foreign-1"], [0, 1]) == {"home": {0}, "foreign-1": {1}}


def test_more_cores_are_split_evenly_in_order() -> None:
    assert cpu_plan(["home", "foreign-1"], [0, 1, 2, 3, 4]) == {"home": {0, 1}, "foreign-1": {2, 3}}


def test_fewer_cores_than_clusters_are_shared_round_robin() -> None:
    assert cpu_plan(["home", "foreign-1", "foreign-2"], [0, 1]) == {"home": {0}, "foreign-1": {1}, "foreign-2": {0}}
