"""Where liqo-stack keeps built tools (cache) and dev clusters (state).

Standard library only: `tools/build.py` imports this before any package is installed.
Both roots can be moved with environment variables, e.g. to give tests a state of their own.
"""

from __future__ import annotations

import os
from pathlib import Path


def _xdg(variable: str, default: str) -> Path:
    value = os.environ.get(variable)
    return Path(value) if value else Path.home() / default


def cache_root() -> Path:
    """Built binaries, keyed by version: $LIQO_STACK_CACHE, else $XDG_CACHE_HOME/liqo-stack."""
    explicit = os.environ.get("LIQO_STACK_CACHE")
    return Path(explicit) if explicit else _xdg("XDG_CACHE_HOME", ".cache") / "liqo-stack"


def bin_dir() -> Path:
    """One directory with every pinned binary (links into the versioned cache)."""
    return cache_root() / "bin"


def plugins_dir() -> Path:
    """Pulumi plugins built from the pinned toolchain, laid out like PULUMI_HOME/plugins (<kind>-<name>-v<version>/)."""
    return cache_root() / "plugins"


def state_root() -> Path:
    """Dev clusters, their kubeconfigs and the Pulumi file backend: $LIQO_STACK_STATE, else $XDG_STATE_HOME."""
    explicit = os.environ.get("LIQO_STACK_STATE")
    return Path(explicit) if explicit else _xdg("XDG_STATE_HOME", ".local/state") / "liqo-stack"


def port_lock() -> Path:
    """One lock per machine (beside the shared cache) held while a cluster picks and binds its ports."""
    return cache_root() / "ports.lock"
