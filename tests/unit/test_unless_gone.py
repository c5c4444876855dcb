"""unless_gone: a 404 ends a write quietly, any other API error still surfaces."""

from __future__ import annotations

import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from runtime.kube import unless_gone


def api_error(code: int) -> ApiError:
    return ApiError(status=Status(code=code, message=f"HTTP {code}"))


def test_not_found_is_swallowed() -> None:
    with unless_gone():
        raise api_error(404)


@pytest.mark.parametrize("code", [403, 409, 500])
def test_other_api_errors_surface(code: int) -> None:
    with pytest.raises(ApiError), unless_gone():
        raise api_error(code)
