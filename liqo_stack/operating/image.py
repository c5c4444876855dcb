"""The runtime's OCI image, built without Docker or a registry: `liqo-stack image build`.

Two layers on no base image (nothing is pulled from a registry):
1. a minimal Debian (`debootstrap --variant=minbase` of bookworm, with Python 3.11) stripped of
   documentation and package caches, plus an unprivileged user (65532, as distroless' `nonroot`);
   cached outside the repo, keyed by the recipe, so a rebuild only redoes layer 2;
2. the runtime: the project's wheel without the install-time side (`liqo_stack`, Pulumi, click) and
   the runtime's dependencies as binary wheels from PyPI, compiled to bytecode at build time, since
   a read-only root filesystem leaves Python nowhere to write it. The dependencies, once installed,
   are cached beside the base, keyed by their pins and the platform (their own dependencies stay at
   the versions first resolved: delete `deps-*` in the cache to resolve again), so a rebuild after a
   change of the code installs only the project's wheel (about 5 s instead of 40 on a pip that asks
   PyPI for each).

umoci assembles the OCI layout, skopeo writes the output (`oci-archive:FILE` or `oci:DIR`).
Needs root (debootstrap, chroot) and the Debian packages debootstrap, umoci and skopeo.
"""

from __future__ import annotations

import compileall
import fcntl
import hashlib
import json
import os
import platform
import py_compile
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from liqo_stack.dev import paths
from runtime.api import names

SUITE = "bookworm"  # Debian 12: Python 3.11, the version the project is developed and checked with
PYTHON = "3.11"
GLIBC_MINOR = 36  # bookworm's glibc 2.36: which binary wheels run in the image
BASE_PACKAGES = ("python3",)
# Install-time dependencies: the runtime never imports them (it must run without Pulumi).
INSTALL_TIME_ONLY = frozenset({"click", "pulumi", "pulumi-kubernetes"})
REQUIRED_TOOLS = ("debootstrap", "umoci", "skopeo", "chroot")
INSTALL_DIR = "/opt/liqo-stack"
HOME_DIR = "/home/nonroot"
# Bumped when the base recipe below changes, so a cached base of an older recipe is not reused.
BASE_RECIPE = 1
# What a minimal image does not need (the package manager's caches, docs, translations).
STRIPPED = (
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "var/cache/apt",
    "var/cache/debconf",
    "var/lib/apt/lists",
    "var/log",
)

Progress = Callable[[str], None]


class ImageBuildError(RuntimeError):
    """The image could not be built; the message says what to install or change."""


@dataclass(frozen=True)
class BuiltImage:
    output: str  # as given: oci-archive:FILE or oci:DIR
    reference: str  # name:tag inside the output
    digest: str  # of the image manifest: what `liqo:runtime.imageDigest` takes
    compressed_bytes: int  # config + layers, as pushed to a registry
    rootfs_bytes: int  # unpacked
    seconds: float
    base_cached: bool
    dependencies_cached: bool


def project_version(project_dir: Path) -> str:
    return str(tomllib.loads((project_dir / "pyproject.toml").read_text())["project"]["version"])


def runtime_requirements(project_dir: Path) -> list[str]:
    """The project's pinned dependencies minus the install-time ones."""
    dependencies: list[str] = tomllib.loads((project_dir / "pyproject.toml").read_text())["project"]["dependencies"]
    return [d for d in dependencies if d.split("==")[0].split("[")[0].strip().lower() not in INSTALL_TIME_ONLY]


def parse_output(output: str, version: str) -> tuple[str, Path]:
    """`oci-archive:FILE` or `oci:DIR` -> (transport, path); a clear error for anything else."""
    transport, _, where = output.partition(":")
    if transport not in ("oci-archive", "oci") or not where:
        raise ImageBuildError(
            f"--output: {output!r} is not oci-archive:FILE or oci:DIR "
            f"(e.g. oci-archive:dist/{names.RUNTIME_IMAGE_NAME}-{version}.tar)"
        )
    return transport, Path(where)


def _run(command: list[str], what: str, **kwargs: object) -> str:
    result = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise ImageBuildError(f"{what} failed (exit {result.returncode}): {' '.join(command[:6])} ...\n{tail}")
    return str(result.stdout)


def check_prerequisites() -> None:
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        raise ImageBuildError(
            f"missing {', '.join(missing)}: install them with `apt-get install -y debootstrap umoci skopeo` "
            "(Debian/Ubuntu; runc too for the smoke test)"
        )
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap and chroot need root: run `liqo-stack image build` as root")


