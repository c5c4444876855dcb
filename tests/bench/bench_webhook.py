"""Admission webhook benchmark: the pod mutation as the API server calls it, against the floor of
the same HTTPS server answering without looking.

    .venv/bin/python -m tests.bench.bench_webhook [--requests 2000] [--concurrency 20] [--rounds 3]

The webhook server (runtime/webhooks/serving.py) runs in a process of its own, as in the
controller-manager, with a certificate minted as the runtime mints it. This process is the API
server's side: `--concurrency` keep-alive HTTPS connections (the API server keeps up to 25 idle
per webhook), each sending AdmissionReviews of a pod as the API server sends it on create
(defaulted, its ServiceAccount token volume added, managed fields included), one after another.
Two ways, alternated round by round:
- `mutate`: POST /mutate/pod, the namespace offloaded (Remote strategy, Ready): the JSONPatch back;
- `floor`: POST /allow on the same server: the body read, an AdmissionReview allowing it back, no
  decision and no patch: what HTTPS, aiohttp and JSON cost without us.
Prints latency p50/p99, admissions per second and the server's CPU per admission, each way, and
the ratios mutate / floor. No cluster is needed: the decision reads the NamespaceOffloading from
the controller's informer, here a fixed one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from runtime.api import names
from runtime.tls import issue
from runtime.webhooks import WebhookServer
from tests.bench.stages import percentile
from tests.support.kube import free_port

NAMESPACE = "bench"
FLOOR_PATH = "/allow"
WAYS = ("mutate", "floor")
OFFLOADING = {
    "apiVersion": names.API_VERSION,
    "kind": "NamespaceOffloading",
    "metadata": {"name": names.NAMESPACE_OFFLOADING_NAME, "namespace": NAMESPACE, "generation": 1},
    "spec": {"podOffloadingStrategy": "Remote", "namespaceMappingStrategy": "DefaultName"},
    "status": {"observedGeneration": 1, "offloadingPhase": "Ready"},
}


def created_pod(index: int) -> dict[str, Any]:
    """A pod as the API server hands it to mutating webhooks on create: defaulted, with the
    ServiceAccount admission plugin's token volume and the managed fields of its creator."""
    token_volume = "kube-api-access-x7k2p"
    container = {
        "name": "app",
        "image": "nginx:1.27",
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
        "volumeMounts": [
            {"name": token_volume, "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    projected = {
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
        ],
        "defaultMode": 420,
    }
    fields = {"f:metadata": {"f:labels": {".": {}, "f:burst": {}}}, "f:spec": {"f:containers": {}, "f:dnsPolicy": {}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{index}",
            "namespace": NAMESPACE,
            "uid": f"6b1f7f0e-0000-4000-8000-{index:012d}",
            "creationTimestamp": "2026-11-26T18:00:00Z",
            "labels": {"burst": "bench"},
            "managedFields": [
                {
                    "manager": "bench",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": fields,
                }
            ],
        },
        "spec": {
            "volumes": [{"name": token_volume, "projected": projected}],
            "containers": [container],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": f"node.kubernetes.io/{t}",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
                for t in ("not-ready", "unreachable")
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def admission_review(index: int) -> bytes:
    pod = created_pod(index)
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    resource = {"group": "", "version": "v1", "resource": "pods"}
    request = {
        "uid": f"705ab4f5-6393-11e8-b7cc-{index:012d}",
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": pod["metadata"]["name"],
        "namespace": NAMESPACE,
        "operation": "CREATE",
        "userInfo": {"username": "bench", "groups": ["system:authenticated"]},
        "object": pod,
        "oldObject": None,
        "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "bench"},
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


# -- the server's process ------------------------------------------------------------------------
async def _allow(request: web.Request) -> web.Response:
    review = await request.json()
    uid = review["request"]["uid"]
    return web.json_response(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": uid, "allowed": True}}
    )


async def serve(port: int, cert: Path, key: Path) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = WebhookServer(lambda namespace: OFFLOADING if namespace == NAMESPACE else None, "127.0.0.1", port, context)
    server.app.add_routes([web.post(FLOOR_PATH, _allow)])
    await server.start()
    print("serving", flush=True)
    await asyncio.Event().wait()


# -- the API server's side ------------------------------------------------------------------------
@dataclass
class WayFigures:
    latencies: list[float] = field(default_factory=list)  # seconds per admission, every round
    rates: list[float] = field(default_factory=list)  # admissions per second, per round
    cpu_per_request: list[float] = field(default_factory=list)  # server CPU seconds per admission, per round


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_round(
    session: aiohttp.ClientSession,
    url: str,
    bodies: list[bytes],
    concurrency: int,
    server_pid: int,
    figures: WayFigures,
) -> None:
    pending = iter(bodies)
    latencies: list[float] = []

    async def caller() -> None:  # one keep-alive connection, one review at a time, as the API server sends them
        for body in pending:
            sent = time.perf_counter()
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
                answer = await response.json()
            latencies.append(time.perf_counter() - sent)
            assert answer["response"]["allowed"], answer

    cpu_before = process_cpu_seconds(server_pid)
    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    seconds = time.perf_counter() - started
    figures.cpu_per_request.append((process_cpu_seconds(server_pid) - cpu_before) / len(bodies))
    figures.rates.append(len(bodies) / seconds)
    figures.latencies.extend(latencies)


async def measure(args: argparse.Namespace, port: int, ca: Path, server_pid: int) -> dict[str, WayFigures]:
    context = ssl.create_default_context(cafile=str(ca))
    connector = aiohttp.TCPConnector(ssl=context, limit=args.concurrency)
    paths = {"mutate": names.POD_MUTATION_PATH, "floor": FLOOR_PATH}
    bodies = [admission_review(i) for i in range(args.requests)]
    results = {way: WayFigures() for way in WAYS}
    async with aiohttp.ClientSession(connector=connector) as session:
        for way in WAYS:  # warm-up: the connections opened, the code paths run once
            await one_round(
                session,
                f"https://127.0.0.1:{port}{paths[way]}",
                bodies[:200],
                args.concurrency,
                server_pid,
                WayFigures(),
            )
        for round_no in range(args.rounds):
            for way in WAYS if round_no % 2 == 0 else WAYS[::-1]:
                url = f"https://127.0.0.1:{port}{paths[way]}"
                await one_round(session, url, bodies, args.concurrency, server_pid, results[way])
    return results


def report(results: dict[str, WayFigures], args: argparse.Namespace) -> None:
    print(f"\n== admission webhook: {args.requests} reviews x {args.rounds} rounds, {args.concurrency} callers at once")
    print("  target: pod mutation p99 under 50 ms at 20 concurrent creates")
    print(f"  {'way':>7} {'p50 ms':>8} {'p99 ms':>8} {'admissions/s':>13} {'server CPU us/admission':>24}")
    for way, figures in results.items():
        p50, p99 = (percentile(figures.latencies, q) * 1000 for q in (0.5, 0.99))
        print(
            f"  {way:>7} {p50:8.1f} {p99:8.1f}"
            f" {statistics.median(figures.rates):13.0f} {statistics.median(figures.cpu_per_request) * 1e6:24.0f}"
        )
    mutate, floor = results["mutate"], results["floor"]
    print(
        f"  mutate / floor: p99 {percentile(mutate.latencies, 0.99) / percentile(floor.latencies, 0.99):.2f}x,"
        f" CPU {statistics.median(mutate.cpu_per_request) / statistics.median(floor.cpu_per_request):.2f}x,"
        f" throughput {statistics.median(mutate.rates) / statistics.median(floor.rates):.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="admission reviews per round and way")
    parser.add_argument("--concurrency", type=int, default=20, help="callers at once (the API server's connections)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per way, alternated")
    parser.add_argument("--serve", nargs=3, metavar=("PORT", "CERT", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        port, cert, key = args.serve
        asyncio.run(serve(int(port), Path(cert), Path(key)))
        return
    with tempfile.TemporaryDirectory() as folder:
        certificate = asyncio.run(issue(["127.0.0.1"]))
        cert, key, ca = Path(folder, "tls.crt"), Path(folder, "tls.key"), Path(folder, "ca.crt")
        cert.write_bytes(certificate.cert_pem)
        key.write_bytes(certificate.key_pem)
        ca.write_bytes(certificate.ca_pem)
        port = free_port()
        command = [sys.executable, "-m", "tests.bench.bench_webhook", "--serve", str(port), str(cert), str(key)]
        server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "serving", (
                "the server did not start"
            )
            report(asyncio.run(measure(args, port, ca, server.pid)), args)
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
