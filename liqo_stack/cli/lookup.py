"""Objects the CLI reads or removes that may not be there: a 404 is an answer, not a failure."""

from __future__ import annotations

from typing import Any

from lightkube import ApiError, Client


def get_or_none(client: Client, kind: Any, name: str, namespace: str | None = None) -> Any | None:
    try:
        return client.get(kind, name, namespace=namespace)
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise


def delete_if_present(client: Client, kind: Any, name: str, namespace: str | None = None) -> None:
    try:
        client.delete(kind, name, namespace=namespace)
    except ApiError as err:
        if err.status.code != 404:
            raise
