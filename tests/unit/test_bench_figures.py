"""The benches' arithmetic: profiles from collapsed stacks, the webhook quantile from two scrapes."""

from __future__ import annotations

from tests.bench.bench_offloading import histogram_quantile
from tests.bench.profiling import Profile


def test_a_profile_counts_own_and_total_samples_per_function() -> None:
    profile = Profile()
    profile.add_collapsed(
        "main (runtime/__main__.py:10);reconcile (runtime/pods.py:40);patch (lightkube/async_client.py:9) 30\n"
        "main (runtime/__main__.py:10);reconcile (runtime/pods.py:41) 10\n"
        "garbage line\n"
    )
    assert profile.samples == 40
    assert profile.own["patch (async_client.py)"] == 30
    assert profile.own["reconcile (pods.py)"] == 10  # lines 40 and 41 are one function
    assert profile.total["reconcile (pods.py)"] == 40
    assert profile.total["main (__main__.py)"] == 40


def test_a_recursive_function_counts_once_per_sample_in_total() -> None:
    profile = Profile()
    profile.add_collapsed("deepcopy (copy.py:1);_deepcopy_dict (copy.py:2);deepcopy (copy.py:1) 5")
    assert profile.total["deepcopy (copy.py)"] == 5


def test_the_webhook_quantile_is_of_what_happened_between_the_scrapes() -> None:
    before = {0.005: 100.0, 0.01: 100.0, 0.025: 100.0, float("inf"): 100.0}
    after = {0.005: 150.0, 0.01: 198.0, 0.025: 200.0, float("inf"): 200.0}  # 100 new: 50 fast, 48 mid, 2 slow
    assert histogram_quantile(before, after, 0.5) == 0.005
    assert histogram_quantile(before, after, 0.99) == 0.025
    assert histogram_quantile(after, after, 0.99) is None  # nothing observed
