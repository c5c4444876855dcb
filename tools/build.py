#!/usr/bin/env python3
"""Build the pinned Go binaries of tools/toolchain.toml into a cache outside the repository.

Standard library only: it runs on a new machine before any Python package is installed.

Each tool is built from a small wrapper module generated in the cache. The wrapper requires
the upstream module at its pinned version and restates the upstream `replace` directives that
point at local directories (which `go install mod@version` refuses) as the published modules.
A finished build leaves a stamp; a warm machine with every stamp in place builds nothing.

    python3 tools/build.py            # build what is missing, print the bin directory
    python3 tools/build.py --check    # exit 1 if anything is missing, build nothing
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

TOOLS_DIR = Path(__file__).resolve().parent
PINS_FILE = TOOLS_DIR / "toolchain.toml"

sys.path.insert(0, str(TOOLS_DIR.parent))
from liqo_stack.dev.paths import bin_dir, cache_root  # noqa: E402  (stdlib-only module, usable before install)


def load_pins() -> dict[str, dict]:
    with PINS_FILE.open("rb") as fh:
        return tomllib.load(fh)


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    # Never let go switch toolchains behind our back (that would be a download from outside the proxy).
    env["GOTOOLCHAIN"] = "local"
    env["CGO_ENABLED"] = "0"
    env.setdefault("GOFLAGS", "-buildvcs=false")
    return env


def run(cmd: list[str], cwd: Path, log) -> str:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.run(cmd, cwd=cwd, env=go_env(), capture_output=True, text=True)
    log.write(proc.stdout + proc.stderr)
    log.flush()
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise SystemExit(f"command failed in {cwd}: {' '.join(cmd)}\n" + "\n".join(tail) + f"\n(full log: {log.name})")
    return proc.stdout


def upstream_gomod(module: str, version: str, workdir: Path, log) -> dict:
    info = json.loads(run(["go", "mod", "download", "-json", f"{module}@{version}"], workdir, log))
    if "Error" in info:
        raise SystemExit(f"cannot download {module}@{version}: {info['Error']}")
    return json.loads(run(["go", "mod", "edit", "-json", info["GoMod"]], workdir, log))


def restated_replaces(gomod: dict, pin: dict) -> list[str]:
    """Turn upstream replace directives into ones valid outside the upstream repository."""
    required = {r["Path"]: r["Version"] for r in gomod.get("Require") or []}
    lines = []
    for rep in gomod.get("Replace") or []:
        old, new = rep["Old"]["Path"], rep["New"]
        if not new["Path"].startswith("."):
            target = f"{new['Path']} {new['Version']}" if new.get("Version") else new["Path"]
            lines.append(f"{old} => {target}")
            continue
        if "FORBIDDEN" in new["Path"]:
            continue  # guards upstream uses against accidental imports; irrelevant here
        version = required.get(old)
        if not version or version.startswith("v0.0.0"):
            version = pin.get("staging_version")
        if not version:
            raise SystemExit(f"{pin['module']}: no published version known for locally replaced {old}")
        lines.append(f"{old} => {old} {version}")
    return lines


def fields(pin: dict, pins: dict) -> dict[str, str]:
    return {
        "version": pin["version"],
        "kubernetes_version": pins["kubernetes"]["version"],
        "pulumi_version": pins["pulumi"]["version"],
    }


def ldflags(pin: dict, pins: dict) -> str:
    flags = ["-s", "-w"] + [flag.format(**fields(pin, pins)) for flag in pin.get("ldflags", [])]
    version = pin["version"]
    for package in pin.get("version_package", []):
        # Kubernetes stamps its version with -X at release time; unstamped it reports v0.0.0,
        # which pulumi-kubernetes and kwok refuse.
        major, minor = version.lstrip("v").split(".")[:2]
        flags += [
            f"-X {package}.gitVersion={version}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
            f"-X {package}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(flags)


def binary_name(package: str, pin: dict) -> str:
    return pin.get("binary_names", {}).get(package) or package.rstrip("/").split("/")[-1]


def executables(pin: dict) -> list[str]:
    return [binary_name(p, pin) for p in pin["packages"]] + [Path(s).name for s in pin.get("scripts", [])]


def cache_key(pin: dict, pins: dict) -> str:
    key = pin["version"]
    if pin.get("scripts"):
        key += "+scripts-" + pin["scripts_version"].format(**fields(pin, pins))
    return key


def tool_dir(name: str, pin: dict, pins: dict) -> Path:
    return cache_root() / "tools" / f"{name}-{cache_key(pin, pins)}"


def is_built(name: str, pin: dict, pins: dict) -> bool:
    return (tool_dir(name, pin, pins) / "stamp").exists()


def build(name: str, pin: dict, pins: dict) -> None:
    root = tool_dir(name, pin, pins)
    work = root / "module"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (root / "bin").mkdir(exist_ok=True)
    with (root / "build.log").open("w") as log:
        started = time.monotonic()
        gomod = upstream_gomod(pin["module"], pin["version"], work, log)
        wrapper = [f"module liqo-stack.local/tools/{name}", "", f"go {gomod['Go']}", ""]
        wrapper.append(f"require {pin['module']} {pin['version']}")
        replaces = restated_replaces(gomod, pin)
        if replaces:
            wrapper += ["", "replace (", *[f"\t{line}" for line in replaces], ")"]
        (work / "go.mod").write_text("\n".join(wrapper) + "\n")
        for package in pin["packages"]:
            target = pin["module"] if package == "." else f"{pin['module']}/{package}"
            out = root / "bin" / binary_name(package, pin)
            print(f"  building {binary_name(package, pin)} ({target}@{pin['version']})", flush=True)
            run(
                ["go", "build", "-mod=mod", "-trimpath", "-ldflags", ldflags(pin, pins), "-o", str(out), target],
                work,
                log,
            )
        if pin.get("scripts"):
            scripts_version = pin["scripts_version"].format(**fields(pin, pins))
            download = run(["go", "mod", "download", "-json", f"{pin['module']}@{scripts_version}"], work, log)
            source = Path(json.loads(download)["Dir"])
            for script in pin["scripts"]:
                out = root / "bin" / Path(script).name
                shutil.copyfile(source / script, out)
                out.chmod(0o755)
        (root / "stamp").write_text(f"{pin['version']} built in {time.monotonic() - started:.0f}s\n")


def link_bins(pins: dict) -> None:
    target = bin_dir()
    target.mkdir(parents=True, exist_ok=True)
    for name, pin in pins.items():
        if not is_built(name, pin, pins):
            continue
        for exe in executables(pin):
            link = target / exe
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(tool_dir(name, pin, pins) / "bin" / exe)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report whether every pinned tool is built")
    parser.add_argument("names", nargs="*", help="tools to build (default: all)")
    args = parser.parse_args()
    pins = load_pins()
    names = args.names or list(pins)
    unknown = sorted(set(names) - set(pins))
    if unknown:
        parser.error(f"unknown tool(s) {unknown}; known: {sorted(pins)}")
    missing = [n for n in names if not is_built(n, pins[n], pins)]
    if args.check:
        for n in names:
            print(f"{n:12} {pins[n]['version']:10} {'missing' if n in missing else 'ok'}")
        return 1 if missing else 0
    if shutil.which("go") is None:
        raise SystemExit("go is not on PATH: install Go 1.26 or newer, then run tools/build.py again")
    for n in missing:
        print(
            f"{n} {pins[n]['version']}: building into {tool_dir(n, pins[n], pins)} (cold builds take minutes)",
            flush=True,
        )
        started = time.monotonic()
        build(n, pins[n], pins)
        print(f"{n}: done in {time.monotonic() - started:.0f}s", flush=True)
    link_bins(pins)
    print(bin_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
