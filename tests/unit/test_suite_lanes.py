"""How `bash scripts/test.sh` splits the suite over its five workers (tests/conftest.py)."""

from __future__ import annotations

from collections import Counter

from tests.conftest import LANES, LAST_LANE, REPO, lane_of, merged_lane


def test_each_cluster_tier_module_has_one_lane_and_unit_tests_run_anywhere() -> None:
    assert lane_of("tests/integration/test_informer.py::test_x") == "clusters-1"
    assert lane_of("tests/integration/test_dev_teardown.py::test_x") == "clusters-2"  # named in LANES
    assert lane_of("tests/e2e/test_two_homes.py::test_x[a::b]") == "clusters-1"
    assert lane_of("tests/e2e/test_promote.py::test_x") == "clusters-5"
    assert lane_of("tests/e2e/test_failover.py::test_x") == "clusters-2"
    assert lane_of("tests/e2e/test_drift.py::test_x") == LAST_LANE
    assert lane_of("tests/unit/test_config.py::test_x") == "tests/unit/test_config.py::test_x"


def test_every_module_named_for_a_lane_exists_and_is_in_one_lane_only() -> None:
    """A renamed module would silently move to the last lane and unbalance them."""
    named = Counter(name for modules in LANES.values() for name in modules)
    tiers = [REPO / "tests" / "e2e", REPO / "tests" / "integration"]
    missing = sorted(name for name in named if not any((tier / f"{name}.py").exists() for tier in tiers))
    assert not missing, f"LANES in tests/conftest.py names modules that do not exist: {missing}"
    assert not [name for name, lanes in named.items() if lanes > 1]


def test_with_fewer_workers_than_lanes_each_worker_runs_one_merged_lane() -> None:
    lanes = ["clusters-1", "clusters-2", "clusters-3", "clusters-4", "clusters-5"]
    assert [merged_lane(lane, 5) for lane in lanes] == lanes
    assert [merged_lane(lane, 3) for lane in lanes] == [
        "clusters-1",
        "clusters-2",
        "clusters-3",
        "clusters-1",
        "clusters-2",
    ]
    assert [merged_lane(lane, 2) for lane in lanes] == [
        "clusters-1",
        "clusters-2",
        "clusters-1",
        "clusters-2",
        "clusters-1",
    ]
    assert {merged_lane(lane, 1) for lane in lanes} == {"clusters-1"}
    assert merged_lane("tests/unit/test_config.py::test_x", 1) == "tests/unit/test_config.py::test_x"
