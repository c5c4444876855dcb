"""Kubeconfigs the unit tests write: the smallest one a client can load."""

from __future__ import annotations

from typing import Any


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
