"""How controllers treat API errors they expect."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from lightkube import ApiError


def status_code_of(err: BaseException) -> int | None:
    """The HTTP status of a failed request, None when no answer came (connection, TLS, timeout)."""
    if isinstance(err, ApiError) and err.status is not None and err.status.code:
        return int(err.status.code)
    response = getattr(err, "response", None)  # httpx2.HTTPStatusError (a list's): an answer that is no Status
    code = getattr(response, "status_code", None) if response is not None else None
    return code if isinstance(code, int) else None


@contextmanager
def unless_gone() -> Iterator[None]:
    """A write to an object that may have been deleted meanwhile: 404 means nothing is left to do."""
    try:
        yield
    except ApiError as err:
        if err.status.code != 404:
            raise
