"""A client whose token changes while it runs (runtime/kube/client.py: a token source): the token of
the moment goes out, a 401 followed by a changed token is sent again. The e2e test
(tests/e2e/test_foreign_guards.py) revokes and reissues a real token."""

from __future__ import annotations

from lightkube.config.models import User

from runtime.kube.client import BearerToken


def test_a_token_source_gives_the_header_of_the_moment() -> None:
    current = {"token": "old"}
    bearer = BearerToken(User(token="from-the-kubeconfig"), lambda: current["token"])
    assert bearer.header() == "Bearer old"
    assert not bearer.renewed(), "a 401 with the same token: nothing to send again"
    current["token"] = "new"
    assert bearer.renewed(), "a 401 after the token changed: sent again"
    assert bearer.header() == "Bearer new"


def test_without_a_source_the_kubeconfig_token_stays() -> None:
    bearer = BearerToken(User(token="fixed"))
    assert bearer.header() == "Bearer fixed"
    assert not bearer.renewed()
