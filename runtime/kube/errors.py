"""How controllers treat API errors they expect."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from lightkube import ApiError


@contextmanager
def unless_gone() -> Iterator[None]:
    """A write to an object that may have been deleted meanwhile: 404 means nothing is left to do."""
    try:
        yield
    except ApiError as err:
        if err.status.code != 404:
            raise
