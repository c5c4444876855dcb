"""CPU profiles of the clusters' API servers during a bench's timed section, by activity.

The runtime's own CPU is a minority of what an offloaded pod costs: the API servers spend most of
it. Each kube-apiserver serves Go's pprof (`--profiling`, on by default); the admin kubeconfig may
read `/debug/pprof/profile`, which samples for as many seconds as asked. A burst's length is not
known in advance, so profiles of CHUNK_SECONDS are taken one after the other until the section
ends, and `go tool pprof` merges them.

The report gives, per API server, the share of its CPU samples whose stack went through each
activity (pprof's `-focus`): the shares overlap (managed fields are computed inside a create or a
patch) and work an activity hands to another goroutine is not counted in it.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from liqo_stack.dev import paths
from liqo_stack.dev.clusters import DevEnvironment

CHUNK_SECONDS = 3
# activity -> a regular expression over the frames (Go function names) of a sample's stack
ACTIVITIES: dict[str, str] = {
    "garbage collection": r"^runtime\.(gcBgMarkWorker|gcAssistAlloc|bgsweep)",
    "serving watches": r"handlers\.\(\*WatchServer\)\.HandleHTTP",
    "creates": r"CreateResource\.createHandler",
    "patches": r"handlers\.PatchResource|handlers\.\(\*patcher\)",
    "updates": r"handlers\.UpdateResource",
    "custom-resource status writes": r"customresource\.\(\*StatusREST\)\.Update",
    "custom resources (CRD handler)": r"apiextensions-apiserver/pkg/apiserver\.\(\*crdHandler\)",
    "managed fields": r"managedfields/internal\.\(\*FieldManager\)\.(Update|Apply)",
    "admission webhooks": r"admission/plugin/webhook/(mutating|validating)\.",
    "service-account token requests": r"serviceaccount/storage\.\(\*TokenREST\)\.Create",
    "authentication": r"AuthenticateRequest",
    "TLS": r"^crypto/tls\.",
    "etcd storage": r"storage/etcd3\.",
}


@dataclass
class ApiServerProfile:
    """One API server's merged profiles: the seconds sampled and the share of each activity."""

    seconds: float = 0.0
    shares: dict[str, float] = field(default_factory=dict)


def _sampler(kubeconfig: Path, out: Path, stop: threading.Event) -> None:
    """Profile chunks for `out`'s stem until `stop` is set (each chunk runs to its end)."""
    kubectl = str(paths.bin_dir() / "kubectl")
    chunk = 0
    while not stop.is_set():
        target = out.with_name(f"{out.stem}-{chunk}.pb.gz")
        with target.open("wb") as sink:
            query = f"/debug/pprof/profile?seconds={CHUNK_SECONDS}"
            subprocess.run(
                [kubectl, "--kubeconfig", str(kubeconfig), "get", "--raw", query],
                stdout=sink,
                stderr=subprocess.DEVNULL,
                check=False,
                timeout=CHUNK_SECONDS + 30,
            )
        chunk += 1


@contextlib.contextmanager
def apiservers_profiled(
    env: DevEnvironment, clusters: list[str], folder: Path, enabled: bool = True
) -> Iterator[dict[str, ApiServerProfile]]:
    """Profile the API servers of `clusters` while the block runs; the dict holds them afterwards."""
    found: dict[str, ApiServerProfile] = {}
    if not enabled:
        yield found
        return
    if shutil.which("go") is None:
        raise SystemExit("--profile reads the API servers' profiles with `go tool pprof`: Go must be on PATH")
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("apiserver-*.pb.gz"):
        old.unlink()
    stop = threading.Event()
    threads = [
        threading.Thread(target=_sampler, args=(env.kubeconfig(c), folder / f"apiserver-{c}", stop), daemon=True)
        for c in clusters
    ]
    for thread in threads:
        thread.start()
    try:
        yield found
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=CHUNK_SECONDS + 60)
        for cluster_id in clusters:
            chunks = sorted(p for p in folder.glob(f"apiserver-{cluster_id}-*.pb.gz") if p.stat().st_size)
            if chunks:
                found[cluster_id] = summarize(chunks)


_TOTAL = re.compile(r"Total samples = ([0-9.]+)(ms|s)\b")
_SHOWN = re.compile(r"Showing nodes accounting for ([0-9.]+)(ms|s), ([0-9.]+)% of")


def _seconds(value: str, unit: str) -> float:
    return float(value) / (1000 if unit == "ms" else 1)


def focused_share(pprof_header: str) -> float:
    """The share of the samples a `-focus` kept, from the header `go tool pprof -top` prints."""
    shown = _SHOWN.search(pprof_header)
    return float(shown.group(3)) / 100 if shown else 0.0


def sampled_seconds(pprof_header: str) -> float:
    total = _TOTAL.search(pprof_header)
    return _seconds(total.group(1), total.group(2)) if total else 0.0


def _pprof_top(chunks: list[Path], focus: str | None) -> str:
    # every node shown (no fraction dropped): the header then accounts for all the samples kept
    command = ["go", "tool", "pprof", "-top", "-nodefraction=0", "-nodecount=1000000"]
    if focus is not None:
        command.append(f"-focus={focus}")
    done = subprocess.run([*command, *map(str, chunks)], capture_output=True, text=True, check=False, timeout=120)
    return done.stdout


def summarize(chunks: list[Path]) -> ApiServerProfile:
    profile = ApiServerProfile(seconds=sampled_seconds(_pprof_top(chunks, None)))
    for activity, pattern in ACTIVITIES.items():
        profile.shares[activity] = focused_share(_pprof_top(chunks, pattern))
    return profile


def report(profiles: dict[str, ApiServerProfile], title: str, pods: int) -> None:
    """CPU ms per pod of each activity, for each profiled API server (columns: the profiles' names)."""
    if not profiles:
        return
    print(f"\n== API server CPU: {title} (pprof; ms per pod, activities overlap)")
    names = list(profiles)
    width = max(20, *(len(n) + 2 for n in names))
    print(f"  {'activity':<32}" + "".join(f"{n:>{width}}" for n in names))
    print(f"  {'all samples':<32}" + "".join(f"{profiles[n].seconds * 1000 / pods:>{width}.2f}" for n in names))
    for activity in ACTIVITIES:
        cells = (profiles[n].shares.get(activity, 0) * profiles[n].seconds * 1000 / pods for n in names)
        print(f"  {activity:<32}" + "".join(f"{cell:>{width}.2f}" for cell in cells))
