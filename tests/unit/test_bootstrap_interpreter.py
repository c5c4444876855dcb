"""Which Python `scripts/bootstrap.sh` makes `.venv` from (its `venv_interpreter`), run by bash with fake
candidates: wrappers that print the executable they stand for, and an `ldd` on PATH that says which of
those link libpython as a shared library."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

BOOTSTRAP = Path(__file__).resolve().parents[2] / "scripts" / "bootstrap.sh"


def function_source() -> str:
    found = re.search(r"^venv_interpreter\(\) \{.*?^\}$", BOOTSTRAP.read_text(), re.MULTILINE | re.DOTALL)
    assert found, "scripts/bootstrap.sh defines venv_interpreter"
    return found.group(0)


def executable(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    """A folder first on PATH with an `ldd` that calls every executable whose name holds "shared" linked
    to libpython, and the others static. It writes more than a pipe holds after that line, as a reader
    that stops at the first match (`grep -q`) would have it killed by SIGPIPE."""
    folder = tmp_path / "bin"
    folder.mkdir()
    executable(
        folder / "ldd",
        'case "$1" in *shared*) echo "\tlibpython3.11.so.1.0 => /lib/libpython3.11.so.1.0";; esac\n'
        "head -c 200000 /dev/zero | tr '\\0' '\\n'",
    )
    return folder


def run(tools: Path, *candidates: str, preset: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}
    env.pop("LIQO_STACK_PYTHON", None)
    if preset is not None:
        env["LIQO_STACK_PYTHON"] = preset
    script = f'set -euo pipefail\n{function_source()}\nvenv_interpreter "$@"\n'
    return subprocess.run(["bash", "-c", script, "bash", *candidates], env=env, capture_output=True, text=True)


def chosen(tools: Path, *candidates: str, preset: str | None = None) -> str:
    done = run(tools, *candidates, preset=preset)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_static_build_is_preferred_to_a_shared_one_and_a_wrapper_names_its_executable(tools: Path) -> None:
    broken = executable(tools / "broken", "exit 1")
    too_old = executable(tools / "too-old", 'echo ""')  # what the probe prints for Python < 3.11
    shared = executable(tools / "python-shared", "true")
    static = executable(tools / "python-static", "true")
    shared_shim = executable(tools / "shim-1", f'echo "{shared}"')
    static_shim = executable(tools / "shim-2", f'echo "{static}"')
    assert chosen(tools, broken, too_old, shared_shim, static_shim) == static


def test_with_only_shared_builds_the_first_one_is_taken(tools: Path) -> None:
    first = executable(tools / "first-shared", "true")
    second = executable(tools / "second-shared", "true")
    shims = [executable(tools / f"shim-{n}", f'echo "{path}"') for n, path in enumerate((first, second))]
    assert chosen(tools, executable(tools / "broken", "exit 1"), *shims) == first


def test_with_no_usable_candidate_it_is_python3_and_the_preset_always_wins(tools: Path) -> None:
    broken = executable(tools / "broken", "exit 1")
    assert chosen(tools, broken) == "python3"
    static = executable(tools / "python-static", "true")
    preset = executable(tools / "python-preset", 'echo "/opt/python/bin/python3"')
    assert chosen(tools, executable(tools / "shim", f'echo "{static}"'), preset=preset) == preset


def test_a_preset_that_is_no_usable_python_is_refused_naming_the_variable(tools: Path) -> None:
    static = executable(tools / "python-static", "true")
    shim = executable(tools / "shim", f'echo "{static}"')
    for preset in (str(tools / "missing"), executable(tools / "too-old", 'echo ""')):
        done = run(tools, shim, preset=preset)
        assert done.returncode == 2
        assert done.stdout == ""
        assert f"LIQO_STACK_PYTHON={preset} is not a Python 3.11 or newer" in done.stderr
