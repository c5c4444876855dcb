"""`python -m pip list -v --format json`, answered from importlib.metadata without importing pip.

The pinned Python language host (pulumi-language-python v3.79.0) runs that command before every
engine operation of a program run from a directory, to find the Pulumi packages and their plugins
(their names, versions and locations). Importing pip is most of its cost: 1.0-1.2 CPU-seconds a
run here, against 0.2 for this listing, in a test suite that is CPU-bound (docs/performance.md).
The offline dev environment runs this instead (liqo_stack/dev/pulumi_offline.py); pip lists the same
distributions, names, versions and locations (tests/unit/test_installed_distributions.py).

Run as a script, by path: standard library only, and nothing of liqo_stack imported.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys


def installed() -> list[dict[str, str]]:
    """Every distribution on sys.path, first found first, once per name (as pip lists them)."""
    listed: dict[str, dict[str, str]] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if not name:  # a broken installation's leftover, naming no package: no Pulumi plugin to find there
            continue
        key = name.lower().replace("_", "-").replace(".", "-")
        # a distribution found twice on sys.path is listed where it is found first, as pip and import do
        if key not in listed:
            # the folder its metadata is in (site-packages): where pip says it is, editable or not
            listed[key] = {"name": name, "version": dist.version, "location": str(dist.locate_file(""))}
    return list(listed.values())


if __name__ == "__main__":
    sys.path[0] = os.getcwd()  # where `python -m pip` looks first, rather than this script's folder
    json.dump(installed(), sys.stdout)
