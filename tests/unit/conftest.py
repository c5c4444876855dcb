"""Unit tests reach no cluster: the program's one read of the clusters it declares objects in (whether
it would take over an object it did not create, liqo_stack/declaring/claims.py) finds nothing there.
Its rules are tested in test_claims.py; its reads, end to end (tests/e2e/test_foreign_guards.py)."""

from __future__ import annotations

import pytest

from liqo_stack.declaring import claims


@pytest.fixture(autouse=True)
def nothing_to_take_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claims, "check", lambda *_: None)
