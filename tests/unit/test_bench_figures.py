"""The benches' arithmetic: profiles from collapsed stacks, the webhook quantile from two scrapes,
writes counted from an audit log that rotates."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench.bench_offloading import audit_mark, audited_writes, histogram_quantile
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


def audit_line(verb: str, resource: str) -> str:
    return json.dumps({"userAgent": "python-httpx2/1.0", "verb": verb, "objectRef": {"resource": resource}}) + "\n"


def test_writes_are_counted_across_a_rotation_of_the_audit_log(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(audit_line("create", "pods"))
    mark = audit_mark(log)
    with log.open("a") as out:
        out.write(audit_line("patch", "pods"))
    log.rename(tmp_path / "audit-2026-11-23T21-30-00.000.log")  # as the API server rotates it
    log.write_text(audit_line("create", "secrets") + audit_line("patch", "pods"))

    assert audited_writes(mark) == {"python-httpx2: patch pods": 2, "python-httpx2: create secrets": 1}
    assert audited_writes(audit_mark(log)) == {}
