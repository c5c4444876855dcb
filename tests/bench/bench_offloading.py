"""Offloading benchmark: pods offloaded through a virtual node vs the same pods created directly.

    .venv/bin/python -m tests.bench.bench_offloading [--bursts 10,100,1000] [--rounds 2] [--singles 40] [--idle 60]
        [--compare-bounds ROUNDS [--compare-bounds-only] [--bounds-states on,off,nodes,objects]]

Starts its own home and foreign cluster (state under $LIQO_STACK_STATE/bench-offloading, both API
servers writing an audit log of every write), installs the stack with `pulumi up`, runs the
runtime as local processes (external mode) and offloads namespace `bench` (Remote strategy).
Then, in one run and alternating the two ways round by round:
- bursts: N bare pods created with the same client and concurrency, or one Deployment of N
  replicas (`--workload`; a 10-replica Deployment is the rollout most users make), either directly
  in a foreign namespace (the vanilla baseline) or in the offloaded home namespace; the time until
  all N are Running where they were created (for offloaded pods: at home, status reflected back);
- CPU: the seconds each cluster component and runtime process used during a burst, both ways;
- single pods: one at a time, time until Running, p50/p99 of each way and the added latency;
- memory: RSS and PSS of the runtime processes before the first burst, when the last 1,000-pod
  offloaded burst is Running, and MEMORY_SETTLE_SECONDS later (the runtime trims its heap every 30 s);
- connections: the most the virtual kubelet holds to the foreign API server during each offloaded
  burst (sampled from /proc every 0.2 s), and idle;
- idle: with 100 offloaded pods and nothing changing, the writes each API server receives in
  `--idle` seconds, from its audit log, by client (the node Lease heartbeat counted apart).
Prints the figures and the ratios offloaded / direct. With `--compare-bounds`, first: offloaded bursts
of the largest size with the foreign side's bounds on (issue 59: the nodes admission policy bound for
the home, the twin's ResourceQuota of objects) and off, alternated, and the agent's own per-pod check.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import resource
import shutil
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.admissionregistration_v1 import ValidatingAdmissionPolicyBinding
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace, Pod, ResourceQuota, Secret

from liqo_stack.declaring import manifests
from liqo_stack.dev import paths
from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment, NodeShape
from liqo_stack.dev.external_runtime import SHARED_KUBELET, ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names
from runtime.api.nodeaccess import NodeRules
from runtime.api.quota import twin_object_limits, twin_object_quota
from runtime.api.resources import ShadowPodResource
from runtime.kube import Event, Informer
from tests.bench.apiserver_profiles import ApiServerProfile, apiservers_profiled
from tests.bench.apiserver_profiles import report as report_apiservers
from tests.bench.pinning import add_pinning_option, cpu_plan, describe, pin, unpin
from tests.bench.profiling import Profile, profiled
from tests.bench.profiling import report as report_profile
from tests.bench.stages import DIRECT_STAGES, OFFLOADED_STAGES, StageClock, percentile
from tests.support.kube import free_port, metric_samples, node_ready, offload, wait_phase, wait_until
from tests.support.sockets import api_ports, established_by_port

REPO = Path(__file__).resolve().parents[2]
HOME, FOREIGN = "home", "foreign-1"
OFFLOADED = "bench"  # offloaded home namespace; its twin in the foreign cluster is bench-home
TWIN = f"{OFFLOADED}-{HOME}"
DIRECT = "bench-direct"  # plain foreign namespace for the vanilla baseline
PLAIN = "bench-plain"  # home namespace not offloaded: the home half of the floor (way `both`)
WAYS = ("direct", "offloaded", "both")
WEBHOOK_METRIC = "apiserver_admission_webhook_admission_duration_seconds_bucket"
OWN_WEBHOOK_METRIC = "liqo_webhook_admission_seconds_bucket"
CONCURRENCY = 20
TARGET_MEMORY_MB = 200
# past the runtime's heap trim (every 30 s, runtime/kube/memory.py) after a burst's last status
MEMORY_SETTLE_SECONDS = 40
# Two fake nodes of 1,000 pods each: a 1,000-pod burst fits the virtual node's 90 % share even
# while the foreign cluster still holds a previous burst.
LAYOUT = ClusterLayout(foreign=1, nodes_per_cluster=2, node=NodeShape(cpu="256", memory="1Ti", pods=1000))
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
"""


