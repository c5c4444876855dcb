"""Soak with faults: churn on the dev clusters while processes die and control planes stop; nothing is lost.

    .venv/bin/python -m tests.bench.soak [--minutes 30] [--warmup 5] [--seed N] [--keep]

Starts its own home and two foreign clusters (state under $LIQO_STACK_STATE/bench-soak), installs
the stack with `pulumi up`, runs the runtime as local processes and offloads namespace `bench`.
Then, for `--minutes`:
- churn: Deployments scaled up and down, namespaces offloaded and unoffloaded (with a Deployment
  and a ConfigMap each), ConfigMaps and Secrets updated, Jobs run to completion (the test plays the
  foreign kubelet: kwok completes only pods a Job owns, and remote pods belong to their ShadowPods);
- faults, one every 20-60 s at random: SIGKILL of one runtime process (started again at once, as
  its Deployment would), a foreign control plane stopped for 30 s, the home API server restarted.
The invariants are checked every CHECK_SECONDS while it runs (a state must hold again within
GRACE_SECONDS: a pod just bound has no remote pod yet), and after the churn they must all hold at once
within SETTLE_SECONDS (else each one left is a breach):
- every home pod on a virtual node has exactly one remote pod (its ShadowPod's);
- no remote pod, ShadowPod, twin namespace or reflected object outlives its home counterpart;
- no completed Job pod is resurrected;
- no remote pod changes UID while its home pod lives;
- no namespace stays Terminating;
- each runtime process's RSS at the end is within RSS_TOLERANCE of its value after the warm-up
  (for a process restarted since, the warm-up counts from its start).
Prints every fault and every breach with its time, then a summary; exits 1 on any breach.
`tests/e2e/test_soak.py` runs three minutes of it on the test clusters in CI.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod, Secret
from lightkube.types import CascadeType, PatchType

from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment, NodeShape
from liqo_stack.dev.external_runtime import ExternalRuntime
from runtime.api import names
from runtime.api.resources import NamespaceOffloadingResource, ShadowPodResource
from tests.bench.bench_offloading import OFFLOADED, running_stack
from tests.support.kube import get_or_none, wait_until

CHECK_SECONDS = 20.0
GRACE_SECONDS = 120.0  # a violated state that holds this long is a breach
FAULT_GAP_SECONDS = (20.0, 60.0)
FOREIGN_OUTAGE_SECONDS = 30.0
# an API server started again can take over a minute to serve on a loaded machine (seen at load 19)
RESTART_TIMEOUT_SECONDS = 300.0
RSS_TOLERANCE = 0.10
SETTLE_SECONDS = 300.0
APPS = ("web-1", "web-2", "web-3")
CONFIGS = ("soak-config-1", "soak-config-2", "soak-config-3")
ROTATING_NAMESPACES = 3  # soak-ns-1 ... offloaded and unoffloaded in turn
LAYOUT = ClusterLayout(foreign=2, nodes_per_cluster=2, node=NodeShape(cpu="64", memory="256Gi", pods=250))
KILL, FOREIGN_OUTAGE, HOME_RESTART = "SIGKILL", "control plane stopped:", "home API server restarted"
ROLLOUT_IMAGE = "registry.k8s.io/pause:3.10"


def clock() -> float:
    return time.monotonic()


@dataclass
class Journal:
    """What happened, with times relative to the start; printed as it happens."""

    started: float = field(default_factory=clock)
    faults: list[tuple[float, str]] = field(default_factory=list)
    breaches: list[tuple[float, str]] = field(default_factory=list)
    churn: Counter[str] = field(default_factory=Counter)
    checked: Counter[str] = field(default_factory=Counter)  # what the invariant rounds looked at
    refused: Counter[str] = field(default_factory=Counter)  # churn calls an API server refused (a fault held it)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return clock() - self.started

    def fault(self, what: str) -> None:
        self._add(self.faults, f"fault: {what}")

    def recovered(self, what: str) -> None:
        """The end of a fault that lasts (a control plane started again): on the timeline, not counted."""
        self._add(self.faults, f"recovered: {what}")

    def injected(self) -> int:
        return sum(not line.startswith("recovered") for _, line in self.faults)

    def breach(self, what: str) -> None:
        self._add(self.breaches, f"BREACH: {what}")

    def _add(self, entries: list[tuple[float, str]], line: str) -> None:
        with self.lock:
            entries.append((self.now(), line))
        print(f"[soak +{self.now():7.1f}s] {line}", flush=True)


def twin_of(namespace: str, home_id: str) -> str:
    return f"{namespace}-{home_id}"  # DefaultName, the mapping the soak's offloadings use


def meta(obj: Any) -> Any:
    return obj.metadata


def labelled(obj: Any, key: str) -> bool:
    return key in (meta(obj).labels or {})


class Soak:
    """Churn, faults and the invariants on one home cluster and its foreign clusters."""

    def __init__(
        self,
        env: DevEnvironment,
        runtime: ExternalRuntime,
        *,
        offloaded: str,
        home_id: str = "home",
        seed: int = 0,
        warmup: float | None = 300.0,
        fault_gap: tuple[float, float] = FAULT_GAP_SECONDS,
        fault_rounds: int | None = None,
        outage: float = FOREIGN_OUTAGE_SECONDS,
        journal: Journal | None = None,
    ) -> None:
        """`fault_rounds`: churn stops once each kind of fault has been made (and recovered from) this
        many times, rather than when `run`'s seconds are up (which then only cap it); `outage`: how
        long a foreign control plane stays stopped."""
        self.env = env
        self.runtime = runtime
        self.offloaded = offloaded  # an offloaded home namespace (Remote strategy) for apps, configs and Jobs
        self.home_id = home_id
        self.foreign_ids = list(runtime.foreign_ids)
        self.random = random.Random(seed)  # the churn's choices
        self.fault_random = random.Random(seed + 1)  # the faults', apart: the threads interleave by timing
        self.fault_gap = fault_gap
        self.warmup = warmup  # None: memory is reported, not judged (a run too short to settle)
        self.journal = journal or Journal()
        self.stopping = threading.Event()
        self.fault_rounds = fault_rounds
        self.outage = outage
        self.rounds_done = threading.Event()
        # held while a fault kills and restarts a process, so the crash check does not take it for a crash
        self.supervising = threading.Lock()
        self.clients = threading.local()
        self.rotating = [f"{offloaded}-ns-{i}" for i in range(1, ROTATING_NAMESPACES + 1)]
        # what the checks remember between rounds
        self.remote_uids: dict[tuple[str, str, str], tuple[str, str]] = {}  # (cluster, twin, pod) -> (home uid, uid)
        self.completed: dict[tuple[str, str, str], str] = {}  # remote Job pods the soak completed -> their uid
        self.violated_since: dict[str, float] = {}
        self.reported: set[str] = set()
        # runtime process memory: (component, pid) -> RSS after its warm-up
        self.warm_rss: dict[tuple[str, int], float] = {}
        self.job_serial = 0

    # -- clients ---------------------------------------------------------------------------
    def client(self, cluster_id: str) -> Client:
        """One client per cluster and thread (churn, faults and checks run side by side)."""
        clients: dict[str, Client] = self.clients.__dict__.setdefault("by_cluster", {})
        if cluster_id not in clients:
            clients[cluster_id] = self.env.client(cluster_id)
        return clients[cluster_id]

    def home(self) -> Client:
        return self.client(self.home_id)

    def foreign(self, cluster_id: str) -> Client:
        return self.client(cluster_id)

    # -- set-up ----------------------------------------------------------------------------
    def prepare(self) -> None:
        home = self.home()
        for app in APPS:
            home.apply(deployment(app, self.offloaded, 2), field_manager="soak", force=True)
        for name in CONFIGS:
            home.apply(config_map(name, self.offloaded, "0"), field_manager="soak", force=True)
            home.apply(secret(name, self.offloaded, "0"), field_manager="soak", force=True)

    # -- churn -----------------------------------------------------------------------------
    def churn_forever(self) -> None:
        actions: list[Callable[[], str]] = [
            self.scale_a_deployment,
            self.update_configs,
            self.rotate_a_namespace,
            self.run_jobs,
        ]
        while not self.stopping.wait(self.random.uniform(1.0, 4.0)):
            action = self.random.choice(actions)
            try:
                self.journal.churn[action()] += 1
            except Exception as err:  # an API server a fault stopped: the next turn tries again
                self.journal.refused[f"{action.__name__}: {type(err).__name__}"] += 1

    def scale_a_deployment(self) -> str:
        app = self.random.choice(APPS)
        replicas = self.random.randint(0, 8)
        self.home().patch(
            Deployment, app, {"spec": {"replicas": replicas}}, namespace=self.offloaded, patch_type=PatchType.MERGE
        )
        return "Deployment scaled"

    def update_configs(self) -> str:
        home = self.home()
        name = self.random.choice(CONFIGS)
        value = str(self.random.randint(0, 10**9))
        home.apply(config_map(name, self.offloaded, value), field_manager="soak", force=True)
        home.apply(secret(name, self.offloaded, value), field_manager="soak", force=True)
        return "ConfigMap and Secret updated"

    def rotate_a_namespace(self) -> str:
        """Move one namespace a step along absent -> offloaded (a Deployment, a ConfigMap) ->
        unoffloaded -> deleted."""
        home = self.home()
        namespace = self.random.choice(self.rotating)
        found = get_or_none(home, Namespace, namespace)
        if found is None:
            home.create(Namespace(metadata=ObjectMeta(name=namespace)))
            return "namespace created"
        if meta(found).deletionTimestamp is not None:
            return "namespace still terminating"
        offloading = get_or_none(home, NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace)
        apps = home.list(Deployment, namespace=namespace)
        if offloading is None and not list(apps):
            home.create(
                NamespaceOffloadingResource.from_dict(
                    {
                        "metadata": {"name": names.NAMESPACE_OFFLOADING_NAME, "namespace": namespace},
                        "spec": {"podOffloadingStrategy": "Remote"},
                    }
                )
            )
            home.apply(config_map("settings", namespace, "1"), field_manager="soak", force=True)
            home.apply(deployment("app", namespace, 3), field_manager="soak", force=True)
            return "namespace offloaded"
        if offloading is not None and offloading.get("metadata", {}).get("deletionTimestamp") is None:
            home.delete(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=namespace)
            return "namespace unoffloaded"
        if offloading is None:
            home.delete(Namespace, namespace)
            return "namespace deleted"
        return "namespace still unoffloading"

    def run_jobs(self) -> str:
        """Start a Job, or complete the remote pods of running ones, or delete finished Jobs."""
        home = self.home()
        jobs = [cast(Any, j) for j in home.list(Job, namespace=self.offloaded, labels={"soak": "job"})]
        done = [j for j in jobs if ((j.status and j.status.succeeded) or 0) >= 1]
        if done and self.random.random() < 0.5:
            job = self.random.choice(done)
            home.delete(Job, job.metadata.name, namespace=self.offloaded, cascade=CascadeType.BACKGROUND)
            return "finished Job deleted"
        running = self.job_pods_running_remotely()
        if running:
            for cluster_id, pod in running:
                self.complete_remotely(cluster_id, pod)
            return "Job pods completed"
        if len(jobs) < 4:
            self.job_serial += 1
            home.create(cast(Job, Job.from_dict(job_body(f"job-{self.job_serial}", self.offloaded))))
            return "Job created"
        return "Jobs waiting"

    def job_pods_running_remotely(self) -> list[tuple[str, Any]]:
        home = self.home()
        found = []
        for pod in home.list(Pod, namespace=self.offloaded, labels={"soak": "job"}):
            spec, status = cast(Any, pod).spec, cast(Any, pod).status
            if spec.nodeName and spec.nodeName.startswith("liqo-") and status and status.phase == "Running":
                found.append((spec.nodeName.removeprefix("liqo-"), pod))
        return found

    def complete_remotely(self, cluster_id: str, home_pod: Any) -> None:
        name = home_pod.metadata.name
        twin = twin_of(self.offloaded, self.home_id)
        remote = get_or_none(self.foreign(cluster_id), Pod, name, twin)
        if remote is None:
            return
        exited = {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}, "ready": False, "restartCount": 0}
        status = {"phase": "Succeeded", "containerStatuses": [{"name": "work", "image": ROLLOUT_IMAGE, **exited}]}
        self.foreign(cluster_id).patch(Pod.Status, name, {"status": status}, namespace=twin, patch_type=PatchType.MERGE)
        self.completed[(cluster_id, twin, name)] = str(meta(remote).uid)

    # -- faults ----------------------------------------------------------------------------
    def faults_forever(self) -> None:
        """Each kind once per round, in a random order: a short run still sees every kind."""
        kinds = ["kill a runtime process", "stop a foreign control plane", "restart the home API server"]
        planned: list[str] = []
        rounds = 0
        while not self.stopping.wait(self.fault_random.uniform(*self.fault_gap)):
            if not planned:
                if rounds == self.fault_rounds:
                    self.rounds_done.set()
                    return
                planned = self.fault_random.sample(kinds, len(kinds))
                rounds += 1
            kind = planned.pop()
            try:
                if kind == kinds[0]:
                    component = self.fault_random.choice(self.runtime.components)
                    self.journal.fault(f"{KILL} {component}")
                    with self.supervising:
                        self.runtime.kill(component)
                        self.runtime.start(component)  # as its Deployment would start it again
                elif kind == kinds[1]:
                    cluster_id = self.fault_random.choice(self.foreign_ids)
                    self.journal.fault(f"{FOREIGN_OUTAGE} {cluster_id} for {self.outage:.0f}s")
                    with self.env.api_server_stopped(cluster_id, timeout=RESTART_TIMEOUT_SECONDS):
                        self.stopping.wait(self.outage)  # the outage itself, not a wait for a state
                    self.journal.recovered(f"control plane started again: {cluster_id}")
                else:
                    self.journal.fault(f"{HOME_RESTART} ({self.home_id})")
                    with self.env.api_server_stopped(self.home_id, timeout=RESTART_TIMEOUT_SECONDS):
                        pass
            except Exception as err:  # the fault could not be made: say so, it is not the runtime's breach
                self.journal.fault(f"{kind} failed: {err}")

    # -- invariants ------------------------------------------------------------------------
    def violations(self) -> dict[str, str]:
        """Each invariant violated now, keyed so the same violation is recognised across rounds."""
        found: dict[str, str] = {}
        home = self.home()
        offloaded_here = self.offloaded_namespaces(home)
        home_pods: dict[tuple[str, str], Any] = {}
        for namespace in offloaded_here:
            for pod in home.list(Pod, namespace=namespace):
                home_pods[(namespace, meta(pod).name)] = pod
        for cluster_id in self.foreign_ids:
            found.update(self.cluster_violations(cluster_id, home, offloaded_here, home_pods))
        for key, pod in home_pods.items():  # exactly one remote pod: its ShadowPod's, by name
            spec, status = cast(Any, pod).spec, cast(Any, pod).status
            if not (spec.nodeName or "").startswith("liqo-") or meta(pod).deletionTimestamp is not None:
                continue
            if status and status.phase in ("Succeeded", "Failed"):
                continue
            cluster_id = spec.nodeName.removeprefix("liqo-")
            twin = twin_of(key[0], self.home_id)
            remote = get_or_none(self.foreign(cluster_id), Pod, key[1], twin)
            self.journal.checked["home pods on a virtual node"] += 1
            if remote is None:
                found[f"missing {cluster_id}/{twin}/{key[1]}"] = (
                    f"home pod {key[0]}/{key[1]} on {spec.nodeName} has no remote pod in {cluster_id}/{twin}"
                )
        for cluster_id in [self.home_id, *self.foreign_ids]:
            for ns in self.client(cluster_id).list(Namespace):
                if meta(ns).deletionTimestamp is not None:
                    found[f"terminating {cluster_id}/{meta(ns).name}"] = (
                        f"namespace {meta(ns).name} in {cluster_id} is Terminating"
                    )
        return found

    def offloaded_namespaces(self, home: Client) -> set[str]:
        return {
            str(o["metadata"]["namespace"])
            for o in home.list(NamespaceOffloadingResource, namespace="*")
            if o.get("metadata", {}).get("deletionTimestamp") is None
        }

    def cluster_violations(
        self, cluster_id: str, home: Client, offloaded_here: set[str], home_pods: dict[tuple[str, str], Any]
    ) -> dict[str, str]:
        found: dict[str, str] = {}
        client = self.foreign(cluster_id)
        suffix = f"-{self.home_id}"
        twins = {
            meta(ns).name: meta(ns).name.removesuffix(suffix)
            for ns in client.list(Namespace, labels={names.ORIGIN_LABEL: self.home_id})
            if meta(ns).deletionTimestamp is None
        }
        for twin, namespace in twins.items():
            if namespace not in offloaded_here:
                found[f"orphan twin {cluster_id}/{twin}"] = f"twin {twin} in {cluster_id}: {namespace} is not offloaded"
                continue
            for shadow in client.list(ShadowPodResource, namespace=twin):
                name = shadow["metadata"]["name"]
                if (namespace, name) not in home_pods:
                    found[f"orphan shadow {cluster_id}/{twin}/{name}"] = f"ShadowPod {twin}/{name} has no home pod"
            for pod in client.list(Pod, namespace=twin):
                name = meta(pod).name
                uid = str(meta(pod).uid)
                home_pod = home_pods.get((namespace, name))
                key = (cluster_id, twin, name)
                if home_pod is None:
                    found[f"orphan pod {cluster_id}/{twin}/{name}"] = f"remote pod {twin}/{name} has no home pod"
                    continue
                home_uid = str(meta(home_pod).uid)
                seen = self.remote_uids.get(key)
                if seen and seen[0] == home_uid and seen[1] != uid:
                    self.breach_once(
                        f"uid {key}", f"remote pod {cluster_id}/{twin}/{name} changed UID {seen[1]} -> {uid}"
                    )
                self.remote_uids[key] = (home_uid, uid)
                self.journal.checked["remote pods"] += 1
                completed_uid = self.completed.get(key)
                phase = cast(Any, pod).status.phase if cast(Any, pod).status else None
                if completed_uid is not None and (completed_uid != uid or phase != "Succeeded"):
                    self.breach_once(
                        f"resurrected {key}", f"completed Job pod {cluster_id}/{twin}/{name} is back ({phase}, {uid})"
                    )
            for kind in (ConfigMap, Secret):
                for obj in client.list(kind, namespace=twin, labels={names.ORIGIN_LABEL: self.home_id}):
                    if labelled(obj, names.SERVICE_ACCOUNT_TOKEN_LABEL):
                        continue  # a pod's token Secret: the pod's, checked with the pod
                    name = meta(obj).name
                    self.journal.checked["reflected objects"] += 1
                    if get_or_none(home, kind, name, namespace) is None:
                        found[f"orphan {kind.__name__} {cluster_id}/{twin}/{name}"] = (
                            f"reflected {kind.__name__} {twin}/{name} in {cluster_id} has no home object"
                        )
        return found

    def breach_once(self, key: str, what: str) -> None:
        if key not in self.reported:
            self.reported.add(key)
            self.journal.breach(what)

    def check(self, strict: bool = False) -> dict[str, str]:
        """One round: a violation held past GRACE_SECONDS (or any, when `strict`) is a breach."""
        now = clock()
        current = self.violations()
        self.journal.checked["rounds"] += 1
        self.violated_since = {k: self.violated_since.get(k, now) for k in current}
        for key, what in current.items():
            if strict or now - self.violated_since[key] >= GRACE_SECONDS:
                self.breach_once(key, what)
        self.sample_memory()
        return current

    def check_forever(self) -> None:
        unanswered_since: float | None = None
        while not self.stopping.wait(CHECK_SECONDS):
            with self.supervising:
                for component in self.runtime.components:  # a process that ended by itself is a crash
                    if self.runtime.pid(component) is None:
                        self.breach_once(f"exit {component} {self.journal.now():.0f}", f"{component} exited by itself")
                        self.runtime.start(component)
            try:
                self.check()
                unanswered_since = None
            except Exception as err:  # an API server a fault stopped: the next round looks again
                self.journal.refused[f"check: {type(err).__name__}"] += 1
                unanswered_since = unanswered_since or clock()
                if clock() - unanswered_since >= GRACE_SECONDS:  # longer than any fault keeps one down
                    self.breach_once(f"unanswered {unanswered_since:.0f}", f"no check could run for 2 minutes: {err}")

    def sample_memory(self) -> None:
        for component in self.runtime.components:
            pid = self.runtime.pid(component)
            if pid is None:
                continue
            key = (component, pid)
            if self.warmup is not None and key not in self.warm_rss and process_age(pid) >= self.warmup:
                self.warm_rss[key] = rss_mb(pid)

    def memory_breaches(self) -> list[str]:
        if self.warmup is None:
            return [
                f"  {c:<24} at the end {rss_mb(p):6.1f} MB"
                for c in self.runtime.components
                if (p := self.runtime.pid(c))
            ]
        lines = []
        for (component, pid), warm in sorted(self.warm_rss.items()):
            if self.runtime.pid(component) != pid:
                continue  # killed since: its successor is measured from its own start
            now = rss_mb(pid)
            verdict = "ok" if now <= warm * (1 + RSS_TOLERANCE) else "BREACH"
            lines.append(f"  {component:<24} after warm-up {warm:6.1f} MB, at the end {now:6.1f} MB  {verdict}")
            if verdict == "BREACH":
                self.journal.breach(f"{component} RSS grew {warm:.1f} -> {now:.1f} MB (> {RSS_TOLERANCE:.0%})")
        return lines

    # -- the run ---------------------------------------------------------------------------
    def run(self, seconds: float) -> bool:
        """Churn and faults for `seconds` (or their `fault_rounds`, at most `seconds`), then settle and
        check strictly. True when nothing breached."""
        self.prepare()
        threads = [
            threading.Thread(target=target, name=target.__name__, daemon=True)
            for target in (self.churn_forever, self.faults_forever, self.check_forever)
        ]
        for thread in threads:
            thread.start()
        (self.rounds_done if self.fault_rounds else self.stopping).wait(seconds)
        self.stopping.set()
        for thread in threads:
            thread.join()
        print(f"[soak +{self.journal.now():7.1f}s] churn and faults stopped; settling", flush=True)
        self.settle()
        memory = self.memory_breaches()
        self.report(memory)
        return not self.journal.breaches

    def settle(self) -> None:
        """Wait until every invariant holds (they converge once nothing changes), then check strictly."""
        for component in self.runtime.components:
            self.runtime.start(component)  # no-op for the running ones

        def settled() -> bool:
            try:
                return not self.violations()
            except Exception:  # an API server still starting: not settled yet
                return False

        try:
            wait_until(settled, SETTLE_SECONDS, "every invariant holding")
            return  # every invariant held at once: converged (a check after it would race the Jobs' new pods)
        except TimeoutError:
            pass
        try:
            self.check(strict=True)  # what never converged: each violation left is a breach
        except Exception as err:
            self.journal.breach(f"the final check could not run: {err}")

    def report(self, memory: list[str]) -> None:
        journal = self.journal
        print("\n== soak report ==")
        print(f"ran {journal.now():.0f}s; faults {journal.injected()}, breaches {len(journal.breaches)}")
        print("churn:", ", ".join(f"{what} {n}" for what, n in sorted(journal.churn.items())) or "none")
        print("checked:", ", ".join(f"{what} {n}" for what, n in sorted(journal.checked.items())))
        if journal.refused:
            print("refused while a fault held:", ", ".join(f"{k} {n}" for k, n in sorted(journal.refused.items())))
        for at, line in journal.faults:
            print(f"  +{at:7.1f}s {line}")
        print("memory (processes alive since their warm-up):")
        print("\n".join(memory) or "  none lived through a warm-up")
        for at, line in journal.breaches:
            print(f"  +{at:7.1f}s {line}")


# -- objects -------------------------------------------------------------------------------
def deployment(name: str, namespace: str, replicas: int) -> Deployment:
    labels = {"app": name, "soak": "app"}
    return cast(
        Deployment,
        Deployment.from_dict(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [{"name": "app", "image": ROLLOUT_IMAGE}]},
                    },
                },
            }
        ),
    )


def job_body(name: str, namespace: str) -> dict[str, Any]:
    template = {
        "metadata": {"labels": {"soak": "job"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": ROLLOUT_IMAGE}]},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {"soak": "job"}},
        "spec": {"completions": 1, "backoffLimit": 0, "template": template},
    }


def config_map(name: str, namespace: str, value: str) -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name=name, namespace=namespace), data={"value": value})


def secret(name: str, namespace: str, value: str) -> Secret:
    return Secret(metadata=ObjectMeta(name=name, namespace=namespace), stringData={"value": value})


def process_age(pid: int) -> float:
    """Seconds since the process started (field 22 of /proc/<pid>/stat, in clock ticks after boot)."""
    started = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    return float(Path("/proc/uptime").read_text().split()[0]) - started


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="how long churn and faults run")
    parser.add_argument("--warmup", type=float, default=5.0, help="minutes before a process's RSS is the reference")
    parser.add_argument("--seed", type=int, default=None, help="the random choices' seed (printed when not given)")
    parser.add_argument("--keep", action="store_true", help="leave the clusters running afterwards")
    args = parser.parse_args()
    if args.minutes <= 0:
        parser.error("--minutes: must be more than 0")
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"[soak] seed {seed}, {args.minutes:g} minutes, warm-up {args.warmup:g} minutes", flush=True)
    # the benches' one installer: fresh clusters, `pulumi up`, the runtime, namespace `bench` offloaded
    with running_stack("bench-soak", args.keep, LAYOUT, foreign_ids=("foreign-1", "foreign-2")) as (env, runtime):
        soak = Soak(env, runtime, offloaded=OFFLOADED, seed=seed, warmup=args.warmup * 60)
        clean = soak.run(args.minutes * 60)
    sys.exit(0 if clean else 1)


if __name__ == "__main__":
    main()
