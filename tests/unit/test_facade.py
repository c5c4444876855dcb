"""`import liqo_stack`: the names a Pulumi program needs, found where they are defined, and imported
only when first used (the CLI and tools/build.py import liqo_stack.* without Pulumi's Kubernetes SDK)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import liqo_stack
from liqo_stack.declaring import components, program
from liqo_stack.declaring.package import components as package_components


def test_the_facade_names_the_program_and_its_components() -> None:
    assert liqo_stack.main is program.main
    assert liqo_stack.LiqoStack is program.LiqoStack
    for name in ("Cluster", "ForeignAgent", "HomeControlPlane", "NamespaceOffloadings"):
        assert getattr(liqo_stack, name) is getattr(components, name)
    # the package's components, under the names the other languages get (a peering's own parts are
    # liqo_stack.declaring.components.Peering)
    for name in ("Stack", "Home", "Peering", "ForeignSide", "OffloadedNamespace"):
        assert getattr(liqo_stack, name) is getattr(package_components, name)
    assert set(liqo_stack.__all__) <= set(dir(liqo_stack))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'program_main'"):
        _ = liqo_stack.program_main


def test_importing_the_package_loads_no_pulumi() -> None:
    probe = (
        "import sys, liqo_stack, liqo_stack.dev.paths; print(sorted(m for m in sys.modules if m.startswith('pulumi')))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
