"""The tests' deferred `up` results (tests/support/stack_results.py): read on first use, never stale.

The real round trip (an `up`'s outputs and summary read after it) is in e2e/test_stack.py and
e2e/test_pulumi_offline.py; here, what the deferral itself promises, with the reads counted.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from pulumi import automation as auto

from tests.support import stack_results
from tests.support.stack_results import DeferredOutputs, DeferredSummary, StaleResult, _Deferred


def a_stack(name: str = "dev") -> auto.Stack:
    return cast(auto.Stack, SimpleNamespace(name=name, workspace=SimpleNamespace(work_dir="/project")))


def a_command_ran_on(stack: auto.Stack) -> None:
    key = stack_results._key(stack)
    stack_results._commands_run[key] = stack_results._commands_run.get(key, 0) + 1


def test_outputs_are_read_once_on_first_use_and_then_act_as_the_dict_they_are() -> None:
    reads: list[str] = []

    def read() -> dict[str, Any]:
        reads.append("stack output")
        return {"uid": auto.OutputValue("abc", False), "token": auto.OutputValue("s3cr3t", True)}

    outputs = DeferredOutputs(_Deferred(a_stack(), read, "UpResult.outputs"))
    assert reads == [], "nothing read before a test asks"
    assert outputs["uid"].value == "abc"
    assert "token" in outputs and len(outputs) == 2 and sorted(outputs) == ["token", "uid"]
    assert outputs.get("missing") is None and dict(outputs.items())["token"].secret
    assert reads == ["stack output"], "read once"


def test_a_summary_is_read_on_first_use_of_an_attribute() -> None:
    reads: list[str] = []

    def read() -> Any:
        reads.append("stack history")
        return SimpleNamespace(result="succeeded", resource_changes={"same": 3})

    summary = DeferredSummary(_Deferred(a_stack(), read, "the summary"))
    assert reads == []
    assert summary.result == "succeeded" and summary.resource_changes == {"same": 3}
    assert reads == ["stack history"]


def test_a_result_first_read_after_a_later_command_on_its_stack_fails_instead_of_describing_that_one() -> None:
    stack, other = a_stack("stale"), a_stack("other")
    outputs = DeferredOutputs(_Deferred(stack, lambda: {"n": auto.OutputValue(1, False)}, "UpResult.outputs"))
    fresh = DeferredOutputs(_Deferred(stack, lambda: {"n": auto.OutputValue(2, False)}, "UpResult.outputs"))
    assert fresh["n"].value == 2, "read before the next command: kept afterwards"
    a_command_ran_on(other)
    summary = DeferredSummary(_Deferred(stack, lambda: SimpleNamespace(result="succeeded"), "the summary"))
    assert summary.result == "succeeded", "a command on another stack changes nothing"
    a_command_ran_on(stack)
    with pytest.raises(StaleResult, match=r"UpResult\.outputs of stack stale read after a later command"):
        outputs["n"]
    assert fresh["n"].value == 2


def test_the_wrapped_commands_defer_only_their_own_reads() -> None:
    """Inside `up` the Automation API's outputs() and info() are deferred; called by a test, they read."""
    stack_results.read_results_when_asked()  # as tests/conftest.py does; a second call changes nothing
    stack_results.read_results_when_asked()
    stack = auto.Stack.__new__(auto.Stack)
    stack.name, stack.workspace = "wrapped", cast(Any, SimpleNamespace(work_dir="/project", stack_outputs=lambda n: {}))
    assert stack.outputs() == {} and not isinstance(stack.outputs(), DeferredOutputs), "outside a command: read"
    inside: list[Any] = []

    def up(self: auto.Stack, *args: Any, **kwargs: Any) -> Any:
        inside.extend([self.outputs(), self.info()])
        return "result"

    wrapped = stack_results._deferring_results(up)
    assert wrapped(stack) == "result"
    assert isinstance(inside[0], DeferredOutputs) and isinstance(inside[1], DeferredSummary)
    assert not isinstance(stack.outputs(), DeferredOutputs), "and once it returned, read again"
