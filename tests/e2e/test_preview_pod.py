"""`liqo-stack preview pod` against what the runtime really does (issue 39, part 2).

For a set of pods that together exercise every translation rule of docs/reflection.md (scheduling constraints
dropped, a home PriorityClass and scheduler among them, host namespaces off, the three anti-affinity
presets, RuntimeClass `liqo`, tolerations, the ServiceAccount token and the home API server, no token
at all, the VirtualNodes' label and annotation skip lists), the remote pod the CLI previews,
from the manifest before it is applied and from the live pod after, is the one the foreign agent
created, field for field once what the API server defaults there is set aside. The objects the
preview says follow the pod are in the twin; the one it says is skipped is not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.resources.core_v1 import ConfigMap, Pod, Secret, Service, ServiceAccount
from lightkube.resources.scheduling_v1 import PriorityClass

from liqo_stack.dev.clusters import DevEnvironment
from runtime.api import names
from tests.support.cli import liqo_stack_output, previewed, run_liqo_stack
from tests.support.kube import get_or_none, remote_pod, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

TWIN_SUFFIX = "-home"
IMAGE = "busybox:1.37"
# Set in the foreign cluster by its API server (defaults, the ServiceAccount and Priority admission
# plugins) or its scheduler (nodeName) on fields the forged spec leaves out: the only ones normalised.
DEFAULTED_THERE = ("nodeName", "schedulerName", "priority", "preemptionPolicy", "serviceAccountName", "serviceAccount")
# The ServiceAccount admission plugin names the token volume with a random suffix: a dry run and the
# real create get different ones.
TOKEN_VOLUME = re.compile(r"kube-api-access-[a-z0-9]{5}")


FROM_MANIFEST = ("scheduling", "runtime-class", "anti-soft")
PRIORITY_CLASS = "preview-high"
# docs/reflection.md's skip lists, set on both VirtualNodes for the test: the pods carry both
SKIPPED_LABEL, SKIPPED_ANNOTATION = "release", "preview.example/owner"


def container(**extra: Any) -> list[dict[str, Any]]:
    return [{"name": "main", "image": IMAGE, **extra}]


def pods(namespace: str) -> dict[str, dict[str, Any]]:
    """One pod per rule of docs/reflection.md (several per pod where they do not interfere), by name."""
    app = {"app": "preview", "tier": "web", "release": "r1"}

    def pod(name: str, spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {**app, "rule": name},
                "annotations": {SKIPPED_ANNOTATION: "team-a", **(annotations or {})},
            },
            "spec": spec,
        }

    return {
        # nodeSelector, affinity, topologySpreadConstraints dropped; a toleration of the user's kept and
        # the webhook's virtual-node one dropped; envFrom a ConfigMap, a volume of a Secret skipped
        "scheduling": pod(
            "scheduling",
            {
                "nodeSelector": {names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE},
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": names.TYPE_LABEL, "operator": "Exists"}]}
                            ]
                        }
                    }
                },
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": {"matchLabels": {"rule": "scheduling"}},
                    }
                ],
                "tolerations": [{"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": container(envFrom=[{"configMapRef": {"name": "settings"}}]),
                "volumes": [{"name": "hidden", "secret": {"secretName": "hidden", "optional": True}}],
            },
        ),
        "host-namespaces": pod(
            "host-namespaces", {"hostNetwork": True, "hostPID": True, "hostIPC": True, "containers": container()}
        ),
        "anti-soft": pod(
            "anti-soft",
            {"containers": container()},
            {names.ANTI_AFFINITY_PRESET_ANNOTATION: "soft", names.ANTI_AFFINITY_LABELS_ANNOTATION: "app,tier"},
        ),
        "anti-hard": pod("anti-hard", {"containers": container()}, {names.ANTI_AFFINITY_PRESET_ANNOTATION: "hard"}),
        "anti-propagate": pod(
            "anti-propagate",
            {
                "affinity": {
                    "podAntiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 50,
                                "podAffinityTerm": {
                                    "labelSelector": {"matchLabels": {"rule": "anti-propagate"}},
                                    "topologyKey": "kubernetes.io/hostname",
                                },
                            }
                        ]
                    }
                },
                "containers": container(),
            },
            {names.ANTI_AFFINITY_PRESET_ANNOTATION: "propagate"},
        ),
        # RuntimeClass liqo (Remote whatever the namespace says) dropped; a ServiceAccount of its own
        "runtime-class": pod(
            "runtime-class",
            {"runtimeClassName": names.RUNTIME_CLASS_NAME, "serviceAccountName": "reader", "containers": container()},
        ),
        "no-token": pod("no-token", {"automountServiceAccountToken": False, "containers": container()}),
        # a home PriorityClass (priority and preemptionPolicy resolved from it at home) and a home
        # scheduler, which bound the pod itself: none of them exists there, all dropped
        "home-scheduling": pod(
            "home-scheduling",
            {
                "priorityClassName": PRIORITY_CLASS,
                "schedulerName": "home-scheduler",
                "nodeName": names.virtual_node_name("foreign-1"),
                "containers": container(),
            },
        ),
    }


HOST_NAMESPACES = ("hostNetwork", "hostIPC", "hostPID")  # plain booleans: the API server omits false
# Labels the foreign cluster adds to a pod at binding (its topology): theirs, not the runtime's.
ADDED_THERE_LABELS = ("topology.kubernetes.io/",)


def normalised(remote: dict[str, Any], forged: dict[str, Any]) -> dict[str, Any]:
    """The remote pod's metadata (name, namespace, labels, annotations) and spec, without what the
    foreign API server set on fields the forged spec leaves out (DEFAULTED_THERE), the topology labels
    its scheduler added, and with the `false` it omits (host namespaces) given back."""
    spec = {k: v for k, v in remote["spec"].items() if k in forged["spec"] or k not in DEFAULTED_THERE}
    spec |= {k: False for k in HOST_NAMESPACES if forged["spec"].get(k) is False and k not in spec}
    meta = remote["metadata"]
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if not k.startswith(ADDED_THERE_LABELS)}
    return {
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": meta.get("annotations") or {},
        },
        "spec": spec,
    }


def forged_view(forged: dict[str, Any]) -> dict[str, Any]:
    meta = forged["metadata"]
    return {
        "metadata": {k: meta.get(k) or {} for k in ("name", "namespace", "labels", "annotations")},
        "spec": forged["spec"],
    }


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two wire-format values differ, as `path: a != b` (empty: equal), for a readable failure."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def any_token_volume_name(value: Any) -> Any:
    return json.loads(TOKEN_VOLUME.sub("kube-api-access-*", json.dumps(value)))


@pytest.fixture
def priority_class(home: Client) -> Iterator[str]:
    body = {"metadata": {"name": PRIORITY_CLASS}, "value": 1000, "preemptionPolicy": "Never"}
    home.create(PriorityClass.from_dict(body))  # type: ignore[call-overload]
    yield PRIORITY_CLASS
    home.delete(PriorityClass, PRIORITY_CLASS)


def skip_lists_taken_up(home: Client, foreign: dict[str, Client], namespace: str, twin: str) -> None:
    """Until each virtual kubelet reflects with the skip lists patched on its VirtualNode: a ConfigMap
    carrying the skipped label has a copy without it in every twin."""
    meta = {"name": "skip-probe", "namespace": namespace, "labels": {SKIPPED_LABEL: "r1"}}
    home.create(ConfigMap.from_dict({"metadata": meta, "data": {"a": "1"}}))  # type: ignore[call-overload]

    def without_label(client: Client) -> bool:
        copy: Any = get_or_none(client, ConfigMap, "skip-probe", twin)
        return copy is not None and SKIPPED_LABEL not in (copy.metadata.labels or {})

    wait_until(lambda: all(without_label(c) for c in foreign.values()), 60, "the skip lists taken up")


def test_the_preview_is_the_remote_pod_the_runtime_creates(
    offloaded: str,
    home: Client,
    foreign: dict[str, Client],
    dev_env: DevEnvironment,
    tmp_path: Path,
    priority_class: str,
    virtual_node_patched: Any,
) -> None:
    namespace, twin = offloaded, f"{offloaded}{TWIN_SUFFIX}"
    skip_lists = {"labelsNotReflected": [SKIPPED_LABEL], "annotationsNotReflected": [SKIPPED_ANNOTATION]}
    virtual_node_patched({"offloadingPatch": skip_lists}, clusters=tuple(foreign))
    skip_lists_taken_up(home, foreign, namespace, twin)
    home.create(ServiceAccount.from_dict({"metadata": {"name": "reader", "namespace": namespace}}))  # type: ignore[call-overload]
    home.create(ConfigMap.from_dict({"metadata": {"name": "settings", "namespace": namespace}, "data": {"a": "1"}}))  # type: ignore[call-overload]
    hidden = {"name": "hidden", "namespace": namespace, "annotations": {names.SKIP_REFLECTION_ANNOTATION: "true"}}
    home.create(Secret.from_dict({"metadata": hidden, "stringData": {"k": "v"}}))  # type: ignore[call-overload]
    # created after the skipped one, by the same reflector: once it is there, the skipped one was decided
    home.create(Secret.from_dict({"metadata": {"name": "sentinel", "namespace": namespace}, "stringData": {"k": "v"}}))  # type: ignore[call-overload]
    home.create(
        Service.from_dict(  # type: ignore[call-overload]
            {
                "metadata": {"name": "web", "namespace": namespace},
                "spec": {"selector": {"app": "preview"}, "ports": [{"port": 80}]},
            }
        )
    )
    manifests = pods(namespace)
    manifest = tmp_path / "pods.yaml"
    manifest.write_text(yaml.safe_dump_all(list(manifests.values())))

    # before: from the manifest, nothing applied (a dry run at home); a few pods are enough for what a
    # dry run adds (the token volume, the webhook's constraints, RuntimeClass liqo's scheduling)
    before = {name: previewed(dev_env, "--file", str(manifest), name) for name in FROM_MANIFEST}
    assert not list(home.list(Pod, namespace=namespace)), "the preview of a manifest created no pod"

    for body in manifests.values():
        home.create(Pod.from_dict(body))  # type: ignore[call-overload]

    def remote_pods() -> dict[str, tuple[str, Any]] | None:
        found: dict[str, tuple[str, Any]] = {}
        for name in manifests:
            pod: Any = home.get(Pod, name, namespace=namespace)
            node = pod.spec.nodeName
            cluster = node.removeprefix("liqo-") if node else ""
            there = remote_pod(foreign[cluster], twin, name) if cluster in foreign else None
            if there is None:
                return None
            found[name] = (cluster, there)
        return found

    running = wait_until(remote_pods, 90, "every pod created in its foreign cluster")
    live = {}
    for name, (cluster, there) in running.items():
        actual = there.to_dict()
        live[name] = after = previewed(dev_env, "-n", namespace, name)
        assert set(after) == set(foreign), "the Remote namespace selects both clusters"
        forged = after[cluster]["remotePod"]
        assert differences(normalised(actual, forged), forged_view(forged)) == [], name
        if name not in before:
            continue
        # the manifest's preview, before the pod existed: the same, but the token volume's random name
        early = before[name][cluster]["remotePod"]
        assert differences(any_token_volume_name(forged_view(early)), any_token_volume_name(forged_view(forged))) == []

    # the rules the normalised comparison cannot see: the skip lists, and the home scheduling fields
    # (the foreign API server defaults its own schedulerName and priority where they were dropped)
    for name, (cluster, there) in running.items():
        # the hard preset's anti-affinity selects on every label of the pod: those stay, skipped or not
        kept = name == "anti-hard"
        assert (SKIPPED_LABEL in there.metadata.labels) == kept, name
        assert (SKIPPED_LABEL in live[name][cluster]["remotePod"]["metadata"]["labels"]) == kept, name
        assert SKIPPED_ANNOTATION not in (there.metadata.annotations or {}), name
    own = running["home-scheduling"][1]
    assert (own.spec.schedulerName, own.spec.priorityClassName, own.spec.priority) == ("default-scheduler", None, 0)
    assert own.spec.preemptionPolicy == "PreemptLowerPriority", "the home class's Never stays home"
    dropped = liqo_stack_output(dev_env, "preview", "pod", "-n", namespace, "home-scheduling")
    for field in ("priorityClassName", "priority", "preemptionPolicy", "schedulerName"):
        assert f"  {field}: dropped (a scheduling constraint of the home cluster)" in dropped

    # what the preview says of the objects is what reflection did
    cluster = running["scheduling"][0]
    verdicts = {(o["kind"], o["name"]): (o["reflected"], o["why"]) for o in live["scheduling"][cluster]["objects"]}
    assert verdicts[("ConfigMap", "settings")][0] is True
    assert verdicts[("Secret", "hidden")] == (False, f"annotated {names.SKIP_REFLECTION_ANNOTATION} (policy DenyList)")
    assert verdicts[("Service", "web")][0] is True
    assert verdicts[("ServiceAccount token", names.token_secret_name("scheduling"))][0] is True
    there = foreign[cluster]
    wait_until(lambda: get_or_none(there, Secret, "sentinel", twin), 60, "the sentinel Secret reflected")
    # the others come through reflectors of their own (the token one asks the home API server first),
    # which neither the remote pods nor the Secrets' sentinel wait for
    for kind, reflected in ((ConfigMap, "settings"), (Service, "web"), (Secret, names.token_secret_name("scheduling"))):
        wait_until(partial(get_or_none, there, kind, reflected, twin), 60, f"{kind.__name__} {reflected} reflected")
    assert get_or_none(there, Secret, "hidden", twin) is None

    # each rule shows in the changes the text output lists
    text = liqo_stack_output(dev_env, "preview", "pod", "-n", namespace, "anti-soft")
    assert "affinity: replaced by the anti-affinity preset soft" in text
    assert "preferred on app=preview, tier=web per kubernetes.io/hostname" in text


def test_a_pod_not_found_says_what_to_do_next(offloaded: str, dev_env: DevEnvironment) -> None:
    done = run_liqo_stack(dev_env, "preview", "pod", "-n", offloaded, "no-such-pod")
    assert done.returncode == 1
    assert f"pod {offloaded}/no-such-pod not found in the home cluster" in done.stderr
    assert "--file PATH" in done.stderr


def test_the_docs_example_deployment_previews_before_it_is_applied(
    offloaded: str, home: Client, dev_env: DevEnvironment
) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "preview" / "web.yaml"
    clusters = previewed(dev_env, "--file", str(example), "-n", offloaded)
    assert set(clusters) == {"foreign-1", "foreign-2"}
    for cluster in clusters.values():
        remote = cluster["remotePod"]
        assert remote["metadata"]["name"].startswith("web-"), "named by the dry run, as the ReplicaSet's pods are"
        assert "nodeSelector" not in remote["spec"]
        assert remote["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        verdicts = {(o["kind"], o["name"]): o["reflected"] for o in cluster["objects"]}
        assert verdicts[("ConfigMap", "web-settings")] is False  # not created: missing at home
    assert not list(home.list(Pod, namespace=offloaded, labels={"app": "web"})), "a dry run stores nothing"


def test_an_unbound_pod_is_previewed_only_on_the_virtual_nodes_its_own_constraints_allow(
    offloaded: str, dev_env: DevEnvironment, tmp_path: Path
) -> None:
    """The home scheduler binds a pod only to a virtual node its nodeSelector matches (read from the
    live Nodes): the other cluster says why, and shows no remote pod."""
    manifest = tmp_path / "pinned.yaml"
    spec = {"nodeSelector": {names.REMOTE_CLUSTER_ID_LABEL: "foreign-1"}, "containers": container()}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pinned", "namespace": offloaded}, "spec": spec}
    manifest.write_text(yaml.safe_dump(pod))
    clusters = previewed(dev_env, "--file", str(manifest))
    assert clusters["foreign-1"]["unplaced"] is None and clusters["foreign-1"]["remotePod"] is not None
    unplaced = clusters["foreign-2"]["unplaced"]
    assert f"its nodeSelector {names.REMOTE_CLUSTER_ID_LABEL}=foreign-1 is not among the labels of" in unplaced
    assert clusters["foreign-2"]["remotePod"] is None
    text = liqo_stack_output(dev_env, "preview", "pod", "--file", str(manifest))
    assert "may run in foreign-1\n" in text
    assert "not placed here by the home scheduler: its nodeSelector" in text
