"""Reading `go tool pprof -top` headers: the CPU sampled, and the share an activity's focus kept."""

from __future__ import annotations

from tests.bench.apiserver_profiles import focused_share, sampled_seconds

FOCUSED = """File: kube-apiserver
Type: cpu
Duration: 20.03s, Total samples = 9330ms (46.58%)
Active filters:
   focus=serviceaccount/storage\\.\\(\\*TokenREST\\)\\.Create
Showing nodes accounting for 0.88s, 9.43% of 9.33s total
      flat  flat%   sum%        cum   cum%
"""

NOTHING_KEPT = """File: kube-apiserver
Type: cpu
Duration: 3s, Total samples = 1.20s (40.00%)
Active filters:
   focus=TokenREST
"""


def test_the_share_the_focus_kept_and_the_seconds_sampled() -> None:
    assert focused_share(FOCUSED) == 0.0943
    assert sampled_seconds(FOCUSED) == 9.33


def test_a_focus_that_kept_nothing_is_no_share() -> None:
    assert focused_share(NOTHING_KEPT) == 0.0
    assert sampled_seconds(NOTHING_KEPT) == 1.2
