"""How `bash scripts/test.sh` splits the suite over its two workers (tests/conftest.py)."""

from __future__ import annotations

from tests.conftest import FIRST_LANE, REPO, lane_of


def test_each_cluster_tier_module_has_one_lane_and_unit_tests_run_anywhere() -> None:
    assert lane_of("tests/integration/test_informer.py::test_x") == "clusters-1"
    assert lane_of("tests/e2e/test_stack.py::test_x[a::b]") == "clusters-1"
    assert lane_of("tests/e2e/test_reflection.py::test_x") == "clusters-2"
    assert lane_of("tests/unit/test_config.py::test_x") == "tests/unit/test_config.py::test_x"


def test_every_module_named_for_the_first_lane_exists() -> None:
    """A renamed module would silently move to the other lane and unbalance them."""
    missing = sorted(name for name in FIRST_LANE if not (REPO / "tests" / "e2e" / f"{name}.py").exists())
    assert not missing, f"FIRST_LANE in tests/conftest.py names modules that do not exist: {missing}"
