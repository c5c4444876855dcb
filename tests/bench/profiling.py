"""Sampling profiles of the runtime's processes during a bench's timed section (py-spy).

py-spy attaches to running processes from outside (ptrace; the benches run as root here), so the
runtime runs unmodified and unslowed but for the sampling. Each process's samples are written as
collapsed stacks; the report gives, per process, the functions holding most samples on their own
(self) and with what they call (total), as a share of that process's samples.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from liqo_stack.dev.external_runtime import ExternalRuntime

SAMPLE_RATE = 200  # per second: enough for a burst of a few seconds, light on a 2-core machine


@dataclass
class Profile:
    """One process's samples: function -> samples where it ran itself, and where it was on the stack."""

    samples: int = 0
    own: Counter[str] = field(default_factory=Counter)
    total: Counter[str] = field(default_factory=Counter)

    def add_collapsed(self, text: str) -> None:
        for line in text.splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = [_function(frame) for frame in stack.split(";")]
            self.samples += int(count)
            self.own[frames[-1]] += int(count)
            for function in set(frames):
                self.total[function] += int(count)


def _function(frame: str) -> str:
    """'reconcile (runtime/reflection/reflector.py:271)' -> 'reconcile (reflector.py)': lines apart merged."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({Path(path).name})" if path else name


def py_spy() -> str | None:
    found = Path(sys.executable).with_name("py-spy")
    return str(found) if found.exists() else shutil.which("py-spy")


@contextlib.contextmanager
def profiled(runtime: ExternalRuntime, folder: Path, enabled: bool = True) -> Iterator[dict[str, Profile]]:
    """Sample every runtime process while the block runs; the dict holds the profiles afterwards."""
    profiles: dict[str, Profile] = {}
    binary = py_spy()
    if not enabled:
        yield profiles
        return
    if binary is None:
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy (it is in the dev extras)")
    folder.mkdir(parents=True, exist_ok=True)
    running: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    for component in runtime.components:
        pid = runtime.pid(component)
        if pid is None:
            continue
        out = folder / f"{component}.collapsed"
        command = [binary, "record", "--pid", str(pid), "--rate", str(SAMPLE_RATE), "--format", "raw"]
        command += ["--output", str(out), "--nonblocking"]
        running[component] = (subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), out)
    try:
        yield profiles
    finally:
        for process, _ in running.values():
            process.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        for component, (process, out) in running.items():
            _, errors = process.communicate(timeout=60)
            if not out.exists():
                print(f"  [profile] {component}: no samples ({errors.decode().strip()[-200:]})", flush=True)
                continue
            profile = Profile()
            profile.add_collapsed(out.read_text(errors="replace"))  # frames may hold any bytes
            profiles[component] = profile


def report(profiles: dict[str, Profile], title: str, top: int = 12) -> None:
    print(f"\n== profile: {title} (py-spy, {SAMPLE_RATE} samples/s; share of each process's samples)")
    for component, profile in sorted(profiles.items(), key=lambda item: -item[1].samples):
        if not profile.samples:
            continue
        print(f"  {component}: {profile.samples} samples ({profile.samples / SAMPLE_RATE:.1f} s of stacks)")
        print(f"      {'self':>6} {'total':>6}  function")
        for function, samples in profile.own.most_common(top):
            share, total = samples / profile.samples, profile.total[function] / profile.samples
            print(f"      {share:6.1%} {total:6.1%}  {function}")
