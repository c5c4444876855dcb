"""Kubeconfigs the tests write (the smallest one a client can load) and read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from liqo_stack.declaring.config import current_cluster


def one_cluster_kubeconfig(server: str, *, user: bool = True) -> dict[str, Any]:
    """One cluster at `server` and a current context on it; `user=False`: the context names no user."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", **({"user": "u"} if user else {})}}],
        "current-context": "ctx",
        **({"users": [{"name": "u", "user": {}}]} if user else {}),
    }


def server_of(kubeconfig: Path) -> str:
    """The API server of a kubeconfig file's current context, as the stack reads it."""
    server: str = current_cluster(kubeconfig.read_text())["server"]
    return server
