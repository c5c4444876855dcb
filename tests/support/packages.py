"""The package's example programs (examples/package-*) as a user's own project: copied to a directory of
their own, with the package named by its absolute path (in the checkout, `../../package`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from pulumi import automation as auto

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "package"


def project_from_example(example: Path, directory: Path) -> Path:
    for source in example.iterdir():
        if source.is_file():
            shutil.copy(source, directory / source.name)
    manifest = directory / "Pulumi.yaml"
    text = manifest.read_text()
    assert "liqo-stack: ../../package" in text, f"{example}: Pulumi.yaml names the package by ../../package"
    manifest.write_text(text.replace("../../package", str(PACKAGE)))
    return directory


def resources_of(stack: auto.Stack) -> dict[str, Any]:
    """The stack's resources in its state, by URN."""
    deployment = stack.export_stack().deployment
    assert deployment is not None
    return {r["urn"]: r for r in deployment["resources"]}
