"""The image recipe's pure parts: what goes in (runtime dependencies only), where it goes (--output)."""

from __future__ import annotations

import importlib.util
import marshal
from pathlib import Path

import pytest

from liqo_stack.operating import image
from liqo_stack.operating.image import (
    ImageBuildError,
    parse_output,
    project_version,
    runtime_requirements,
    wheel_platforms,
)

PROJECT = Path(__file__).resolve().parents[2]


def test_the_image_gets_the_runtime_dependencies_without_the_install_time_ones() -> None:
    requirements = runtime_requirements(PROJECT)
    packages = {r.split("==")[0].lower() for r in requirements}
    assert {"lightkube", "pydantic", "aiohttp", "cryptography", "prometheus-client", "msgspec"} <= packages
    assert not packages & {"pulumi", "click"}
    assert all("==" in r for r in requirements)  # pinned as in pyproject.toml


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("oci-archive:dist/liqo-stack.tar", ("oci-archive", Path("dist/liqo-stack.tar"))),
        ("oci:/tmp/layout", ("oci", Path("/tmp/layout"))),
    ],
)
def test_outputs(output: str, expected: tuple[str, Path]) -> None:
    assert parse_output(output, "0.1.0") == expected


@pytest.mark.parametrize("output", ["docker://registry/liqo-stack:1", "liqo.tar", "oci-archive:"])
def test_a_bad_output_names_the_flag_and_the_forms(output: str) -> None:
    with pytest.raises(ImageBuildError, match=r"--output: .* is not oci-archive:FILE or oci:DIR"):
        parse_output(output, project_version(PROJECT))


def test_wheels_for_every_glibc_up_to_the_images() -> None:
    tags = wheel_platforms("x86_64")
    assert tags[0] == "manylinux_2_36_x86_64"
    assert {"manylinux_2_17_x86_64", "manylinux_2_28_x86_64", "manylinux2014_x86_64"} <= set(tags)
    assert "manylinux_2_38_x86_64" not in tags


def test_the_dependencies_are_installed_once_per_set_of_pins_and_a_cut_off_install_is_redone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip stands in (it would ask PyPI): each install it is asked for makes the target folder."""
    installs: list[list[str]] = []

    def pip(command: list[str], what: str, **kwargs: object) -> str:
        installs.append([arg for arg in command if "==" in arg])
        Path(command[command.index("--target") + 1], "lightkube").mkdir(parents=True)
        return ""

    monkeypatch.setattr(image, "_run", pip)
    pins = ["lightkube==1.0.1", "pydantic==2.14.3"]
    first, cached = image.runtime_dependencies(tmp_path, pins, lambda line: None)
    assert (first / "lightkube").is_dir() and not cached
    again, cached = image.runtime_dependencies(tmp_path, pins, lambda line: None)
    assert (again, cached) == (first, True)
    assert installs == [pins], "installed once"

    other, cached = image.runtime_dependencies(tmp_path, ["lightkube==1.0.2"], lambda line: None)
    assert other != first and not cached, "other pins, another set"
    (other.parent / "complete").unlink()  # as if the build had been killed midway
    _, cached = image.runtime_dependencies(tmp_path, ["lightkube==1.0.2"], lambda line: None)
    assert not cached and installs[-1] == ["lightkube==1.0.2"] and len(installs) == 3


@pytest.mark.skipif(not image.compiles_for_the_image(), reason=f"this Python is not the image's {image.PYTHON}")
def test_the_dependencies_are_cached_compiled_as_the_image_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once, with the install: hash-based .pyc files (the root filesystem is read-only, no timestamp to
    check) naming the sources where the image has them."""

    def pip(command: list[str], what: str, **kwargs: object) -> str:
        package = Path(command[command.index("--target") + 1], "lightkube")
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("def answer():\n    raise RuntimeError('from the image')\n")
        return ""

    monkeypatch.setattr(image, "_run", pip)
    lib, _ = image.runtime_dependencies(tmp_path, ["lightkube==1.0.1"], lambda line: None)
    (compiled,) = (lib / "lightkube" / "__pycache__").glob("__init__.cpython-*.pyc")
    data = compiled.read_bytes()
    assert data[:4] == importlib.util.MAGIC_NUMBER
    assert int.from_bytes(data[4:8], "little") == 0b01, "hash-based, never checked against its source"
    code = marshal.loads(data[16:])
    assert code.co_filename == f"{image.INSTALL_DIR}/lib/lightkube/__init__.py"