def _base_key() -> str:
    machine = platform.machine()
    recipe = json.dumps([BASE_RECIPE, SUITE, BASE_PACKAGES, STRIPPED, names.RUNTIME_USER_ID, machine])
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def _made_once(folder: Path, make: Callable[[Path], None]) -> bool:
    """`folder` made by `make` unless a build already completed it; whether it had. Two builds at once (two
    checkouts, a test beside a user) share it: the second waits for the first's. One cut off midway is
    made again."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / f"{folder.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / "complete").is_file():
            return True
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        started = time.monotonic()
        make(folder)
        (folder / "complete").write_text(f"{time.monotonic() - started:.0f}s\n")
        return False


def base_rootfs(cache: Path, mirror: str, progress: Progress) -> tuple[Path, bool]:
    """The cached Debian root (layer 1) and whether it was already there."""
    folder = cache / f"base-{SUITE}-{_base_key()}"
    return folder / "rootfs", _made_once(folder, lambda made: _debootstrap(made, mirror, progress))


def _debootstrap(folder: Path, mirror: str, progress: Progress) -> None:
    rootfs = folder / "rootfs"
    progress(f"base: debootstrap --variant=minbase {SUITE} with {', '.join(BASE_PACKAGES)} from {mirror} ...")
    started = time.monotonic()
    _run(
        ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(rootfs), mirror],
        "debootstrap",
    )
    for stripped in STRIPPED:
        target = rootfs / stripped
        if target.is_dir():
            for child in target.iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    uid = names.RUNTIME_USER_ID
    with (rootfs / "etc/passwd").open("a") as passwd:
        passwd.write(f"nonroot:x:{uid}:{uid}:nonroot:{HOME_DIR}:/usr/sbin/nologin\n")
    with (rootfs / "etc/group").open("a") as group:
        group.write(f"nonroot:x:{uid}:\n")
    home = rootfs / HOME_DIR.lstrip("/")
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, uid, uid)
    python = rootfs / "usr/bin/python"
    if not python.exists():
        python.symlink_to("python3")  # the entrypoint is `python -m runtime`
    progress(f"base: done in {time.monotonic() - started:.0f}s, cached in {folder}")


def wheel_platforms(machine: str) -> list[str]:
    """Every manylinux tag the image's glibc (2.36, bookworm) runs: pip takes them one by one."""
    return [
        *(f"manylinux_2_{minor}_{machine}" for minor in range(GLIBC_MINOR, 16, -1)),
        *(f"{legacy}_{machine}" for legacy in ("manylinux2014", "manylinux2010", "manylinux1")),
    ]


def runtime_dependencies(cache: Path, requirements: list[str], progress: Progress) -> tuple[Path, bool]:
    """The runtime's dependencies installed for the image's Python (`pip install --target`), and whether
    they were already cached; shared by concurrent builds as the base is."""
    binary = [
        *("--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp"),
        *(arg for tag in wheel_platforms(platform.machine()) for arg in ("--platform", tag)),
        *("--no-compile", "--disable-pip-version-check"),
    ]
    compiled = compiles_for_the_image()
    key = hashlib.sha256(json.dumps([requirements, binary, compiled]).encode()).hexdigest()[:12]
    folder = cache / f"deps-{key}"

    def install(made: Path) -> None:
        progress(f"runtime: installing {', '.join(requirements)} (binary wheels for Python {PYTHON}) ...")
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(made / "lib"), *binary]
        _run([*pip, *requirements], "pip install of the runtime's dependencies")
        if compiled:  # once with them, not at every build (10-20 s of each, most of its compileall)
            progress("runtime: compiling the dependencies to bytecode ...")
            _compile(made / "lib", f"{INSTALL_DIR}/lib")

    return folder / "lib", _made_once(folder, install)


def compiles_for_the_image() -> bool:
    """This Python writes the bytecode the image's reads: one magic number per minor version, and hash-based
    .pyc files name no timestamp, so the dependencies are compiled here, once, as they are cached."""
    return f"{sys.version_info.major}.{sys.version_info.minor}" == PYTHON


def _compile(folder: Path, image_path: str) -> None:
    """Bytecode beside each source under `folder`, as the image's Python would write it at `image_path` (the
    path its tracebacks name); checked against nothing at import: the root filesystem is read-only."""
    invalidation = py_compile.PycInvalidationMode.UNCHECKED_HASH
    if not compileall.compile_dir(str(folder), ddir=image_path, quiet=1, invalidation_mode=invalidation):
        raise ImageBuildError(f"compileall of {folder} failed: a source above does not compile")


def install_runtime(project_dir: Path, rootfs: Path, work: Path, cache: Path, progress: Progress) -> tuple[Path, bool]:
    """Layer 2 under `rootfs`/opt/liqo-stack (rootfs: a hard-linked copy of the base, for chroot), and
    whether its dependencies were cached."""
    wheels = work / "wheels"
    progress("runtime: building the project's wheel ...")
    # From a copy: a build in the checkout would write build/ and *.egg-info beside the sources in use.
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(project_dir / name, source / name)
    for package in ("runtime", "liqo_stack"):
        shutil.copytree(project_dir / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(source)],
        "pip wheel",
    )
    (wheel,) = wheels.glob("*.whl")
    lib = rootfs / INSTALL_DIR.lstrip("/") / "lib"
    dependencies, cached = runtime_dependencies(cache, runtime_requirements(project_dir), progress)
    if cached:
        progress(f"runtime: dependencies cached ({dependencies.parent})")
    lib.parent.mkdir(parents=True, exist_ok=True)
    # hard links, as the base: instant; compileall below adds files beside them and changes none
    _run(["cp", "-al", str(dependencies), str(lib)], "copying the cached dependencies")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]
    _run([*pip, "--target", str(lib), "--no-deps", str(wheel)], "pip install of the project's wheel")
    # The install-time side stays out: the image runs `python -m runtime` only.
    shutil.rmtree(lib / "liqo_stack", ignore_errors=True)
    shutil.rmtree(lib / "bin", ignore_errors=True)
    progress("runtime: compiling to bytecode (the root filesystem is read-only at run time) ...")
    # the dependencies came compiled from the cache where this Python could (runtime_dependencies)
    inside = f"{INSTALL_DIR}/lib/runtime" if compiles_for_the_image() else f"{INSTALL_DIR}/lib"
    _run(
        ["chroot", str(rootfs), "python3", "-m", "compileall", "-q", "--invalidation-mode", "unchecked-hash", inside],
        "compileall in the image",
    )
    return rootfs / INSTALL_DIR.lstrip("/"), cached