def pod_body(name: str, namespace: str, burst: str) -> Pod:
    container = {"name": "app", "image": "nginx:1.27", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
    meta = {"name": name, "namespace": namespace, "labels": {"burst": burst}}
    return Pod.from_dict({"metadata": meta, "spec": {"containers": [container]}})  # type: ignore[return-value]


def bench_client(env: DevEnvironment, cluster_id: str) -> AsyncClient:
    """The benches' own async client of a cluster (admin credentials)."""
    return AsyncClient(KubeConfig.from_file(env.kubeconfig(cluster_id)), field_manager="bench")


class Clusters:
    def __init__(self, env: DevEnvironment) -> None:
        self.env = env
        self.home = bench_client(env, HOME)
        self.foreign = bench_client(env, FOREIGN)

    def where(self, offloaded: bool) -> tuple[AsyncClient, str]:
        return (self.home, OFFLOADED) if offloaded else (self.foreign, DIRECT)


async def bounded(calls: Iterable[Awaitable[Any]], concurrency: int = CONCURRENCY) -> None:
    """Await the calls `concurrency` at a time, as a client with that many connections would."""
    gate = asyncio.Semaphore(concurrency)

    async def one(call: Awaitable[Any]) -> None:
        async with gate:
            await call

    await asyncio.gather(*(one(call) for call in calls))


async def run_until_running(
    client: AsyncClient,
    namespace: str,
    burst: str,
    count: int,
    clock: StageClock | None = None,
    create_seconds: list[float] | None = None,
) -> float:
    """Create `count` pods (CONCURRENCY at a time); seconds until all are Running where created.
    `create_seconds` gets how long each create call took (admission included)."""
    done = await _running_watch(client, namespace, burst, count)
    started = time.perf_counter()

    async def create(index: int) -> None:
        name = f"{burst}-{index}"
        if clock is not None:
            clock.mark(name, "submitted")
        sent = time.perf_counter()
        await client.create(pod_body(name, namespace, burst))
        if create_seconds is not None:
            create_seconds.append(time.perf_counter() - sent)

    await bounded(create(index) for index in range(count))
    await asyncio.wait_for(done, timeout=max(600, count * 0.5))
    return time.perf_counter() - started


async def run_deployment_until_running(client: AsyncClient, namespace: str, burst: str, count: int) -> float:
    """One Deployment of `count` replicas; seconds until all its pods are Running where created."""
    done = await _running_watch(client, namespace, burst, count)
    started = time.perf_counter()
    template = pod_body("", namespace, burst).to_dict()
    template["metadata"] = {"labels": {"burst": burst}}
    deployment: Any = Deployment.from_dict({
        "metadata": {"name": burst, "namespace": namespace, "labels": {"burst": burst}},
        "spec": {"replicas": count, "selector": {"matchLabels": {"burst": burst}}, "template": template},
    })  # fmt: skip
    await client.create(deployment)
    await asyncio.wait_for(done, timeout=max(600, count * 0.5))
    return time.perf_counter() - started


async def _running_watch(client: AsyncClient, namespace: str, burst: str, count: int) -> asyncio.Future[None]:
    """A future done once `count` pods of the burst are Running in `namespace` (watch already synced)."""
    running: set[str] = set()
    done = asyncio.Event()

    def on_event(event: Event) -> None:
        status = event.obj.status
        if event.type != "DELETED" and status is not None and status.phase == "Running":
            running.add(event.key)
            if len(running) == count:
                done.set()

    informer = Informer(client, Pod, namespace=namespace, labels={"burst": burst})
    informer.add_handler(on_event)
    watching = asyncio.create_task(informer.run())
    await informer.synced.wait()

    async def wait() -> None:
        try:
            await done.wait()
        finally:
            watching.cancel()

    return asyncio.ensure_future(wait())


async def delete_if_there(client: AsyncClient, name: str, namespace: str) -> None:
    """A Deployment's pods may be gone already: its deletion takes them along."""
    try:
        await client.delete(Pod, name, namespace=namespace)
    except ApiError as err:
        if err.status.code != 404:
            raise


async def delete_all(clusters: Clusters, burst: str) -> None:
    """Delete a burst's pods wherever they are, and wait until none is left (remote copies and
    ShadowPods included)."""
    # where a burst's pods and Deployment are made (a Deployment left would make its pods again)
    created_in = ((clusters.home, OFFLOADED), (clusters.home, PLAIN), (clusters.foreign, DIRECT))
    for client, namespace in created_in:
        with contextlib.suppress(ApiError):  # a burst of bare pods has no Deployment
            await client.delete(Deployment, burst, namespace=namespace)
    deletes = [
        delete_if_there(client, pod.metadata.name, namespace)  # type: ignore[union-attr, arg-type]
        for client, namespace in created_in
        async for pod in client.list(Pod, namespace=namespace, labels={"burst": burst})
    ]
    await bounded(deletes)

    async def left() -> int:
        total = 0
        for client, namespace in (*created_in, (clusters.foreign, TWIN)):  # and the remote copies
            total += len([p async for p in client.list(Pod, namespace=namespace, labels={"burst": burst})])
        # the ShadowPods too: the garbage collector's work on them (their orphan finalizer) would
        # otherwise spill into the next burst's figures
        shadows = clusters.foreign.list(ShadowPodResource, namespace=TWIN, labels={"burst": burst})
        return total + len([s async for s in shadows])

    deadline = time.monotonic() + 600
    while await left():
        if time.monotonic() > deadline:
            raise TimeoutError(f"pods of burst {burst} still there after 600 s")
        await asyncio.sleep(1)


# -- the measurements ---------------------------------------------------------------------------
@dataclass
class BurstFigures:
    """One burst size, workload and pinning mode: both ways, every round."""

    seconds: dict[str, list[float]] = field(default_factory=lambda: {way: [] for way in WAYS})
    stages: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # way -> stage -> per-pod seconds
    # way -> point -> per round, seconds from the first submit until the last pod passed it
    last_reached: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # way -> cluster -> 'client: verb resource' -> writes/pod (last round of each way)
    writes_by_kind: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    cpu_per_pod: dict[str, dict[str, float]] = field(default_factory=dict)  # way -> process -> CPU s/pod
    cpu_window: dict[str, float] = field(default_factory=dict)  # way -> wall seconds cpu_per_pod was counted over
    webhook_seconds: dict[str, list[float]] = field(default_factory=dict)  # way -> home admission webhook p99s
    # the webhook's own p99s (its handler, from the controller-manager's histogram), offloaded bursts
    own_webhook_seconds: list[float] = field(default_factory=list)
    # seconds of each pod create call at home: in the offloaded namespace, and in one that is not
    home_creates: dict[str, list[float]] = field(default_factory=lambda: {"offloaded": [], "not offloaded": []})
    # the most connections the virtual kubelet held to the foreign API server during each offloaded burst
    peak_connections: list[int] = field(default_factory=list)


def kubelet_connections(env: DevEnvironment, runtime: ExternalRuntime) -> int | None:
    """The virtual kubelet's open connections to the foreign API server now (one process: its peering's)."""
    pid = runtime.pid(SHARED_KUBELET) or runtime.pid(f"kubelet-{FOREIGN}")
    if pid is None:
        return None
    (port,) = api_ports(env, [FOREIGN])
    try:
        return established_by_port(pid)[port]
    except OSError:
        return None


@contextlib.asynccontextmanager
async def peak_connections(env: DevEnvironment, runtime: ExternalRuntime, found: list[int]) -> Any:
    """Samples kubelet_connections every 0.2 s while the block runs; its most goes to `found`."""
    most = 0

    async def sample() -> None:
        nonlocal most
        while True:
            most = max(most, kubelet_connections(env, runtime) or 0)
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample())
    try:
        yield
    finally:
        sampler.cancel()
        found.append(most)


