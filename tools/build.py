#!/usr/bin/env python3
"""Build the pinned Go binaries of tools/toolchain.toml into a cache outside the repository.

Standard library only: it runs on a new machine before any Python package is installed.

Each tool is built from a small wrapper module generated in the cache. The wrapper requires
the upstream module at its pinned version and restates the upstream `replace` directives that
point at local directories (which `go install mod@version` refuses) as the published modules.
All binaries of one tool come from ONE `go build` (they share most packages; one invocation
compiles each once and links them side by side). The next tool's modules download while the
current one compiles. A finished build leaves a stamp; a warm machine with every stamp in place
builds nothing. Progress goes to stdout as plain lines (no terminal tricks, so CI logs read
well): which tool and binaries, n of m, packages compiled, elapsed time, and a "still ..."
line every --progress-interval seconds. Each tool's full log is <cache>/tools/<tool>-<version>/build.log;
a failure names it.

    python3 tools/build.py              # build what is missing, print the bin directory
    python3 tools/build.py --check      # exit 1 if anything is missing, build nothing
    python3 tools/build.py --jobs 1     # compile one tool at a time (default 2; see tools/NOTES.md)
    python3 tools/build.py --with-optional  # also the pins marked `optional` (what only the tests need)
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

TOOLS_DIR = Path(__file__).resolve().parent
PINS_FILE = TOOLS_DIR / "toolchain.toml"
PROGRESS_INTERVAL = 20.0  # seconds between "still ..." lines of a running build
LARGE_GC_MEMORY = 8 << 30  # free memory from which the compilers run with GOGC=400
MEMORY_PER_JOB = 3 << 30  # a kube-apiserver link peaks near 2 GiB; leave headroom per parallel build

sys.path.insert(0, str(TOOLS_DIR.parent))
from liqo_stack.dev.paths import bin_dir, cache_root  # noqa: E402  (stdlib-only module, usable before install)


class BuildError(Exception):
    """One tool failed; the message ends with the path of its full log."""


def load_pins(path: Path = PINS_FILE) -> dict[str, dict]:
    with path.open("rb") as fh:
        return tomllib.load(fh)


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    # Never let go switch toolchains behind our back (that would be a download from outside the proxy).
    env["GOTOOLCHAIN"] = "local"
    env["CGO_ENABLED"] = "0"
    env.setdefault("GOFLAGS", "-buildvcs=false")
    available = memory_available()
    if available is not None and available >= LARGE_GC_MEMORY:
        # The compilers and linkers collect garbage less often: 10-20% less CPU for the standard
        # library (tools/NOTES.md) for ~25% more memory per compiler. No effect on the cache keys.
        env.setdefault("GOGC", "400")
    return env


def elapsed(seconds: float) -> str:
    """Like Go prints durations, to the second: 130 -> 2m10s."""
    seconds = int(seconds)
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def run(
    cmd: list[str],
    cwd: Path,
    log: IO[str],
    on_line: Callable[[str], bool] | None = None,
    on_cpu: Callable[[float], None] | None = None,
) -> str:
    """Run `cmd`, its stderr streamed line by line into `log` and `on_line` (which returns True for
    progress lines); return its stdout. `on_cpu` gets the CPU seconds the command and its children
    (compile, link) used. Raises BuildError with the last lines that were not progress."""
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    tail: collections.deque[str] = collections.deque(maxlen=15)
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=go_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace"
    )
    stdout: list[str] = []
    reader = threading.Thread(target=lambda: stdout.extend(proc.stdout or []), daemon=True)
    reader.start()
    for line in proc.stderr or []:
        log.write(line)
        log.flush()
        if on_line is None or not on_line(line.rstrip("\n")):
            tail.append(line.rstrip("\n"))
    reader.join()
    out = "".join(stdout)
    log.write(out)
    log.flush()
    # wait4, not wait: its usage includes the compilers and linkers go ran (they are its reaped children)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if on_cpu:
        on_cpu(usage.ru_utime + usage.ru_stime)
    if proc.returncode != 0:
        lines = list(tail) or out.strip().splitlines()[-15:]
        raise BuildError(f"`{' '.join(cmd[:2])} ...` failed in {cwd}:\n    " + "\n    ".join(lines))
    return out


def download(module: str, version: str, workdir: Path, log: IO[str]) -> dict:
    """`go mod download -json`: where the module's go.mod (`GoMod`) and its sources (`Dir`) are."""
    info: dict = json.loads(run(["go", "mod", "download", "-json", f"{module}@{version}"], workdir, log))
    if "Error" in info:
        raise BuildError(f"cannot download {module}@{version}: {info['Error']}")
    return info