def _tree_bytes(root: Path) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder, name)
            if not path.is_symlink():
                total += path.lstat().st_size
    return total


def build(
    output: str,
    *,
    project_dir: Path,
    progress: Progress = print,
    cache: Path | None = None,
    mirror: str | None = None,
) -> BuiltImage:
    started = time.monotonic()
    if not (project_dir / "pyproject.toml").is_file():
        raise ImageBuildError(f"{project_dir} is not a liqo-stack checkout (no pyproject.toml): build from one")
    version = project_version(project_dir)
    transport, target = parse_output(output, version)
    check_prerequisites()
    cache = cache or paths.cache_root() / "image"
    mirror = mirror or os.environ.get("LIQO_STACK_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    base, base_cached = base_rootfs(cache, mirror, progress)
    if base_cached:
        progress(f"base: cached ({base.parent})")
    tag = version
    with tempfile.TemporaryDirectory(prefix="liqo-image-", dir=cache) as tmp:
        work = Path(tmp)
        rootfs = work / "rootfs"
        _run(["cp", "-al", str(base), str(rootfs)], "copying the base root")  # hard links: instant
        app, dependencies_cached = install_runtime(project_dir, rootfs, work, cache, progress)
        layout = work / "layout"
        image = f"{layout}:{tag}"
        progress("image: assembling the OCI layout (umoci) ...")
        _run(["umoci", "init", "--layout", str(layout)], "umoci init")
        _run(["umoci", "new", "--image", image], "umoci new")
        _run(["umoci", "insert", "--image", image, str(base), "/"], "umoci insert of the base")
        _run(["umoci", "insert", "--image", image, str(app), INSTALL_DIR], "umoci insert of the runtime")
        labels = {
            "org.opencontainers.image.title": names.RUNTIME_IMAGE_NAME,
            "org.opencontainers.image.version": version,
            "org.opencontainers.image.description": (
                f"liqo-stack runtime (python -m runtime <component>) on Debian {SUITE} minbase"
            ),
        }
        config = [
            *(f"--config.label={k}={v}" for k, v in labels.items()),
            *(f"--manifest.annotation={k}={v}" for k, v in labels.items()),
            f"--config.user={names.RUNTIME_USER_ID}:{names.RUNTIME_USER_ID}",
            *("--config.entrypoint=python", "--config.entrypoint=-m", "--config.entrypoint=runtime"),
            "--config.cmd=--help",
            f"--config.env=PYTHONPATH={INSTALL_DIR}/lib",
            "--config.env=PYTHONDONTWRITEBYTECODE=1",
            "--config.env=PYTHONUNBUFFERED=1",
            f"--config.env=HOME={HOME_DIR}",
            "--config.env=PATH=/usr/local/bin:/usr/bin:/bin",
            f"--config.workingdir={HOME_DIR}",
            "--history.created_by=liqo-stack image build",
        ]
        _run(["umoci", "config", "--image", image, *config], "umoci config")
        _run(["umoci", "gc", "--layout", str(layout)], "umoci gc")
        rootfs_bytes = _tree_bytes(rootfs)
        progress(f"image: writing {transport}:{target} (skopeo) ...")
        target.parent.mkdir(parents=True, exist_ok=True)
        if transport == "oci-archive":
            target.unlink(missing_ok=True)
        else:
            shutil.rmtree(target, ignore_errors=True)
        digest_file = work / "digest"
        reference = f"{names.RUNTIME_IMAGE_NAME}:{tag}"
        destination = f"{transport}:{target}:{reference if transport == 'oci-archive' else tag}"
        _run(
            ["skopeo", "copy", "--quiet", "--digestfile", str(digest_file), f"oci:{image}", destination],
            "skopeo copy",
        )
        digest = digest_file.read_text().strip()
        index = json.loads((layout / "index.json").read_text())
        manifest_digest = index["manifests"][0]["digest"]
        manifest = json.loads((layout / "blobs" / Path(*manifest_digest.split(":"))).read_text())
        compressed = manifest["config"]["size"] + sum(layer["size"] for layer in manifest["layers"])
    seconds = time.monotonic() - started
    return BuiltImage(output, reference, digest, compressed, rootfs_bytes, seconds, base_cached, dependencies_cached)
