"""The dev environment's answer to the language host's `python -m pip list -v --format json`
(liqo_stack/dev/installed_distributions.py through PulumiEnvironment.python_command): what pip says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from liqo_stack.dev.pulumi_offline import PulumiEnvironment, _runs_python3_from_path

PIP_LIST = ["-m", "pip", "list", "-v", "--format", "json"]


def _run(command: list[str], cwd: Path) -> str:
    # the language host runs `python3` from PATH: this interpreter's, as the dev environment's PATH says
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout


def _by_name(listing: str) -> dict[str, tuple[str, str]]:
    return {entry["name"]: (entry["version"], entry["location"]) for entry in json.loads(listing)}


@pytest.fixture
def python_command(tmp_path: Path) -> Path:
    return PulumiEnvironment(state_dir=tmp_path / "pulumi", bin_dir=tmp_path / "bin").python_command()


def test_the_listing_names_every_distribution_as_pip_does_with_its_version_and_location(
    python_command: Path, tmp_path: Path
) -> None:
    ours = _by_name(_run([str(python_command), *PIP_LIST], cwd=tmp_path))
    pips = _by_name(_run([sys.executable, *PIP_LIST], cwd=tmp_path))
    assert ours == pips
    assert "pulumi_kubernetes" in ours  # the package whose plugin the language host looks for


def test_anything_else_runs_as_python3_would(python_command: Path, tmp_path: Path) -> None:
    said = _run([str(python_command), "-c", "import sys; print(sys.executable, sys.argv[1:])", "a b", "c"], tmp_path)
    assert said.split(" ", 1)[1].strip() == "['a b', 'c']"
    assert Path(said.split(" ", 1)[0]).parent == Path(sys.executable).parent
    # pip itself still answers any other listing: without -v it names no locations
    listed = json.loads(_run([str(python_command), "-m", "pip", "list", "--format", "json"], tmp_path))
    assert {"pulumi_kubernetes"} <= {entry["name"] for entry in listed}
    assert not any("location" in entry for entry in listed)


@pytest.mark.parametrize(
    ("project", "expected"),
    [
        ("runtime: python\n", True),
        ("runtime:\n  name: python\n", True),
        ("runtime:\n  name: python\n  options:\n    virtualenv: venv\n", False),
        ("runtime: nodejs\n", False),
        ("runtime: yaml\n", False),
    ],
)
def test_only_python_programs_without_a_virtualenv_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: str, expected: bool
) -> None:
    (tmp_path / "Pulumi.yaml").write_text(f"name: p\n{project}")
    assert _runs_python3_from_path(tmp_path) is expected
    # the workspace's other settings need the built toolchain; only this one is looked at here
    monkeypatch.setattr(PulumiEnvironment, "env_vars", lambda self: {})
    monkeypatch.setattr(PulumiEnvironment, "command", lambda self: None)
    options = PulumiEnvironment(state_dir=tmp_path / "pulumi", bin_dir=tmp_path / "bin").workspace_options(tmp_path)
    assert ("PULUMI_PYTHON_CMD" in (options.env_vars or {})) is (expected and "PULUMI_PYTHON_CMD" not in os.environ)
