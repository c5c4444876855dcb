"""How `bash scripts/test.sh` splits the suite over its three workers (tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.conftest import OWN_STACK_LANE, REPO, SECOND_LANE, lane_of


def test_each_cluster_tier_module_has_one_lane_and_unit_tests_run_anywhere() -> None:
    assert lane_of("tests/integration/test_informer.py::test_x") == "clusters-1"
    assert lane_of("tests/e2e/test_stack.py::test_x[a::b]") == "clusters-1"
    assert lane_of("tests/e2e/test_failover.py::test_x") == "clusters-2"
    assert lane_of("tests/e2e/test_reflection.py::test_x") == "clusters-3"
    assert lane_of("tests/unit/test_config.py::test_x") == "tests/unit/test_config.py::test_x"


@pytest.mark.parametrize("lane", [OWN_STACK_LANE, SECOND_LANE], ids=["OWN_STACK_LANE", "SECOND_LANE"])
def test_every_module_named_for_a_lane_exists(lane: set[str]) -> None:
    """A renamed module would silently move to the third lane and unbalance them."""
    missing = sorted(name for name in lane if not (REPO / "tests" / "e2e" / f"{name}.py").exists())
    assert not missing, f"a lane in tests/conftest.py names modules that do not exist: {missing}"