async def webhook_buckets(client: AsyncClient) -> dict[float, float]:
    """The home API server's cumulative admission-webhook latency histogram (mutating, all webhooks)."""
    response = await client._client._client.get("/metrics")  # lightkube's httpx client, admin credentials
    response.raise_for_status()
    buckets: dict[float, float] = {}
    for line in response.text.splitlines():
        if line.startswith(WEBHOOK_METRIC) and 'type="admit"' in line:
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            le = float("inf") if bound == "+Inf" else float(bound)
            buckets[le] = buckets.get(le, 0.0) + float(line.rsplit(" ", 1)[1])
    return buckets


async def own_webhook_buckets(runtime: ExternalRuntime) -> dict[float, float]:
    """The controller-manager's histogram of its pod webhook's own handling time (cumulative)."""
    url = runtime.probes_url("controller-manager")
    if url is None:
        return {}
    samples = await asyncio.to_thread(metric_samples, url, OWN_WEBHOOK_METRIC)
    return {
        float(dict(labels)["le"]): value
        for labels, value in samples.items()
        if dict(labels)["path"] == names.POD_MUTATION_PATH
    }


def histogram_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float | None:
    """The q-quantile of what was observed between two scrapes: the upper bound of the bucket it falls in."""
    counts = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    if not counts or counts[-1][1] <= 0:
        return None
    wanted = q * counts[-1][1]
    return next(le for le, count in counts if count >= wanted)


async def run_workload(
    client: AsyncClient,
    namespace: str,
    workload: str,
    burst: str,
    size: int,
    clock: StageClock | None = None,
    create_seconds: list[float] | None = None,
) -> float:
    if workload == "deployment":
        return await run_deployment_until_running(client, namespace, burst, size)
    return await run_until_running(client, namespace, burst, size, clock, create_seconds)


async def one_burst(
    clusters: Clusters, runtime: ExternalRuntime, figures: BurstFigures, workload: str, size: int, burst: str, way: str
) -> float:
    """`both`: the same pods at home (a namespace not offloaded) and directly in the foreign cluster at
    once, nothing offloaded: the floor of offloading on this machine, where both clusters share its CPUs."""
    offloaded = way == "offloaded"
    client, namespace = clusters.where(offloaded)
    env = clusters.env
    clock = StageClock()
    if offloaded:
        clock.watch_offloaded(clusters.home, clusters.foreign, OFFLOADED, TWIN, burst)
    else:
        clock.watch_direct(clusters.foreign, DIRECT, burst)
    await clock.start()
    before, cpu_from = cpu_seconds(env, runtime), time.perf_counter()
    marks = {c: audit_mark(env.audit_log(c)) for c in (HOME, FOREIGN)} if env.audit_policy else {}
    webhook_before = await webhook_buckets(clusters.home)
    own_before = await own_webhook_buckets(runtime)
    if way == "both":
        started = time.perf_counter()
        await asyncio.gather(
            run_workload(clusters.home, PLAIN, workload, burst, size, None, figures.home_creates["not offloaded"]),
            run_workload(clusters.foreign, DIRECT, workload, burst, size, clock),
        )
        seconds = time.perf_counter() - started
    else:
        creates = figures.home_creates["offloaded"] if offloaded else None
        sampled = figures.peak_connections if offloaded else []
        async with peak_connections(env, runtime, sampled):
            seconds = await run_workload(client, namespace, workload, burst, size, clock, creates)
    await asyncio.sleep(0.5)  # the last sightings
    clock.stop()
    p99 = histogram_quantile(webhook_before, await webhook_buckets(clusters.home), 0.99)
    if p99 is not None:
        figures.webhook_seconds.setdefault(way, []).append(p99)
    own_p99 = histogram_quantile(own_before, await own_webhook_buckets(runtime), 0.99)
    if offloaded and own_p99 is not None:
        figures.own_webhook_seconds.append(own_p99)
    used = {n: t - before.get(n, 0.0) for n, t in cpu_seconds(env, runtime).items()}
    figures.cpu_window[way] = time.perf_counter() - cpu_from
    figures.cpu_per_pod[way] = {n: t / size for n, t in used.items() if t > 0}
    if marks:
        counted = {c: audited_writes(mark) for c, mark in marks.items()}
        figures.writes_by_kind[way] = {c: {k: n / size for k, n in counts.items()} for c, counts in counted.items()}
    if way != "both":  # its clock sees only the foreign half
        stages = OFFLOADED_STAGES if offloaded else DIRECT_STAGES
        for stage, values in clock.durations(stages).items():
            figures.stages.setdefault(way, {}).setdefault(stage, []).extend(values)
        for point, at in clock.reached_by_all(stages).items():
            figures.last_reached.setdefault(way, {}).setdefault(point, []).append(at)
    figures.seconds[way].append(seconds)
    runtime.check_alive()  # figures of a burst the runtime did not survive are no figures
    return seconds


