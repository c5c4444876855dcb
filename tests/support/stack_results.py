"""The results of the tests' `up`, `refresh` and `destroy`, read from the stack only when a test asks.

pulumi's Automation API ends each of them by starting more CLI processes that read back what the
command just wrote: `stack output` twice (plain, then `--show-secrets`) for `UpResult.outputs`, and
`stack history --show-secrets` for `.summary`. Each opens the stack and derives the passphrase's key
(PBKDF2, a million rounds): about 1.2 s of a loaded machine after every `up`, some 130 times a run,
for results most tests never read. `read_results_when_asked()` (tests/conftest.py) makes them
deferred: read on first use, as the Automation API would have read them. A result first read after a
later command on the same stack would describe that command instead; that read fails, saying so.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from pulumi import automation as auto

_Command = TypeVar("_Command", bound=Callable[..., Any])
_deferring = threading.local()  # set while one of the wrapped commands runs, in its thread
_commands_run: dict[tuple[str, str], int] = {}  # (stack, workspace dir) -> commands that changed its history


def _key(stack: auto.Stack) -> tuple[str, str]:
    return stack.name, str(stack.workspace.work_dir)


class StaleResult(RuntimeError):
    """A deferred result read after another command on its stack: it would describe that one."""


class _Deferred:
    def __init__(self, stack: auto.Stack, read: Callable[[], Any], what: str) -> None:
        self._stack, self._read, self._what = stack, read, what
        self._as_of = _commands_run.get(_key(stack), 0)
        self._value: Any = None
        self._done = False

    def value(self) -> Any:
        if not self._done:
            if _commands_run.get(_key(self._stack), 0) != self._as_of:
                raise StaleResult(
                    f"{self._what} of stack {self._stack.name} read after a later command on it: "
                    "read a result before the next up, refresh or destroy"
                )
            self._value, self._done = self._read(), True
        return self._value


class DeferredOutputs(dict[str, auto.OutputValue]):
    """`UpResult.outputs`, a dict filled by `stack output` on first use."""

    def __init__(self, deferred: _Deferred) -> None:
        super().__init__()
        self._unread: _Deferred | None = deferred

    def _filled(self) -> DeferredOutputs:
        if self._unread is not None:
            self.update(self._unread.value())
            self._unread = None
        return self

    def __getitem__(self, key: str) -> auto.OutputValue:
        return dict.__getitem__(self._filled(), key)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self._filled(), key)

    def __iter__(self) -> Iterator[str]:
        return dict.__iter__(self._filled())

    def __len__(self) -> int:
        return dict.__len__(self._filled())

    def __eq__(self, other: object) -> bool:
        return dict.__eq__(self._filled(), other)

    def __repr__(self) -> str:
        return dict.__repr__(self._filled())

    def get(self, key: str, default: Any = None) -> Any:
        return dict.get(self._filled(), key, default)

    def keys(self) -> Any:
        return dict.keys(self._filled())

    def values(self) -> Any:
        return dict.values(self._filled())

    def items(self) -> Any:
        return dict.items(self._filled())


class DeferredSummary:
    """`.summary`, an UpdateSummary read by `stack history` on first use of any of its attributes."""

    def __init__(self, deferred: _Deferred) -> None:
        self._deferred = deferred

    def __getattr__(self, name: str) -> Any:  # only for names this object lacks: the summary's
        return getattr(self._deferred.value(), name)


def _deferring_results(command: _Command) -> _Command:
    @functools.wraps(command)
    def run(self: auto.Stack, *args: Any, **kwargs: Any) -> Any:
        _commands_run[_key(self)] = _commands_run.get(_key(self), 0) + 1  # before: its results are as of this one
        _deferring.active = True
        try:
            return command(self, *args, **kwargs)
        finally:
            _deferring.active = False

    return run  # type: ignore[return-value]


def read_results_when_asked() -> None:
    """Wrap pulumi's Automation API for this process (idempotent)."""
    if getattr(auto.Stack, "_results_deferred", False):
        return
    read_outputs, read_info = auto.Stack.outputs, auto.Stack.info

    def outputs(self: auto.Stack) -> auto.OutputMap:
        if not getattr(_deferring, "active", False):
            return read_outputs(self)
        return DeferredOutputs(_Deferred(self, lambda: read_outputs(self), "UpResult.outputs"))

    def info(self: auto.Stack, show_secrets: bool = True) -> Any:
        if not getattr(_deferring, "active", False):
            return read_info(self, show_secrets)
        return DeferredSummary(_Deferred(self, lambda: read_info(self, show_secrets), "the summary"))

    auto.Stack.outputs = outputs  # type: ignore[method-assign]
    auto.Stack.info = info  # type: ignore[method-assign]
    for name in ("up", "refresh", "destroy"):
        setattr(auto.Stack, name, _deferring_results(getattr(auto.Stack, name)))
    auto.Stack._results_deferred = True  # type: ignore[attr-defined]