def parsed_gomod(path: str, workdir: Path, log: IO[str]) -> dict:
    parsed: dict = json.loads(run(["go", "mod", "edit", "-json", path], workdir, log))
    return parsed


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
        version = pin.get("replace_versions", {}).get(old) or required.get(old)
        if not version or version.startswith("v0.0.0"):
            version = pin.get("staging_version")
        if not version:
            raise SystemExit(f"{pin['module']}: no published version known for locally replaced {old}")
        lines.append(f"{old} => {old} {version}")
    return lines


def fields(pin: dict, pins: dict) -> dict[str, str]:
    return {
        "version": pin["version"],
        "release": pin.get("release", pin["version"]),
        "kubernetes_version": pins.get("kubernetes", {}).get("version", ""),
        "pulumi_version": pins.get("pulumi", {}).get("version", ""),
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


def target(package: str, pin: dict) -> str:
    if pin.get("main"):
        return "."  # the wrapper module is the command itself (its files come from the repository)
    return pin["module"] if package == "." else f"{pin['module']}/{package}"


def main_sources(pin: dict) -> list[Path]:
    """The Go files of a pin's own command (`main`, a directory of this repository)."""
    return sorted((TOOLS_DIR.parent / pin["main"]).glob("*.go")) if pin.get("main") else []


def go_default_name(import_path: str) -> str:
    """The file name `go build -o DIR` gives a main package: its last element, skipping a /vN suffix."""
    parts = import_path.rstrip("/").split("/")
    return parts[-2] if len(parts) > 1 and re.fullmatch(r"v[0-9]+", parts[-1]) else parts[-1]


def executables(pin: dict) -> list[str]:
    return [binary_name(p, pin) for p in pin["packages"]] + [Path(s).name for s in pin.get("scripts", [])]


# -- generated files a package embeds -------------------------------------------------------------


def go_json(value: object) -> str:
    """`value` as Go's json.Marshal writes it: compact, non-ASCII as is, and <, >, &, U+2028 and
    U+2029 escaped (Go's HTML-safe default). Python writes the same escapes for control characters."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char, escape in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escape)
    return text


def pulumi_kubernetes_embeds(source: Path, pin: dict, pins: dict) -> None:
    """What upstream's `go generate` (cmd/pulumi-resource-kubernetes/generate.go) writes, without
    compiling Pulumi's codegen packages for it (minutes of CPU to set one field):
    - schema-embed.json: schema.json re-marshalled through `schema.PackageSpec` with `version` set.
      The checked-in file is already in the struct's field order with empty fields omitted, so
      the bytes are schema.json compacted with `version` after `displayName`, as the struct has it;
    - terraform-mapping-embed.json: terraform-mapping.json through `interface{}`, whose maps Go
      writes with sorted keys.
    tools/NOTES.md says how the bytes were checked against the Go generator's."""
    package = source / "cmd" / "pulumi-resource-kubernetes"
    schema = json.loads((package / "schema.json").read_text())
    versioned: dict = {}
    for key, value in schema.items():
        versioned[key] = value
        if key == "displayName":
            versioned["version"] = fields(pin, pins)["release"]
    if "version" not in versioned:
        raise BuildError(f"{package / 'schema.json'} has no displayName to place the version after")
    (package / "schema-embed.json").write_text(go_json(versioned))
    mapping = json.loads((package / "terraform-mapping.json").read_text())
    (package / "terraform-mapping-embed.json").write_text(go_json(sort_keys(mapping)))


def sort_keys(value: object) -> object:
    if isinstance(value, dict):
        return {key: sort_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [sort_keys(item) for item in value]
    return value


EMBEDS: dict[str, Callable[[Path, dict, dict], None]] = {"pulumi-kubernetes": pulumi_kubernetes_embeds}


def writable_copy(source: Path, target: Path) -> None:
    """The module cache is read-only; the generated files go into a copy of the module."""
    shutil.copytree(source, target, copy_function=shutil.copyfile)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def cache_key(pin: dict, pins: dict) -> str:
    key = pin["version"]
    if pin.get("scripts"):
        key += "+scripts-" + pin["scripts_version"].format(**fields(pin, pins))
    if pin.get("main"):  # an edit of the command's source is a new build
        digest = hashlib.sha256(b"".join(path.read_bytes() for path in main_sources(pin))).hexdigest()
        key += "+main-" + digest[:12]
    return key


def tool_dir(name: str, pin: dict, pins: dict) -> Path:
    return cache_root() / "tools" / f"{name}-{cache_key(pin, pins)}"


def is_built(name: str, pin: dict, pins: dict) -> bool:
    return (tool_dir(name, pin, pins) / "stamp").exists()


# -- progress -------------------------------------------------------------------------------------


class Reporter:
    """Plain progress lines, one print at a time (builds run in threads)."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self.out = out or sys.stdout
        self.lock = threading.Lock()

    def say(self, line: str) -> None:
        with self.lock:
            print(line, file=self.out, flush=True)


@dataclass
class ToolBuild:
    """One tool's build and what it is doing now (read by the "still ..." lines)."""

    name: str
    pin: dict
    pins: dict
    index: int
    total: int
    phase: str = "waiting"
    started: float = 0.0
    phase_started: float = 0.0
    downloads: int = 0
    last_download: str = ""
    packages: set[str] = field(default_factory=set)  # what `go list -deps` says the build needs
    compiled: int = 0
    last_compiled: str = ""
    linking: list[str] = field(default_factory=list)
    failed: str | None = None
    seconds: float = 0.0  # from the start of its downloads to its stamp
    download_seconds: float = 0.0
    compile_seconds: float = 0.0
    cpu_seconds: float = 0.0  # of the compile: divided by compile_seconds, the cores it kept busy

    def add_cpu(self, seconds: float) -> None:
        self.cpu_seconds += seconds

    @property
    def prefix(self) -> str:
        return f"[{self.index}/{self.total}] {self.name}"

    @property
    def root(self) -> Path:
        return tool_dir(self.name, self.pin, self.pins)

    @property
    def log(self) -> Path:
        return self.root / "build.log"

    @property
    def binaries(self) -> list[str]:
        return [binary_name(p, self.pin) for p in self.pin["packages"]]

    def status(self, now: float) -> str:
        """The "still ..." line: phase, what is compiled or linking, time since the phase began."""
        if self.phase == "downloading":
            detail = f"{self.downloads} modules so far" + (f", last {self.last_download}" if self.last_download else "")
        elif self.phase == "compiling":
            detail = f"{self.compiled}/{len(self.packages) or '?'} packages compiled"
            detail += f", linking {', '.join(self.linking)}" if self.linking else ""
            detail += f", last {self.last_compiled}" if self.last_compiled and not self.linking else ""
        else:
            detail = ""
        what = ", ".join(self.binaries) if self.phase == "compiling" else ""
        text = f"{self.prefix}: still {self.phase}" + (f" {what}" if what else "")
        return text + (f" ({detail})" if detail else "") + f" {elapsed(now - self.phase_started)}"

    # -- go output parsers: return True for lines that are progress, not diagnostics --------------
    def on_download(self, line: str) -> bool:
        if line.startswith("go: downloading "):
            self.downloads += 1
            self.last_download = line.removeprefix("go: downloading ")
            return True
        return False

    def on_compile(self, line: str) -> bool:
        if line not in self.packages:
            return False
        self.compiled += 1
        self.last_compiled = line
        for package in self.pin["packages"]:
            if target(package, self.pin) == line:  # the main package: its link starts now
                self.linking.append(binary_name(package, self.pin))
        return True


def prepare(build: ToolBuild, reporter: Reporter) -> None:
    """Network phase: the wrapper module, and every module the build needs, downloaded."""
    pin, root = build.pin, build.root
    work = root / "module"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    build.started = build.phase_started = time.monotonic()
    build.phase = "downloading"
    reporter.say(f"{build.prefix} {pin['version']}: downloading modules (full log: {build.log})")
    with build.log.open("w") as log:
        upstream = download(pin["module"], pin["version"], work, log)
        gomod = parsed_gomod(upstream["GoMod"], work, log)
        wrapper = [f"module liqo-stack.local/tools/{build.name}", "", f"go {gomod['Go']}", ""]
        wrapper.append(f"require {pin['module']} {pin['version']}")
        replaces = restated_replaces(gomod, pin)
        if pin.get("embeds"):
            # built from a copy with the generated files in place, like upstream's `go generate && go build`
            writable_copy(Path(upstream["Dir"]), work / "upstream")
            EMBEDS[pin["embeds"]](work / "upstream", pin, build.pins)
            replaces.append(f"{pin['module']} => ./upstream")
        if replaces:
            wrapper += ["", "replace (", *[f"\t{line}" for line in replaces], ")"]
        (work / "go.mod").write_text("\n".join(wrapper) + "\n")
        for source in main_sources(pin):
            shutil.copyfile(source, work / source.name)
        targets = [target(p, pin) for p in pin["packages"]]
        # resolves and downloads what the build needs; the list is the "m" of the progress lines
        listed = run(["go", "list", "-mod=mod", "-deps", *targets], work, log, build.on_download)
        build.packages = set(listed.split())
        if pin.get("scripts"):
            scripts_version = pin["scripts_version"].format(**fields(pin, build.pins))
            run(["go", "mod", "download", "-json", f"{pin['module']}@{scripts_version}"], work, log)
    build.phase = "waiting to compile"
    build.download_seconds = time.monotonic() - build.started
    reporter.say(
        f"{build.prefix}: modules ready in {elapsed(build.download_seconds)} ({build.downloads} downloaded, "
        f"the others were in the Go module cache); {len(build.packages)} packages to build"
    )


def compile_tool(build: ToolBuild, reporter: Reporter) -> None:
    """CPU phase: one `go build` of every binary of the tool, then its scripts and the stamp."""
    pin, root = build.pin, build.root
    work, out = root / "module", root / "bin"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    build.phase = "compiling"
    reporter.say(
        f"{build.prefix}: compiling {', '.join(build.binaries)} (one go build, {len(build.packages)} packages)"
    )
    targets = [target(p, pin) for p in pin["packages"]]
    # one target: -o names the file; several: -o names the directory and go names each binary
    destination = out / build.binaries[0] if len(targets) == 1 else out
    compile_started = build.phase_started = time.monotonic()
    with build.log.open("a") as log:
        cmd = ["go", "build", "-v", "-mod=mod", "-trimpath", "-ldflags", ldflags(pin, build.pins)]
        run(
            [*cmd, "-o", f"{destination}{os.sep}" if destination == out else str(destination), *targets],
            work,
            log,
            build.on_compile,
            build.add_cpu,
        )
        for package in pin["packages"] if len(targets) > 1 else []:
            default = out / go_default_name(target(package, pin))
            if default.name != binary_name(package, pin):
                default.rename(out / binary_name(package, pin))
        if pin.get("scripts"):
            scripts_version = pin["scripts_version"].format(**fields(pin, build.pins))
            download = run(["go", "mod", "download", "-json", f"{pin['module']}@{scripts_version}"], work, log)
            source = Path(json.loads(download)["Dir"])
            for script in pin["scripts"]:
                shutil.copyfile(source / script, out / Path(script).name)
                (out / Path(script).name).chmod(0o755)
    build.compile_seconds = time.monotonic() - compile_started
    build.seconds = time.monotonic() - build.started
    summary = (
        f"downloads {elapsed(build.download_seconds)}, compile {elapsed(build.compile_seconds)} "
        f"using {build.cpu_seconds / max(build.compile_seconds, 1):.1f} of {os.cpu_count()} cores"
    )
    (root / "stamp").write_text(f"{pin['version']} built in {build.seconds:.0f}s ({summary})\n")
    build.phase = "done"
    reporter.say(
        f"{build.prefix}: done: {summary}; {', '.join(executables(pin))}; "
        f"{build.compiled} packages compiled, the others came from the Go build cache"
    )


def build_all(
    builds: list[ToolBuild], jobs: int, reporter: Reporter, interval: float = PROGRESS_INTERVAL
) -> list[ToolBuild]:
    """Downloads run ahead of the compiles, one tool at a time; `jobs` tools compile at once. Returns the failed."""
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(interval):
            now = time.monotonic()
            for build in builds:
                if build.phase in ("downloading", "compiling"):
                    reporter.say(build.status(now))

    def guarded(step: Callable[[ToolBuild, Reporter], None], build: ToolBuild) -> None:
        if build.failed:
            return
        try:
            step(build, reporter)
        except (BuildError, SystemExit, OSError) as err:
            build.failed = str(err)
            build.phase = "failed"
            took = elapsed(time.monotonic() - build.started) if build.started else "0s"
            reporter.say(f"{build.prefix}: FAILED after {took}: {err}")
            reporter.say(f"{build.prefix}: full log: {build.log}")

    ticker = threading.Thread(target=heartbeat, daemon=True)
    ticker.start()
    try:
        with ThreadPoolExecutor(1) as downloads, ThreadPoolExecutor(jobs) as compiles:
            prepared: list[Future[None]] = [downloads.submit(guarded, prepare, b) for b in builds]
            done = [
                compiles.submit(lambda b=b, p=p: (p.result(), guarded(compile_tool, b)))
                for b, p in zip(builds, prepared, strict=True)
            ]
            for future in done:
                future.result()
    finally:
        stop.set()
    return [b for b in builds if b.failed]


def memory_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def plugin_dir(pin: dict, pins: dict) -> Path:
    """<cache>/plugins/<kind>-<name>-v<release>: laid out like PULUMI_HOME/plugins, from which
    liqo_stack.dev.pulumi_offline installs each plugin into a PULUMI_HOME."""
    plugin = pin["plugin"]
    return cache_root() / "plugins" / f"{plugin['kind']}-{plugin['name']}-v{fields(pin, pins)['release']}"


def replace_link(link: Path, target: Path, *, hard: bool = False) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    if hard:
        link.hardlink_to(target)
    else:
        link.symlink_to(target)


def link_bins(pins: dict) -> None:
    target_dir = bin_dir()
    target_dir.mkdir(parents=True, exist_ok=True)
    for name, pin in pins.items():
        if not is_built(name, pin, pins):
            continue
        built = tool_dir(name, pin, pins) / "bin"
        if pin.get("plugin"):
            plugins = plugin_dir(pin, pins)
            plugins.mkdir(parents=True, exist_ok=True)
            for exe in executables(pin):
                replace_link(plugins / exe, built / exe)
            continue
        host = pin.get("bundled_with")
        if host and is_built(host, pins[host], pins):
            # hard links: Pulumi resolves symlinks before it compares the two places (tools/NOTES.md)
            host_bin = tool_dir(host, pins[host], pins) / "bin"
            for exe in executables(pin):
                replace_link(host_bin / exe, built / exe, hard=True)
            built = host_bin
        for exe in executables(pin):
            replace_link(target_dir / exe, built / exe)


def main(argv: list[str] | None = None, out: IO[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report whether every pinned tool is built")
    parser.add_argument(
        "--jobs",
        type=int,
        default=int(os.environ.get("LIQO_STACK_BUILD_JOBS", "2")),
        help="tools compiled at once (default 2, env LIQO_STACK_BUILD_JOBS); capped by free memory",
    )
    parser.add_argument(
        "--progress-interval", type=float, default=PROGRESS_INTERVAL, help="seconds between 'still ...' lines"
    )
    parser.add_argument("--pins", type=Path, default=PINS_FILE, help=argparse.SUPPRESS)  # tests use their own
    parser.add_argument(
        "--with-optional",
        action="store_true",
        default=os.environ.get("LIQO_STACK_BUILD_OPTIONAL") == "1",
        help="also build the pins marked `optional` (env LIQO_STACK_BUILD_OPTIONAL=1); scripts/test.sh does",
    )
    parser.add_argument("names", nargs="*", help="tools to build (default: all but the optional ones)")
    args = parser.parse_args(argv)
    reporter = Reporter(out)
    pins = load_pins(args.pins)
    names = args.names or [n for n, pin in pins.items() if args.with_optional or not pin.get("optional")]
    unknown = sorted(set(names) - set(pins))
    if unknown:
        parser.error(f"unknown tool(s) {unknown}; known: {sorted(pins)}")
    missing = [n for n in names if not is_built(n, pins[n], pins)]
    if args.check:
        width = max(map(len, names))
        for n in names:
            reporter.say(f"{n:{width}} {'missing' if n in missing else 'ok':7} {pins[n]['version']}")
        return 1 if missing else 0
    if missing and shutil.which("go") is None:
        raise SystemExit("go is not on PATH: install Go 1.26 or newer, then run tools/build.py again")
    if missing:
        jobs = max(1, min(args.jobs, len(missing)))
        available = memory_available()
        if available is not None and jobs > 1:
            jobs = max(1, min(jobs, available // MEMORY_PER_JOB))
        started = time.monotonic()
        reporter.say(
            f"toolchain: building {len(missing)} of {len(names)} pinned tools ({', '.join(missing)}) into "
            f"{cache_root() / 'tools'}; a cold build takes minutes. {jobs} compiling at a time, downloads ahead."
        )
        builds = [ToolBuild(n, pins[n], pins, i, len(missing)) for i, n in enumerate(missing, 1)]
        failed = build_all(builds, jobs, reporter, args.progress_interval)
        link_bins(pins)
        times = ", ".join(
            f"{b.name} {elapsed(b.download_seconds)} + {elapsed(b.compile_seconds)}" for b in builds if not b.failed
        )
        total = elapsed(time.monotonic() - started)
        built = len(builds) - len(failed)
        reporter.say(f"toolchain: {built} of {len(builds)} built in {total} (downloads + compile: {times or 'none'})")
        if failed:
            reporter.say("toolchain: FAILED: " + "; ".join(f"{b.name} (full log: {b.log})" for b in failed))
            return 1
    else:
        link_bins(pins)
    reporter.say(str(bin_dir()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