async def bursts(
    clusters: Clusters,
    runtime: ExternalRuntime,
    args: argparse.Namespace,
    memory: dict[str, dict[str, dict[str, float]]],
    profiles: dict[str, Profile],
    apiserver_profiles: dict[str, ApiServerProfile],
) -> dict[tuple[int, str, str], BurstFigures]:
    """Per size, workload and pinning mode, `rounds` rounds of both ways, the order alternated;
    `memory` gets the runtime's RSS and PSS when 1,000 offloaded pods are Running, and (last round)
    MEMORY_SETTLE_SECONDS later; with --profile, `profiles` the
    runtime's during the last offloaded burst of the largest size, and `apiserver_profiles` the API
    servers' during the last direct and offloaded bursts of that size."""
    sizes = [int(s) for s in args.bursts.split(",") if s]
    workloads = ["pods", "deployment"] if args.workload == "both" else [args.workload]
    modes = ["pinned", "unpinned"] if args.pinning == "both" else [args.pinning]
    plan = cpu_plan([HOME, FOREIGN])
    if "pinned" in modes:
        print(f"[bench] pinned: {describe(plan)}", flush=True)
    results: dict[tuple[int, str, str], BurstFigures] = {}
    for size in sizes:
        for workload in workloads:
            for round_no in range(args.rounds):
                for mode in modes if round_no % 2 == 0 else modes[::-1]:
                    if mode == "pinned":
                        pin(clusters.env, runtime, plan)
                    else:
                        unpin(clusters.env, runtime)
                    figures = results.setdefault((size, workload, mode), BurstFigures())
                    for way in WAYS if round_no % 2 == 0 else WAYS[::-1]:
                        burst = f"b{size}-{workload[0]}{round_no}-{mode[0]}{way[0]}"
                        last_round = size == sizes[-1] and round_no == args.rounds - 1
                        last = last_round and way == "offloaded"
                        folder = clusters.env.state_dir.parent / "profiles"
                        apiservers = args.profile and last_round and way != "both"
                        at_work = [FOREIGN] if way == "direct" else [HOME, FOREIGN]  # the API servers it loads
                        with (
                            profiled(runtime, folder, enabled=args.profile and last) as found,
                            apiservers_profiled(clusters.env, at_work, folder / way, apiservers) as servers,
                        ):
                            seconds = await one_burst(clusters, runtime, figures, workload, size, burst, way)
                        profiles.update(found)
                        apiserver_profiles.update({f"{way}: {c}": p for c, p in servers.items()})
                        print(
                            f"  {size:>5} {workload:>10} round {round_no + 1} {mode:>8} {way:>9}: {seconds:7.2f} s",
                            flush=True,
                        )
                        if way == "offloaded" and size == 1000:
                            memory["when all are Running"] = runtime_memory_mb(runtime)
                            if round_no == args.rounds - 1:
                                await asyncio.sleep(MEMORY_SETTLE_SECONDS)
                                memory[f"{MEMORY_SETTLE_SECONDS} s later"] = runtime_memory_mb(runtime)
                        await delete_all(clusters, burst)
    unpin(clusters.env, runtime)
    return results


async def singles(clusters: Clusters, samples: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {"direct": [], "offloaded": []}
    for index in range(samples):
        for offloaded in (False, True) if index % 2 == 0 else (True, False):
            way = "offloaded" if offloaded else "direct"
            burst = f"s{index}-{way[0]}"
            client, namespace = clusters.where(offloaded)
            results[way].append(await run_until_running(client, namespace, burst, 1))
            await delete_all(clusters, burst)
    return results


def cpu_seconds(env: DevEnvironment, runtime: ExternalRuntime) -> dict[str, float]:
    """CPU time used so far by each cluster component ('home kube-apiserver') and runtime process."""
    ticks = os.sysconf("SC_CLK_TCK")
    named = {pid: f"runtime {c}" for c in runtime.components if (pid := runtime.pid(c)) is not None}
    used: dict[str, float] = {}
    for pid in env.processes():
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        parts = Path(cmdline[0].decode()).parts  # .../clusters/<cluster id>/bin/<component>
        named.setdefault(pid, f"{parts[-3]} {parts[-1]}" if len(parts) >= 3 else parts[-1])
    for pid, name in named.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        used[name] = used.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
    own = resource.getrusage(resource.RUSAGE_SELF)
    used["bench client (this process)"] = own.ru_utime + own.ru_stime
    return used


def runtime_memory_mb(runtime: ExternalRuntime) -> dict[str, dict[str, float]]:
    return {"RSS": runtime_rss_mb(runtime), "PSS": runtime_pss_mb(runtime)}


def runtime_rss_mb(runtime: ExternalRuntime) -> dict[str, float]:
    return _runtime_memory_mb(runtime, "status", "VmRSS:")


def runtime_pss_mb(runtime: ExternalRuntime) -> dict[str, float]:
    """Proportional set size: pages the processes share (the interpreter, the libraries they map)
    counted once among them, so the sum is the memory the runtime as a whole holds."""
    return _runtime_memory_mb(runtime, "smaps_rollup", "Pss:")


def _runtime_memory_mb(runtime: ExternalRuntime, proc_file: str, field: str) -> dict[str, float]:
    found = {}
    for component in runtime.components:
        pid = runtime.pid(component)
        if pid is None:
            continue
        for line in Path(f"/proc/{pid}/{proc_file}").read_text().splitlines():
            if line.startswith(field):
                found[component] = int(line.split()[1]) / 1024
    return found


@dataclass(frozen=True)
class AuditMark:
    """A place in an API server's audit log. The server rotates the log at 100 MB (lumberjack's
    default, `--audit-log-maxsize` unset) to `audit-<time>.log`: the inode tells which file it was."""

    log: Path
    inode: int
    offset: int


def audit_mark(log: Path) -> AuditMark:
    stat = log.stat()
    return AuditMark(log, stat.st_ino, stat.st_size)


def audited_writes(mark: AuditMark) -> Counter[str]:
    """Writes logged since `mark`, across a rotation, counted by 'client: resource'."""
    parts = [(mark.log, mark.offset)]
    if mark.log.stat().st_ino != mark.inode:
        rotated = [p for p in mark.log.parent.glob(f"{mark.log.stem}-*") if p.stat().st_ino == mark.inode]
        parts = [(p, mark.offset) for p in rotated] + [(mark.log, 0)]
    counts: Counter[str] = Counter()
    for path, offset in parts:
        with path.open() as lines:
            lines.seek(offset)
            for line in lines:
                event = json.loads(line)
                agent = str(event.get("userAgent", "?")).split("/")[0]
                resource = (event.get("objectRef") or {}).get("resource", "?")
                counts[f"{agent}: {event['verb']} {resource}"] += 1
    return counts


async def idle_writes(
    env: DevEnvironment, runtime: ExternalRuntime, clusters: Clusters, seconds: float
) -> dict[str, Counter[str]]:
    await run_until_running(clusters.home, OFFLOADED, "idle", 100)
    await asyncio.sleep(10)  # statuses settle
    marks = {c: audit_mark(env.audit_log(c)) for c in (HOME, FOREIGN)}
    print(f"  idle for {seconds:.0f} s with 100 offloaded pods ...", flush=True)
    await asyncio.sleep(seconds)
    connections = kubelet_connections(env, runtime)
    print(f"  the virtual kubelet's connections to {FOREIGN}'s API server, idle: {connections}", flush=True)
    found = {c: audited_writes(mark) for c, mark in marks.items()}
    await delete_all(clusters, "idle")
    return found


# -- set-up and report --------------------------------------------------------------------------
def install(
    env: DevEnvironment,
    state: Path,
    extra_config: dict[str, object] | None = None,
    kubelet_ports: dict[str, int] | None = None,
    foreign_ids: tuple[str, ...] = (FOREIGN,),
    one_process: bool = True,
    object_limits: dict[str, str] | None = None,
) -> ExternalRuntime:
    """The stack on the bench's clusters, the runtime running, namespace `bench` offloaded (Remote)
    to every foreign cluster, and in each of them the plain namespace of the direct way.
    `one_process`: the external runtime's layout (one virtual-kubelet process for every peering, or one each).
    `object_limits`: each foreign cluster's grant.objects (what a twin may hold past the defaults)."""
    project = state / "project"
    project.mkdir(parents=True, exist_ok=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(REPO / name, project / name)
    pulumi = PulumiEnvironment(state_dir=state / "pulumi", bin_dir=paths.bin_dir())
    stack = pulumi.stack_for_directory(project, "bench")
    port = free_port()
    config = {
        "home": {"clusterId": HOME, "kubeconfigPath": str(env.kubeconfig(HOME))},
        "foreignClusters": [
            {
                "clusterId": c,
                "kubeconfigPath": str(env.kubeconfig(c)),
                **({"grant": {"objects": object_limits}} if object_limits else {}),
            }
            for c in foreign_ids
        ],
        "runtime": {"mode": "external", "webhookPort": port},
        **(extra_config or {}),
    }
    pulumi.set_liqo_config(stack, config)
    print("[bench] pulumi up ...", flush=True)
    stack.up(on_output=lambda line: None)
    kubeconfigs = {c: env.kubeconfig(c) for c in (HOME, *foreign_ids)}
    runtime = ExternalRuntime(
        kubeconfigs, HOME, webhook_port=port, kubelet_ports=kubelet_ports, state_dir=state, one_process=one_process
    )
    runtime.stop_all()  # a previous, interrupted run's processes
    runtime.start_all()
    home = env.client(HOME)
    for cluster_id in foreign_ids:
        node = names.virtual_node_name(cluster_id)

        def ready(node: str = node) -> bool:
            runtime.check_alive()  # a process that died (a port in use, a bad credential) fails here, naming its log
            return node_ready(home, node)

        wait_until(ready, 60, f"{node} Ready")
    offload(home, OFFLOADED, {"podOffloadingStrategy": "Remote"})  # fresh clusters: nothing there yet
    wait_phase(home, OFFLOADED, "Ready", 60)
    for cluster_id in foreign_ids:
        env.client(cluster_id).create(Namespace(metadata=ObjectMeta(name=DIRECT)))
    env.client(HOME).create(Namespace(metadata=ObjectMeta(name=PLAIN)))
    return runtime


def fresh_clusters(name: str, layout: ClusterLayout = LAYOUT) -> tuple[Path, DevEnvironment]:
    """A bench's own state folder and clusters, created anew with the audit policy."""
    state = paths.state_root() / name
    state.mkdir(parents=True, exist_ok=True)
    policy = state / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    env = DevEnvironment(state_dir=state / "clusters", bin_dir=paths.bin_dir(), audit_policy=policy)
    env.down(progress=lambda m: None)
    # new clusters, new stack state: a previous run's would update objects these clusters never had
    shutil.rmtree(state / "pulumi", ignore_errors=True)
    env.up(layout, progress=lambda m: print(f"[cluster] {m}", flush=True))
    return state, env


@contextlib.contextmanager
def running_stack(
    name: str, keep: bool, layout: ClusterLayout = LAYOUT, **install_args: Any
) -> Iterator[tuple[DevEnvironment, ExternalRuntime]]:
    """A bench's fresh clusters with the stack installed and the runtime running; all of it gone
    afterwards unless `keep`. `install_args` go to install()."""
    state, env = fresh_clusters(name, layout)
    runtime = install(env, state, **install_args)
    try:
        yield env, runtime
    finally:
        runtime.stop_all()
        if not keep:
            env.down(progress=lambda m: None)


def report_bursts(results: dict[tuple[int, str, str], BurstFigures]) -> None:
    print("\n== bursts: time until every pod is Running where created")
    print("  both: the same pods at home (not offloaded) and directly in the foreign cluster at once, the floor")
    print("  on this machine; ratio: offloaded / direct; ÷ both: offloaded / both (targets: 1,000 and 100 pods")
    print("  <= 1.3; a 10-replica Deployment: ratio <= 1.5); webhook p99 of the offloaded bursts, the upper")
    print("  bound of a histogram bucket (target under 50 ms): as the home API server times the whole call / as")
    print("  the webhook times its own handling (the rest is the API server's side: docs/performance.md#admission)")
    header = f"  {'pods':>6} {'workload':>10} {'CPUs':>8} {'direct s':>16} {'offloaded s':>16} {'ratio':>6}"
    print(
        header
        + f" {'both s':>16} {'floor':>6} {'÷ both':>6} {'webhook p99':>16}  writes/pod home+foreign (direct: foreign)"
    )
    for (size, workload, mode), figures in results.items():
        direct, offloaded, both = (figures.seconds[way] for way in WAYS)
        ratio = statistics.median(offloaded) / statistics.median(direct)
        floor = statistics.median(both) / statistics.median(direct)
        webhook = " / ".join(
            f"{max(p99s) * 1000:g}" if p99s else "-"
            for p99s in (figures.webhook_seconds.get("offloaded"), figures.own_webhook_seconds)
        )
        writes = {
            way: {c: sum(kinds.values()) for c, kinds in by_cluster.items()}
            for way, by_cluster in figures.writes_by_kind.items()
        }
        w_off = writes.get("offloaded", {})
        w_dir = writes.get("direct", {})
        print(
            f"  {size:>6} {workload:>10} {mode:>8} {spread(direct):>16} {spread(offloaded):>16} {ratio:>5.2f}x"
            f" {spread(both):>16} {floor:>5.2f}x {statistics.median(offloaded) / statistics.median(both):>6.2f}"
            f" {webhook + ' ms':>16}"
            f"  {w_off.get(HOME, 0):.1f}+{w_off.get(FOREIGN, 0):.1f} ({w_dir.get(FOREIGN, 0):.1f})"
        )
    print("\n  stages, per pod, p50 / p99 seconds")
    for (size, workload, mode), figures in results.items():
        print(f"  {size} {workload} {mode}:")
        for way, stages in figures.stages.items():
            cells = ", ".join(
                f"{stage} {percentile(values, 0.5):.2f}/{percentile(values, 0.99):.2f}"
                for stage, values in stages.items()
            )
            print(f"      {way:>9}: {cells}")
        for way, points in figures.last_reached.items():
            cells = ", ".join(f"{point} {statistics.median(values):.1f}" for point, values in points.items())
            print(f"      {way:>9}, last pod (s after the first submit): {cells}")
        creates = figures.home_creates
        if creates["offloaded"] and creates["not offloaded"]:
            create_cells = {
                where: f"p50 {percentile(v, 0.5) * 1000:.0f} / p99 {percentile(v, 0.99) * 1000:.0f} ms"
                for where, v in creates.items()
            }
            ratio = percentile(creates["offloaded"], 0.99) / percentile(creates["not offloaded"], 0.99)
            print(
                f"      pod create at home: offloaded namespace {create_cells['offloaded']}, not offloaded"
                f" {create_cells['not offloaded']}; p99 ratio {ratio:.2f}x (target <= 1.2x)"
            )
        print("      writes per pod, by client, verb and resource (last round of each way; 0.1 and more):")
        for way, clusters in figures.writes_by_kind.items():
            for cluster_id, kinds in clusters.items():
                cells = ", ".join(f"{k} {v:.1f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]) if v >= 0.1)
                if cells:
                    print(f"      {way:>9} {cluster_id}: {cells}")
        print("      CPU ms per pod, by process (last round of each way):")
        for way, cpu in figures.cpu_per_pod.items():
            ranked = sorted(cpu.items(), key=lambda item: -item[1])
            # the busiest, and every runtime process however idle: those are ours to answer for
            shown = [(name, s) for rank, (name, s) in enumerate(ranked) if rank < 9 or name.startswith("runtime ")]
            print(f"      {way:>9}: " + ", ".join(f"{name} {seconds * 1000:.1f}" for name, seconds in shown))
        if figures.peak_connections:
            print(
                f"      the virtual kubelet's connections to {FOREIGN}'s API server during the offloaded bursts:"
                f" at most {max(figures.peak_connections)} (target <= 10)"
            )
        bound = cpu_bound(figures, size)
        if bound:
            print(bound)


def cpu_bound(figures: BurstFigures, size: int) -> str | None:
    """What the CPU per pod allows ÷ both to be, when both ways keep the machine's CPUs busy: the
    offloaded way's CPU over the both way's, and the same without the runtime's own (a runtime that
    cost nothing). The rest is the clusters' work for the requests offloading makes."""
    offloaded, both = figures.cpu_per_pod.get("offloaded"), figures.cpu_per_pod.get("both")
    if not offloaded or not both:
        return None
    cpus = len(os.sched_getaffinity(0))
    total = {"offloaded": sum(offloaded.values()), "both": sum(both.values())}
    ours = {
        way: sum(seconds for name, seconds in cpu.items() if name.startswith("runtime "))
        for way, cpu in (("offloaded", offloaded), ("both", both))
    }
    busy = {way: cpu * size / (figures.cpu_window[way] * cpus) for way, cpu in total.items()}
    without = (total["offloaded"] - ours["offloaded"]) / (total["both"] - ours["both"])
    return (
        f"      CPU-bound: all processes {total['offloaded'] * 1000:.1f} ms per offloaded pod (the runtime's"
        f" three {ours['offloaded'] * 1000:.1f}) against {total['both'] * 1000:.1f} in both, with the {cpus} CPUs"
        f" {busy['offloaded']:.0%} / {busy['both']:.0%} busy: ÷ both {total['offloaded'] / total['both']:.2f}"
        f" by CPU, {without:.2f} if the runtime cost nothing"
    )


def spread(values: list[float]) -> str:
    """Median and the run-to-run range."""
    return f"{statistics.median(values):.2f} ({min(values):.1f}-{max(values):.1f})"


# -- the foreign side's bounds, on and off (issue 59): their cost on the per-pod path ---------------
# A toleration of a taint the home may not tolerate: refused by the nodes policy while it is bound.
PROBE_TOLERATION = {"key": "bench.liqo-stack.io/kept", "operator": "Exists", "effect": "NoSchedule"}


def home_identity(env: DevEnvironment) -> AsyncClient:
    """The home identity in the foreign cluster, from the credentials Secret the stack wrote at home."""
    secret: Any = env.client(HOME).get(Secret, names.credentials_secret_name(FOREIGN), namespace=names.LIQO_NAMESPACE)
    config = yaml.safe_load(base64.b64decode(secret.data["kubeconfig"]))
    return AsyncClient(KubeConfig.from_dict(config), field_manager="bench")


async def bounds_enforced(identity: AsyncClient) -> bool:
    """Whether the foreign API server holds the home's ShadowPods to its nodes now: a dry run, as the
    home identity, of one that tolerates a taint it may not."""
    probe = ShadowPodResource.from_dict(
        {
            "metadata": {"name": "bounds-probe", "namespace": TWIN, "labels": {names.ORIGIN_LABEL: HOME}},
            "spec": {"pod": {"containers": [{"name": "c", "image": "i"}], "tolerations": [PROBE_TOLERATION]}},
        }
    )
    try:
        await identity.create(probe, dry_run=True)
    except ApiError as err:
        if err.status.code == 403:
            return True
        raise
    return False


BOUNDS = {"on": ("nodes", "objects"), "off": (), "nodes": ("nodes",), "objects": ("objects",)}


async def set_bounds(clusters: Clusters, identity: AsyncClient, state: str) -> None:
    """The foreign side's bounds of `state` (BOUNDS) in force, as the stack and the agent make them, and the
    others lifted: `nodes`, the home's nodes policy binding; `objects`, its twin's ResourceQuota of objects
    (counted by the cluster's quota controller). The agent's own check of each pod stays on: it is measured
    apart (`agent_check_microseconds`)."""
    foreign = clusters.foreign
    binding = manifests.shadowpod_nodes_binding(HOME, "peering")
    quota = twin_object_quota(TWIN, HOME, FOREIGN, twin_object_limits(None))
    if "objects" in BOUNDS[state]:
        await foreign.apply(
            cast(ResourceQuota, ResourceQuota.from_dict(quota)), field_manager="liqo-foreign-agent", force=True
        )

        async def counted() -> bool:
            live: Any = await foreign.get(ResourceQuota, names.TWIN_OBJECTS_QUOTA, namespace=TWIN)
            status = live.status  # its quantities as the API server writes them (2000 is 2k)
            return bool(status and set(status.hard or {}) == set(quota["spec"]["hard"]) and status.used)

        await until(lambda: counted(), "the twin's ResourceQuota counted")
    else:
        with contextlib.suppress(ApiError):
            await foreign.delete(ResourceQuota, names.TWIN_OBJECTS_QUOTA, namespace=TWIN)
    if "nodes" in BOUNDS[state]:
        await foreign.apply(
            cast(ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBinding.from_dict(binding)), force=True
        )
        await until(lambda: bounds_enforced(identity), "the nodes policy enforced")
        return
    with contextlib.suppress(ApiError):
        await foreign.delete(ValidatingAdmissionPolicyBinding, binding["metadata"]["name"])

    async def lifted() -> bool:
        return not await bounds_enforced(identity)

    await until(lifted, "the nodes policy lifted")  # the API server's policy informer catches up


async def until(condition: Callable[[], Awaitable[bool]], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f} s")
        await asyncio.sleep(0.2)


def agent_check_microseconds(samples: int = 20_000) -> float:
    """The agent's own check of one pod (NodeRules.confine, the default rules, a bench pod's spec with
    Kubernetes' two default tolerations), in microseconds."""
    spec = pod_body("p", TWIN, "b").to_dict()["spec"]
    spec["tolerations"] = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    ]
    rules = NodeRules.of(None)
    started = time.perf_counter()
    for _ in range(samples):
        rules.confine(spec)
    return (time.perf_counter() - started) / samples * 1e6


@dataclass
class BoundsFigures:
    """Per state of the bounds, each burst's seconds until Running at home, and CPU seconds used meanwhile:
    by every process (clusters, runtime, this bench) and by the foreign API server alone."""

    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    foreign_apiserver_cpu: list[float] = field(default_factory=list)


async def bounds_comparison(
    clusters: Clusters, runtime: ExternalRuntime, size: int, rounds: int, states: list[str]
) -> dict[str, BoundsFigures]:
    """`rounds` offloaded bursts of `size` bare pods in each of the bounds' `states` (BOUNDS), their order
    reversed every other round."""
    identity = home_identity(clusters.env)
    results = {state: BoundsFigures() for state in states}
    for round_no in range(rounds):
        for state in states if round_no % 2 == 0 else reversed(states):
            await set_bounds(clusters, identity, state)
            burst = f"bounds-{round_no}-{state}"
            before = cpu_seconds(clusters.env, runtime)
            seconds = await run_until_running(clusters.home, OFFLOADED, burst, size)
            after = cpu_seconds(clusters.env, runtime)
            used = {name: after[name] - before.get(name, 0.0) for name in after}
            figures = results[state]
            figures.seconds.append(seconds)
            figures.cpu.append(sum(used.values()))
            figures.foreign_apiserver_cpu.append(used.get(f"{FOREIGN} kube-apiserver", 0.0))
            print(
                f"  {size:>5} offloaded, bounds {state:>7}, round {round_no + 1}: {seconds:7.2f} s,"
                f" CPU {figures.cpu[-1]:6.1f} s ({FOREIGN} kube-apiserver {figures.foreign_apiserver_cpu[-1]:5.1f} s)",
                flush=True,
            )
            await delete_all(clusters, burst)
    await set_bounds(clusters, identity, "on")  # as the stack left it
    return results


def report_bounds(results: dict[str, BoundsFigures], size: int) -> None:
    print(f"\n== the foreign side's bounds (issue 59): {size} offloaded pods, time until Running at home")
    print("  on: the nodes policy bound for home and the twin's ResourceQuota of objects; off: neither;")
    print("  nodes, objects: that one alone. CPU: every process's, during the burst (2 cores: the bench is CPU-bound)")
    off = results.get("off")
    for state, figures in results.items():
        line = f"  {state:>7} {spread(figures.seconds)} s, CPU {spread(figures.cpu)} s"
        line += f", {FOREIGN} kube-apiserver {spread(figures.foreign_apiserver_cpu)} s"
        if off is not None and state != "off":
            time_ratio = statistics.median(figures.seconds) / statistics.median(off.seconds)
            cpu_ratio = statistics.median(figures.cpu) / statistics.median(off.cpu)
            target = " (target <= 1.05)" if state == "on" else ""
            line += f"\n          {state} / off: time {time_ratio:.3f}{target}, CPU {cpu_ratio:.3f}"
        print(line)
    print(f"  the agent's own check, on in both: {agent_check_microseconds():.1f} us per pod")


def report(
    single_results: dict[str, list[float]],
    memory: dict[str, dict[str, dict[str, float]]],
    idle: dict[str, Counter[str]],
    idle_seconds: float,
) -> None:
    if single_results["direct"]:
        print("\n== single pod, time until Running (target: added latency p50 <= 150 ms, p99 <= 1 s)")
        for q, label in ((0.5, "p50"), (0.99, "p99")):
            direct = percentile(single_results["direct"], q) * 1000
            offloaded = percentile(single_results["offloaded"], q) * 1000
            print(
                f"  {label}: direct {direct:6.0f} ms, offloaded {offloaded:6.0f} ms,"
                f" added {offloaded - direct:6.0f} ms, ratio {offloaded / direct:.2f}x"
            )
    if memory:
        print("\n== runtime memory with 1,000 offloaded pods (target: under 200 MB)")
        print("  RSS counts the pages the processes share (interpreter, libraries) once per process, PSS once")
        for kind in ("RSS", "PSS"):
            for when, readings in memory.items():
                figures = readings[kind]
                total = sum(figures.values())
                parts = ", ".join(f"{c} {mb:.0f}" for c, mb in figures.items())
                print(f"  {kind} {when}: {total:.0f} MB, {total / TARGET_MEMORY_MB:.2f}x the target ({parts})")
    if idle:
        print(f"\n== writes during {idle_seconds:.0f} idle s, 100 offloaded pods (target: zero but heartbeats)")
        for cluster_id, counts in idle.items():
            ours = {k: v for k, v in counts.items() if k.startswith("python-httpx")}
            heartbeats = sum(v for k, v in ours.items() if k.endswith(" leases"))
            others = sum(v for k, v in counts.items() if k not in ours)
            print(
                f"  {cluster_id}: runtime {sum(ours.values()) - heartbeats} writes + {heartbeats} Lease heartbeats;"
                f" the cluster's own components {others}"
            )
            for key, value in sorted(counts.items()):
                print(f"      {value:4d}  {key}")


async def measure(env: DevEnvironment, runtime: ExternalRuntime, args: argparse.Namespace) -> None:
    clusters = Clusters(env)
    if args.compare_bounds:
        size = max(int(s) for s in args.bursts.split(",") if s)
        print(f"[bench] the foreign side's bounds on and off, {args.compare_bounds} rounds ...", flush=True)
        states = args.bounds_states.split(",")
        report_bounds(await bounds_comparison(clusters, runtime, size, args.compare_bounds, states), size)
        if args.compare_bounds_only:
            return
    print("[bench] bursts ...", flush=True)
    memory = {"before the first burst": runtime_memory_mb(runtime)}
    profiles: dict[str, Profile] = {}
    apiserver_profiles: dict[str, ApiServerProfile] = {}
    burst_results = await bursts(clusters, runtime, args, memory, profiles, apiserver_profiles)
    print("[bench] single pods ...", flush=True)
    single_results = await singles(clusters, args.singles)
    print("[bench] idle ...", flush=True)
    idle = await idle_writes(env, runtime, clusters, args.idle) if args.idle else {}
    report_bursts(burst_results)
    if profiles:
        report_profile(profiles, "the runtime during the last offloaded burst of the largest size")
    largest = max(size for size, _, _ in burst_results)
    report_apiservers(apiserver_profiles, f"the last direct and offloaded bursts of {largest} pods", largest)
    report(single_results, memory, idle, args.idle)


def bounds_states(text: str) -> str:
    unknown = [state for state in text.split(",") if state not in BOUNDS]
    if unknown or not text:
        raise argparse.ArgumentTypeError(
            f"--bounds-states: {', '.join(unknown) or 'none'} not among {', '.join(BOUNDS)}"
        )
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bursts", default="10,100,1000", help="burst sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per burst size and way, alternated")
    parser.add_argument("--workload", choices=["both", "pods", "deployment"], default="both", help="what makes pods")
    add_pinning_option(parser)
    parser.add_argument("--singles", type=int, default=40, help="single-pod samples per way")
    parser.add_argument("--idle", type=float, default=60, help="idle seconds counted (0: skip)")
    parser.add_argument("--keep", action="store_true", help="leave the clusters running afterwards")
    parser.add_argument(
        "--processes",
        choices=["one", "each"],
        default="one",
        help="the runtime's layout: one process for the virtual kubelets (and one for the agents), or one each",
    )
    parser.add_argument(
        "--compare-bounds",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="first, ROUNDS offloaded bursts of the largest size with the foreign side's bounds on and as many off",
    )
    parser.add_argument("--compare-bounds-only", action="store_true", help="that comparison and nothing else")
    parser.add_argument(
        "--bounds-states",
        default="on,off",
        type=bounds_states,
        help=f"the bounds compared, comma-separated, among {', '.join(BOUNDS)}",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy profile of the runtime and pprof of the API servers, last largest bursts",
    )
    args = parser.parse_args()

    with running_stack("bench-offloading", args.keep, one_process=args.processes == "one") as (env, runtime):
        asyncio.run(measure(env, runtime, args))


if __name__ == "__main__":
    main()
