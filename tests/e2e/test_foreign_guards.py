"""Foreign clusters guard themselves (docs/security.md), end to end on the dev clusters.

As a user at home, and as an attacker holding the home identity's credentials (the kubeconfig in
the home Secret `liqo/liqo-credentials-foreign-1`): the pod-security floor of the twins, the
admission policy on ShadowPods, the grant the foreign agent holds each home to, the twin names it
may take, and what a foreign side's stack never takes over.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import subprocess
import sys
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from lightkube import ApiError, Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Event, Namespace, Node, Pod, ResourceQuota, Secret, ServiceAccount
from lightkube.types import PatchType
from lightkube.utils.quantity import parse_quantity
from pulumi import automation as auto

from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment, fake_node_manifest, node_pod_cidr
from liqo_stack.dev.external_runtime import SHARED_KUBELET, ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names
from runtime.api.quota import spec_requests
from runtime.api.resources import (
    NamespaceMapResource,
    NamespaceOffloadingResource,
    QuotaResource,
    ResourceAdvertisementResource,
    ShadowPodResource,
    VirtualNodeResource,
)
from runtime.controllers.namespacemap import twin_labels
from tests.support.cli import liqo_stack_output, previewed
from tests.support.kube import (
    VIRTUAL_NODES,
    exists,
    get_or_none,
    node_ready,
    offload,
    restarts,
    unoffload,
    wait_phase,
    wait_until,
)

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

TWIN_SUFFIX = "-home"
FOREIGN = "foreign-1"
TENANT = names.tenant_namespace("home")


def saved_identity_kubeconfig(home: Client, directory: Path) -> Path:
    """The home identity's kubeconfig for foreign-1 as the home Secret holds it now, saved to a file."""
    secret: Any = home.get(Secret, names.credentials_secret_name(FOREIGN), namespace=names.LIQO_NAMESPACE)
    path = directory / "identity.yaml"
    path.write_bytes(base64.b64decode(secret.data["kubeconfig"]))
    return path


@pytest.fixture
def identity_kubeconfig(home: Client, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What an attacker who read the home Secret holds: the home identity in foreign-1 (read for each
    test: a test here reissues it)."""
    return saved_identity_kubeconfig(home, tmp_path_factory.mktemp("identity"))


@pytest.fixture
def attacker(identity_kubeconfig: Path) -> Client:
    return Client(KubeConfig.from_file(identity_kubeconfig))


def root_pod_spec(**extra: Any) -> dict[str, Any]:
    """The probe of the issue: privileged, the node's root file system mounted, host namespaces."""
    return {
        "containers": [
            {
                "name": "root",
                "image": "busybox",
                "securityContext": {"privileged": True},
                "volumeMounts": [{"name": "host", "mountPath": "/host"}],
            }
        ],
        "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
        **extra,
    }


def shadow_pod(name: str, twin: str, pod: dict[str, Any], origin: str = "home") -> Any:
    return ShadowPodResource.from_dict(
        {
            "metadata": {
                "name": name,
                "namespace": twin,
                "labels": {names.ORIGIN_LABEL: origin, names.DESTINATION_LABEL: FOREIGN},
            },
            "spec": {"pod": pod},
        }
    )


def refusal(client: Client, obj: Any) -> str:
    """The API server's message refusing `obj`'s create (the test fails if it is created)."""
    with pytest.raises(ApiError) as refused:
        client.create(obj)
    assert refused.value.status.code == 403, refused.value.status
    return str(refused.value.status.message)


def warning_on(home: Client, namespace: str, pod: str, text: str) -> Any:
    events = home.list(Event, namespace=namespace, fields={"involvedObject.name": pod})
    return next((e for e in events if e.type == "Warning" and text in (e.message or "")), None)


def test_twins_carry_the_floor_and_the_foreign_api_server_refuses_a_root_pod_whoever_creates_it(
    offloaded: str, foreign: dict[str, Client]
) -> None:
    twin = offloaded + TWIN_SUFFIX
    labels = cast(Any, foreign[FOREIGN].get(Namespace, twin)).metadata.labels
    assert {label: labels.get(label) for label in names.POD_SECURITY_LABELS} == dict.fromkeys(
        names.POD_SECURITY_LABELS, "baseline"
    )
    # the foreign cluster's own admin, not held by the ShadowPod policy: Pod Security still refuses
    body = {"metadata": {"name": "root", "namespace": twin}, "spec": root_pod_spec()}
    message = refusal(foreign[FOREIGN], cast(Pod, Pod.from_dict(body)))
    assert 'violates PodSecurity "baseline' in message and "privileged" in message and "hostPath" in message


def test_a_root_pod_offloaded_from_home_is_refused_and_home_says_why(offloaded: str, home: Client) -> None:
    spec = root_pod_spec(nodeSelector={names.REMOTE_CLUSTER_ID_LABEL: FOREIGN})
    home.create(cast(Pod, Pod.from_dict({"metadata": {"name": "root", "namespace": offloaded}, "spec": spec})))

    def refused() -> Any:
        pod: Any = get_or_none(home, Pod, "root", offloaded)
        status = (pod.status if pod else None) or None
        return status if status and status.reason == "FailedOffloading" else None

    status = wait_until(refused, 60, "the home pod Pending with the foreign cluster's reason")
    assert status.phase == "Pending"
    assert "privileged" in status.message and "floor is baseline" in status.message and FOREIGN in status.message
    event = wait_until(lambda: warning_on(home, offloaded, "root", "floor is baseline"), 30, "a Warning event")
    assert "securityContext.privileged" in event.message
    home.delete(Pod, "root", namespace=offloaded, grace_period=0)


def test_a_pod_within_the_floor_runs(offloaded: str, home: Client, foreign: dict[str, Client]) -> None:
    spec = {
        "nodeSelector": {names.REMOTE_CLUSTER_ID_LABEL: FOREIGN},
        "containers": [{"name": "web", "image": "nginx", "securityContext": {"allowPrivilegeEscalation": False}}],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
    }
    home.create(cast(Pod, Pod.from_dict({"metadata": {"name": "plain", "namespace": offloaded}, "spec": spec})))
    wait_until(
        lambda: (p := cast(Any, get_or_none(home, Pod, "plain", offloaded))) and p.status.phase == "Running",
        60,
        "the pod Running",
    )
    assert get_or_none(foreign[FOREIGN], Pod, "plain", offloaded + TWIN_SUFFIX) is not None
    home.delete(Pod, "plain", namespace=offloaded, grace_period=0)


def test_the_home_identity_cannot_write_a_shadowpod_the_home_side_would_not_make(
    offloaded: str, attacker: Client, foreign: dict[str, Client]
) -> None:
    twin = offloaded + TWIN_SUFFIX
    everything = root_pod_spec(hostNetwork=True, hostPID=True)
    everything["containers"][0]["resources"] = {"requests": {"cpu": "30"}}
    message = refusal(attacker, shadow_pod("attack", twin, everything))
    assert "hostNetwork" in message
    message = refusal(attacker, shadow_pod("attack", twin, root_pod_spec()))
    assert "privileged" in message and "floor is baseline" in message
    host_path_only = root_pod_spec()
    del host_path_only["containers"][0]["securityContext"]
    assert "hostPath" in refusal(attacker, shadow_pod("attack", twin, host_path_only))
    plain = {"containers": [{"name": "c", "image": "busybox"}]}
    assert "origin" in refusal(attacker, shadow_pod("attack", twin, plain, origin="someone-else"))
    # a node of its choosing (past the foreign scheduler and its taints), or a priority over the cluster's pods
    for field, value in (("nodeName", "foreign-1-worker-0"), ("priorityClassName", "system-cluster-critical")):
        message = refusal(attacker, shadow_pod("attack", twin, {**plain, field: value}))
        assert "the foreign cluster's to decide" in message, message
    for namespace in ("default", TENANT):  # not twins: RBAC refuses before any policy
        with pytest.raises(ApiError) as denied:
            attacker.create(shadow_pod("attack", namespace, plain))
        assert denied.value.status.code == 403
    assert get_or_none(foreign[FOREIGN], Pod, "attack", twin) is None


def test_the_home_identity_cannot_read_or_change_its_grant_or_its_floor(
    offloaded: str, identity_kubeconfig: Path, dev_env: DevEnvironment
) -> None:
    def can_i(*args: str) -> str:
        command = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", str(identity_kubeconfig), "auth", "can-i", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.strip()

    quotas = "quotas.offloading.liqo.io"
    for verb in ("get", "patch", "delete"):
        assert can_i(verb, quotas, "-n", TENANT) == "no", f"{verb} its Quota"
    assert can_i("patch", f"namespaces/{offloaded}{TWIN_SUFFIX}") == "no", "relabel its twin"
    assert can_i("patch", "validatingadmissionpolicies.admissionregistration.k8s.io") == "no"
    assert can_i("create", "pods", "-n", offloaded + TWIN_SUFFIX) == "no", "create pods itself"


# A resource nothing else in the suite requests (an extended resource of no node): what home's pods in
# foreign-1 hold of it is the burst's alone, whatever other modules left behind or are still deleting.
PROBE = "liqo-stack.dev/grant-probe"


def home_probe_in_use(client: Client) -> Decimal:
    pods = [cast(Any, p) for p in client.list(Pod, namespace="*", labels={names.ORIGIN_LABEL: "home"})]
    running = [p.to_dict() for p in pods if p.status.phase not in ("Succeeded", "Failed")]
    return sum((spec_requests(p["spec"]).get(PROBE, Decimal(0)) for p in running), Decimal(0))


@pytest.fixture
def tight_grant(foreign: dict[str, Client]) -> Iterator[Decimal]:
    """foreign-1's grant to home: 10 of the probe resource (and nothing else held); put back after."""
    client = foreign[FOREIGN]
    assert home_probe_in_use(client) == 0
    grant = Decimal(10)
    patch = {"spec": {"resources": {PROBE: str(grant)}}}
    client.patch(QuotaResource, "home", patch, namespace=TENANT, patch_type=PatchType.MERGE)
    try:
        yield grant
    finally:
        client.patch(QuotaResource, "home", {"spec": {"resources": None}}, namespace=TENANT, patch_type=PatchType.MERGE)


def test_fifty_concurrent_creates_never_put_more_than_the_grant_in_use(
    offloaded: str, home: Client, foreign: dict[str, Client], tight_grant: Decimal
) -> None:
    """50 pods, each asking 1 of the 10 granted, created at once at home and bound to foreign-1's virtual
    node: the foreign agent lets 10 start (their pods made there), and the others say why at home."""
    client, twin = foreign[FOREIGN], offloaded + TWIN_SUFFIX
    names_ = [f"burst-{n}" for n in range(50)]

    probe = {PROBE: "1"}  # an extended resource: limits equal to requests
    spec = {
        "nodeName": VIRTUAL_NODES[FOREIGN],
        "tolerations": [{"key": "virtual-node.liqo.io/not-allowed", "operator": "Exists"}],
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": probe, "limits": probe}}],
    }
    # built before the threads start: two threads decoding a lightkube model for the first time together can
    # crash the process (see liqo_stack/resources/destroy_guard.py)
    pods = [
        cast(Pod, Pod.from_dict({"metadata": {"name": name, "namespace": offloaded}, "spec": spec})) for name in names_
    ]
    threads = [threading.Thread(target=home.create, args=(pod,)) for pod in pods]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    def decided() -> list[Any] | None:
        shadows = [s for s in client.list(ShadowPodResource, namespace=twin) if s.metadata.name in names_]
        started = {cast(Any, p).metadata.name for p in client.list(Pod, namespace=twin)} & set(names_)
        refused = [s for s in shadows if (s.get("status") or {}).get("reason") == "CreateFailed"]
        return shadows if len(shadows) == 50 and len(started) + len(refused) == 50 else None

    shadows = wait_until(decided, 120, "every ShadowPod of the burst started or refused")
    assert home_probe_in_use(client) == tight_grant, "all of the grant in use, and no more"
    started = [s for s in shadows if (s.get("status") or {}).get("reason") != "CreateFailed"]
    assert len(started) == 10
    refused = next(s for s in shadows if (s.get("status") or {}).get("reason") == "CreateFailed")
    assert "exceeds what foreign-1" in refused["status"]["message"]
    name = refused.metadata.name
    wait_until(lambda: warning_on(home, offloaded, name, f"{PROBE} 1 asked"), 60, "the reason on the home pod")
    pod: Any = home.get(Pod, name, namespace=offloaded)
    assert pod.status.phase == "Pending" and pod.status.reason == "FailedOffloading"
    for each in names_:
        home.delete(Pod, each, namespace=offloaded, grace_period=0)


@pytest.fixture
def fast_health_checks(home: Client) -> Iterator[None]:
    """foreign-1's virtual node checks its foreign API server every 2 s (2 failures: NotReady); put back after."""
    name = names.virtual_node_name(FOREIGN)
    before = home.get(VirtualNodeResource, name, namespace=names.LIQO_NAMESPACE)["spec"].get("healthCheck")
    fast = {"spec": {"healthCheck": {"intervalSeconds": 2, "failureThreshold": 2}}}
    home.patch(VirtualNodeResource, name, fast, namespace=names.LIQO_NAMESPACE, patch_type=PatchType.MERGE)
    try:
        yield
    finally:
        back = {"spec": {"healthCheck": before}} if before else [{"op": "remove", "path": "/spec/healthCheck"}]
        home.patch(
            VirtualNodeResource,
            name,
            back,
            namespace=names.LIQO_NAMESPACE,
            patch_type=PatchType.MERGE if before else PatchType.JSON,
        )


def running_on_foreign_1(home: Client, namespace: str, name: str) -> Any:
    """A plain pod created at home with a nodeSelector for foreign-1, once Running there (read at home)."""
    spec = {"nodeSelector": {names.REMOTE_CLUSTER_ID_LABEL: FOREIGN}, "containers": [{"name": "c", "image": "nginx"}]}
    home.create(cast(Pod, Pod.from_dict({"metadata": {"name": name, "namespace": namespace}, "spec": spec})))
    return wait_until(
        lambda: (p := cast(Any, get_or_none(home, Pod, name, namespace))) and p.status.phase == "Running" and p,
        60,
        f"pod {name} Running on foreign-1",
    )


def identity_answer(kubeconfig: Path) -> int:
    """The HTTP status foreign-1's API server answers a read the home identity may do, with that token."""
    client = Client(KubeConfig.from_file(kubeconfig))
    try:
        list(client.list(ResourceAdvertisementResource, namespace=TENANT))  # a list is sent once iterated
    except ApiError as err:
        return int(err.status.code or 0)
    finally:
        client.close()
    return 200


def token_in(kubeconfig: Path) -> str:
    return str(yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"])


def kubectl_as_foreign_admin(dev_env: DevEnvironment, *args: str) -> str:
    """The pinned kubectl with foreign-1's admin kubeconfig; it must succeed."""
    command = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", str(dev_env.kubeconfig(FOREIGN)), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{command}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_a_revoked_token_never_works_again_and_its_successor_is_picked_up_live_with_no_pod_touched(
    offloaded: str,
    home: Client,
    foreign: dict[str, Client],
    runtime: ExternalRuntime,
    installed: auto.Stack,
    dev_env: DevEnvironment,
    fast_health_checks: None,
    tmp_path: Path,
) -> None:
    """As docs/security.md says: foreign-1's admin revokes the home identity's token (its Secret deleted),
    `pulumi up --refresh` issues another. The revoked token gets 401, and still does once the new one
    exists; the new one is another token, and works. The virtual node goes NotReady (ForeignUnauthorized),
    then Ready, with the same virtual kubelet process, and the same pods at home and there, never restarted."""
    running = running_on_foreign_1(home, offloaded, "steady")
    remote = cast(Any, foreign[FOREIGN].get(Pod, "steady", namespace=offloaded + TWIN_SUFFIX))
    kubelet_pid = runtime.pid(f"kubelet-{FOREIGN}")
    node = names.virtual_node_name(FOREIGN)
    revoked = saved_identity_kubeconfig(home, tmp_path).rename(tmp_path / "revoked.yaml")
    assert identity_answer(revoked) == 200

    def ready_reason() -> tuple[str, str]:
        conditions = cast(Any, home.get(Node, node)).status.conditions or []
        ready = next(c for c in conditions if c.type == "Ready")
        return ready.status, ready.reason or ""

    said = kubectl_as_foreign_admin(
        dev_env, "-n", TENANT, "delete", "secret", "-l", f"{names.HOME_IDENTITY_TOKEN_LABEL}=home"
    )
    assert said.count("deleted") == 1, said
    wait_until(lambda: ready_reason() == ("False", "ForeignUnauthorized"), 60, "NotReady: ForeignUnauthorized")
    # the API server takes a token it authenticated as good for 10 s more (its token cache)
    wait_until(lambda: identity_answer(revoked) == 401, 30, "the revoked token refused")
    installed.up(on_output=print, refresh=True)  # issues a new token into the credentials Secret
    wait_until(lambda: ready_reason()[0] == "True", 30, "Ready again with the new token")
    reissued = saved_identity_kubeconfig(home, tmp_path)
    assert token_in(reissued) != token_in(revoked), "a new credential, not the revoked one again"
    assert identity_answer(reissued) == 200
    assert identity_answer(revoked) == 401, "the revoked token stays revoked"
    assert runtime.pid(f"kubelet-{FOREIGN}") == kubelet_pid, "the virtual kubelet was not restarted"
    after: Any = home.get(Pod, "steady", namespace=offloaded)
    assert after.metadata.uid == running.metadata.uid and after.status.phase == "Running"
    assert restarts(after) == restarts(running), "its containers were not restarted"
    remote_after = cast(Any, foreign[FOREIGN].get(Pod, "steady", namespace=offloaded + TWIN_SUFFIX))
    assert remote_after.metadata.uid == remote.metadata.uid, "the remote pod was not touched"
    assert restarts(remote_after) == restarts(remote)
    home.delete(Pod, "steady", namespace=offloaded, grace_period=0)


def foreign_cli(dev_env: DevEnvironment, *args: str) -> str:
    """`liqo-stack ARGS` as foreign-1's admin runs it (its kubeconfig); it must succeed."""
    command = [str(Path(sys.executable).parent / "liqo-stack"), *args, "--kubeconfig", str(dev_env.kubeconfig(FOREIGN))]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{command}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.fixture
def uncordoned_after(foreign: dict[str, Client]) -> Iterator[None]:
    """Whatever the test did, home is not left cordoned in foreign-1 (later modules run pods there)."""
    try:
        yield
    finally:
        foreign[FOREIGN].patch(
            QuotaResource, "home", {"spec": {"cordoned": False}}, namespace=TENANT, patch_type=PatchType.MERGE
        )


def test_cordon_then_drain_from_the_foreign_side_and_uncordon(
    offloaded: str, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment, uncordoned_after: None
) -> None:
    """As a node: cordoned, the running pods go on and no new one starts, and the virtual node shows
    it; drained, the pods there are evicted and their controller makes new ones at home, which run
    there again once uncordoned."""
    node = names.virtual_node_name(FOREIGN)
    labels: dict[str, Any] = {"app": "drain-me"}
    deployment = {
        "metadata": {"name": "drain-me", "namespace": offloaded},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {names.REMOTE_CLUSTER_ID_LABEL: FOREIGN},
                    "containers": [{"name": "c", "image": "nginx"}],
                },
            },
        },
    }
    home.create(cast(Deployment, Deployment.from_dict(deployment)))

    def running() -> list[Any] | None:
        pods = [cast(Any, p) for p in home.list(Pod, namespace=offloaded, labels=labels)]
        up = [p for p in pods if p.status.phase == "Running" and not p.metadata.deletionTimestamp]
        return up if len(up) == 2 and len(pods) == 2 else None

    before = {p.metadata.uid for p in wait_until(running, 90, "2 pods Running on foreign-1")}
    said = foreign_cli(dev_env, "cordon", "home", "home")
    assert "cordoned" in said and "2 running pods go on" in said

    def shown() -> bool:
        live = cast(Any, home.get(Node, node))
        conditions = {c.type: c for c in live.status.conditions or []}
        cordoned = conditions.get("ForeignCordoned")
        return bool(live.spec.unschedulable) and cordoned is not None and cordoned.status == "True"

    wait_until(shown, 30, "the virtual node unschedulable, condition ForeignCordoned")
    assert {p.metadata.uid for p in running() or []} == before, "the running pods go on"
    spec = {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]}
    home.create(cast(Pod, Pod.from_dict({"metadata": {"name": "late", "namespace": offloaded}, "spec": spec})))
    wait_until(lambda: warning_on(home, offloaded, "late", "is cordoned in foreign-1"), 60, "a new pod refused")

    said = foreign_cli(dev_env, "drain", "home", "home", "--yes")
    assert "drained" in said and f"{offloaded}{TWIN_SUFFIX}/" in said

    def replaced() -> list[Any] | None:
        pods = [cast(Any, p) for p in home.list(Pod, namespace=offloaded, labels=labels)]
        fresh = [p for p in pods if p.metadata.uid not in before and not p.metadata.deletionTimestamp]
        gone = not any(p.metadata.uid in before for p in pods)
        return fresh if gone and len(fresh) == 2 else None

    fresh = wait_until(replaced, 90, "the drained pods evicted at home and replaced by their controller")
    assert all(p.status.phase == "Pending" for p in fresh), "no node takes them while foreign-1 is cordoned"
    foreign_cli(dev_env, "uncordon", "home", "home")
    wait_until(lambda: not shown() and not cast(Any, home.get(Node, node)).spec.unschedulable, 30, "uncordoned")
    wait_until(running, 90, "the replacements Running on foreign-1 again")
    home.delete(Deployment, "drain-me", namespace=offloaded)
    home.delete(Pod, "late", namespace=offloaded, grace_period=0)


def test_preview_pod_says_a_foreign_cluster_refuses_the_pod_before_it_exists(
    offloaded: str, dev_env: DevEnvironment, tmp_path: Path
) -> None:
    """`liqo-stack preview pod -f` asks each foreign cluster with a dry run of the ShadowPod as the home
    identity: its own admission policy answers, and nothing is created."""
    manifest = tmp_path / "root.yaml"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root-preview"}, "spec": root_pod_spec()}
    manifest.write_text(yaml.safe_dump(pod))
    clusters = previewed(dev_env, "-f", str(manifest), "-n", offloaded)
    for cluster_id in (FOREIGN, "foreign-2"):
        answer = clusters[cluster_id]["foreignAdmission"]
        assert answer["admitted"] is False, answer
        assert "privileged" in answer["message"] and "floor is baseline" in answer["message"]
    text = liqo_stack_output(dev_env, "preview", "pod", "-f", str(manifest), "-n", offloaded)
    assert "refused by foreign-1 (its admission, asked with a dry run)" in text
    plain = {**pod, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    manifest.write_text(yaml.safe_dump(plain))
    assert previewed(dev_env, "-f", str(manifest), "-n", offloaded)[FOREIGN]["foreignAdmission"]["admitted"] is True


def test_a_grant_set_then_taken_out_by_pulumi_up_leaves_the_quota_as_it_was_and_nothing_to_change(
    foreign: dict[str, Client], installed: auto.Stack
) -> None:
    """`grant: {resources: {cpu: "8"}}` set on foreign-1 and applied, then taken out and applied: the
    Quota is as it was before (the grant pruned whole, not left null for the schema to refuse), and a
    refreshed preview has nothing to change."""

    def quota_spec() -> dict[str, Any]:
        return dict(foreign[FOREIGN].get(QuotaResource, names.quota_name("home"), namespace=TENANT)["spec"])

    before = quota_spec()
    declared = PulumiEnvironment.liqo_config(installed)
    granted = copy.deepcopy(declared)
    next(c for c in granted["foreignClusters"] if c["clusterId"] == FOREIGN)["grant"] = {"resources": {"cpu": "8"}}
    PulumiEnvironment.set_liqo_config(installed, granted)
    installed.up(on_output=print)
    assert quota_spec() == {**before, "resources": {"cpu": "8"}}
    PulumiEnvironment.set_liqo_config(installed, declared)
    installed.up(on_output=print)
    assert quota_spec() == before
    installed.preview(expect_no_changes=True, refresh=True, diff=True, on_output=print)


# -- twin names (docs/security.md#twin-names): the foreign side decides what a home may name ----------
def current_mapping(client: Client) -> dict[str, Any]:
    found = client.get(NamespaceMapResource, "home", namespace=TENANT)
    return dict((found.get("status") or {}).get("currentMapping") or {})


def ask_for_twins(client: Client, mapping: dict[str, str | None], dry_run: bool = False) -> None:
    """A merge patch of home's NamespaceMap in foreign-1, as the home identity or foreign-1's admin."""
    patch = {"spec": {"desiredMapping": mapping}}
    client.patch(NamespaceMapResource, "home", patch, namespace=TENANT, patch_type=PatchType.MERGE, dry_run=dry_run)


def foreign_1_condition(home: Client, namespace: str) -> dict[str, Any]:
    status = wait_phase(home, namespace, "AllFailed")  # foreign-1 alone is selected
    return next(c for c in status["remoteNamespacesConditions"][FOREIGN] if c["type"] == "Ready")


# foreign-1 alone (the shared stack's labels)
EUROPE = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["europe"]}]}]}


def test_a_twin_name_the_foreign_side_did_not_allow_is_refused_by_its_api_server_and_its_agent(
    offloaded: str, home: Client, attacker: Client, foreign: dict[str, Client]
) -> None:
    """The squat of issue 59 as the home identity: the NamespaceMap entry naming another home's tenant
    (and a kube-* name, and an undeclared SelectedName) is refused by foreign-1's admission; written past
    it (by foreign-1's admin, whom the policy does not hold: a map from before the policy), the agent
    refuses it. Home sees each refusal with foreign-1's reason."""
    client, squat = foreign[FOREIGN], names.tenant_namespace("home-2")
    for local, twin, said in (
        ("x4", squat, "reserved in every cluster"),
        ("x5", "kube-squat", "reserved in every cluster"),
        ("x6", "undeclared-twin", "not allowed for home cluster home"),
    ):
        with pytest.raises(ApiError) as refused:
            ask_for_twins(attacker, {local: twin})
        assert refused.value.status.code == 422, refused.value.status
        assert said in str(refused.value.status.message) and f"{local}: {twin}" in str(refused.value.status.message)
    # what it may ask for passes the same admission (dry runs: nothing is stored): its DefaultName, a declared name
    ask_for_twins(attacker, {"x7": "x7-home", "x8": "shared-twin"}, dry_run=True)
    try:
        ask_for_twins(client, {"squat": squat})
        answer = wait_until(lambda: current_mapping(client).get("squat"), 30, "the agent's answer to the squat")
        assert answer["phase"] == "CreationFailed" and "reserved in every cluster (liqo*)" in answer["message"]
        assert get_or_none(client, Namespace, squat) is None
        # home asks for the same twin (already in the map): the agent's reason reaches its offloading
        offload(home, "squat", {"namespaceMappingStrategy": "SelectedName", "remoteNamespaceName": squat,
                                "clusterSelector": EUROPE})  # fmt: skip
        condition = foreign_1_condition(home, "squat")
        assert condition["reason"] == "CreationFailed" and "refused twin namespace" in condition["message"]
        # a name home asks for that foreign-1 never allowed it: refused by its admission, said the same way
        offload(home, "undeclared", {"namespaceMappingStrategy": "SelectedName",
                                     "remoteNamespaceName": "undeclared-twin", "clusterSelector": EUROPE})  # fmt: skip
        condition = foreign_1_condition(home, "undeclared")
        assert condition["reason"] == "CreationFailed" and "not allowed for home cluster home" in condition["message"]
        assert "foreign-1 refused the request for twin namespace undeclared-twin" in condition["message"]
        assert (
            "undeclared" not in (client.get(NamespaceMapResource, "home", namespace=TENANT)["spec"]["desiredMapping"])
        )
    finally:
        ask_for_twins(client, {"squat": None})
        for namespace in ("squat", "undeclared"):
            if get_or_none(home, NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace):
                unoffload(home, namespace)


def test_a_twin_an_admin_claimed_is_left_when_its_mapping_goes_and_the_home_loses_its_access(
    offloaded: str, home: Client, attacker: Client, foreign: dict[str, Client], dev_env: DevEnvironment
) -> None:
    """foreign-1's admin relabels a twin as a stack's takeover would (a tenant's labels): the home's
    access there goes at once, its NamespaceMap says why, and unoffloading deletes nothing of it."""
    client, twin = foreign[FOREIGN], "claimed" + TWIN_SUFFIX
    offload(home, "claimed", {"clusterSelector": EUROPE})
    wait_phase(home, "claimed", "Ready")
    assert attacker.list(Secret, namespace=twin) is not None  # the home identity reads its own twin
    kubectl = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", str(dev_env.kubeconfig(FOREIGN))]
    claim = [f"{names.TENANT_HOME_LABEL}=home-2", f"{names.COMPONENT_LABEL}=peering"]
    subprocess.run([*kubectl, "label", "namespace", twin, *claim], check=True, capture_output=True, timeout=30)
    try:
        answer = wait_until(
            lambda: (found := current_mapping(client).get("claimed")) and found["phase"] == "CreationFailed" and found,
            30,
            "the agent's answer to the claim",
        )
        assert "has been claimed since" in answer["message"], answer

        def denied() -> bool:
            try:
                list(attacker.list(Secret, namespace=twin))
            except ApiError as err:
                return err.status.code == 403
            return False

        wait_until(denied, 30, "the home identity's access to the claimed namespace removed")
        unoffload(home, "claimed")
        kept: Any = client.get(Namespace, twin)
        assert kept.metadata.deletionTimestamp is None, "the claimed namespace is not deleted"
        assert kept.metadata.labels[names.TENANT_HOME_LABEL] == "home-2"
    finally:
        client.delete(Namespace, twin)


def test_a_foreign_sides_stack_never_takes_over_a_tenant_object_it_did_not_create(
    offloaded: str,
    foreign: dict[str, Client],
    pulumi_env: PulumiEnvironment,
    project_dir: Path,
    dev_env: DevEnvironment,
) -> None:
    """What the issue's takeover met: home's twin `liqo-tenant-home-2` (made by an agent before the
    twin-name rules, so kept by today's), and another owner's ServiceAccount where home-3's identity
    goes. A foreign side's stack serving home-2 and home-3 fails `pulumi preview` and `pulumi up`,
    naming both, and changes nothing."""
    client = foreign[FOREIGN]
    squatted, tenant_3 = names.tenant_namespace("home-2"), names.tenant_namespace("home-3")
    identity_3 = names.home_identity_name("home-3")
    ask_for_twins(client, {"x4": squatted})  # as an agent before this release accepted it
    client.create(Namespace(metadata=ObjectMeta(name=squatted, labels=twin_labels("home", FOREIGN))))
    ours = {
        names.MANAGED_BY_LABEL: names.MANAGED_BY,
        names.COMPONENT_LABEL: "peering",
        names.TENANT_HOME_LABEL: "home-3",
    }
    client.create(Namespace(metadata=ObjectMeta(name=tenant_3, labels=ours)))
    theirs = ObjectMeta(name=identity_3, namespace=tenant_3, labels={names.MANAGED_BY_LABEL: "helm"})
    client.create(ServiceAccount(metadata=theirs))
    side = pulumi_env.stack_for_directory(project_dir, "takeover-side")
    try:
        wait_until(
            lambda: (current_mapping(client).get("x4") or {}).get("phase") == "Accepted", 30, "the old twin kept"
        )
        homes = [{"clusterId": "home-2"}, {"clusterId": "home-3"}]
        config = {"clusterId": FOREIGN, "kubeconfigPath": str(dev_env.kubeconfig(FOREIGN)), "homes": homes}
        pulumi_env.set_liqo_config(side, {"foreignSide": config, "runtime": {"mode": "external"}})
        for command in (side.preview, side.up):
            with pytest.raises(auto.CommandError) as failed:
                command(on_output=print)
            said = str(failed.value)
            assert "liqo:foreignSide.homes: the stack would take over objects in foreign-1" in said, said
            assert f"Namespace {squatted} exists and is not liqo-stack's (it carries twin labels" in said
            assert f"ServiceAccount {tenant_3}/{identity_3} exists and is not liqo-stack's" in said
            assert "managed-by=helm" in said
        labels = cast(Any, client.get(Namespace, squatted)).metadata.labels
        assert labels[names.ORIGIN_LABEL] == "home" and names.TENANT_HOME_LABEL not in labels, "not taken over"
        account = cast(Any, client.get(ServiceAccount, identity_3, namespace=tenant_3))
        assert account.metadata.labels[names.MANAGED_BY_LABEL] == "helm"
        resources = (side.export_stack().deployment or {}).get("resources") or []
        assert not [r for r in resources if "kubernetes:" in r["type"]], "nothing declared"
    finally:
        side.workspace.remove_stack("takeover-side")
        client.delete(Namespace, tenant_3)
        ask_for_twins(client, {"x4": None})  # the agent deletes the old twin: its mapping is gone
        wait_until(lambda: not exists(client, squatted), 60, f"{squatted} deleted by the agent that made it")


# -- where: the nodes a home may use (docs/security.md#nodes) ----------------------------------------
FOR_HOMES = "e2e.liqo-stack.io/for-homes"  # on the test's fake nodes of foreign-1, for its time only
KEPT = {"key": "e2e.liqo-stack.io/kept", "value": "admins", "effect": "NoSchedule"}
KEPT_TOLERATION = {**KEPT, "operator": "Equal"}


def cpu_of(node: Any) -> Decimal:
    return Decimal(str(parse_quantity((node.status.capacity or {})["cpu"])))


def set_quota(client: Client, spec: dict[str, Any]) -> None:
    """As foreign-1's admin: a merge patch of home's Quota there (null removes a field)."""
    client.patch(QuotaResource, "home", {"spec": spec}, namespace=TENANT, patch_type=PatchType.MERGE)


@pytest.fixture
def nodes_for_homes(foreign: dict[str, Client], session_layout: ClusterLayout) -> Iterator[tuple[str, str]]:
    """foreign-1 with two fake nodes of the test's, both labelled for homes: `guest`, and `kept`, which
    its admins taint for themselves; and home's Quota there letting it use only nodes labelled for
    homes (and the tolerations it had). Yields (guest, kept); all of it put back after."""
    client = foreign[FOREIGN]
    before = cast(Any, client.get(QuotaResource, "home", namespace=TENANT))["spec"].get("nodes")
    made = []
    for index, taints in ((7, []), (8, [KEPT])):
        shape = session_layout.node
        manifest: Any = fake_node_manifest(
            FOREIGN, index, shape, node_pod_cidr(session_layout.pod_cidr(FOREIGN), index, shape.pods)
        )
        manifest["metadata"]["labels"][FOR_HOMES] = "yes"
        manifest["spec"]["taints"] = taints
        made.append(cast(Any, client.create(cast(Node, Node.from_dict(manifest)))).metadata.name)
    try:
        wait_until(lambda: all(node_ready(client, n) for n in made), 60, "the test's nodes Ready in foreign-1")
        set_quota(client, {"nodes": {"selector": {FOR_HOMES: "yes"}, "tolerations": (before or {}).get("tolerations")}})
        yield made[0], made[1]
    finally:
        set_quota(client, {"nodes": None})
        if before:
            set_quota(client, {"nodes": before})
        for name in made:
            client.delete(Node, name)


def test_a_homes_pods_run_only_on_the_nodes_it_may_use_whoever_writes_them(
    offloaded: str,
    home: Client,
    foreign: dict[str, Client],
    attacker: Client,
    runtime: ExternalRuntime,
    nodes_for_homes: tuple[str, str],
) -> None:
    """foreign-1 lets home use only its nodes labelled for homes, tolerating no taint of its admins: the
    virtual node counts that node alone, home's pods run there (one tolerating every taint too), one
    tolerating the kept taint is refused with the reason at home, and the home identity's own
    ShadowPods get out neither through the admission policy nor past the agent."""
    client, twin = foreign[FOREIGN], offloaded + TWIN_SUFFIX
    guest, kept = nodes_for_homes
    worker = f"{FOREIGN}-worker-0"  # one of foreign-1's own nodes, not labelled for homes
    virtual = names.virtual_node_name(FOREIGN)
    share = cpu_of(client.get(Node, guest)) * Decimal("0.9")  # the guest node's, x the sharing percentage
    wait_until(lambda: cpu_of(home.get(Node, virtual)) == share, 60, "the virtual node's cpu: the guest node's only")
    at_home = ("guest", "anywhere", "kept")
    shadows = ("elsewhere", "kept-node", "admins")
    try:
        # as a user at home: a plain pod and one tolerating every taint run on the guest node; one
        # tolerating the kept taint is refused
        pod = {"containers": [{"name": "c", "image": "nginx"}]}
        placed = {"nodeSelector": {names.REMOTE_CLUSTER_ID_LABEL: FOREIGN}, **pod}
        tolerating = {"guest": [], "anywhere": [{"operator": "Exists"}], "kept": [KEPT_TOLERATION]}
        for name, tolerations in tolerating.items():
            body = {"metadata": {"name": name, "namespace": offloaded}, "spec": {**placed, "tolerations": tolerations}}
            home.create(cast(Pod, Pod.from_dict(body)))
        for name in ("guest", "anywhere"):
            remote: Any = wait_until(functools.partial(running_there, client, twin, name), 60, f"{name} Running there")
            assert remote.spec.nodeName == guest and remote.spec.nodeSelector == {FOR_HOMES: "yes"}
            assert not any(t.key in (None, "", KEPT["key"]) for t in remote.spec.tolerations), "narrowed"
        event = wait_until(lambda: warning_on(home, offloaded, "kept", "may not tolerate"), 60, "the refusal at home")
        assert "e2e.liqo-stack.io/kept=admins:NoSchedule" in event.message and FOREIGN in event.message
        assert cast(Any, home.get(Pod, "kept", namespace=offloaded)).status.reason == "FailedOffloading"

        # as an attacker holding the home identity: its policy refuses what names a kept taint or
        # contradicts the selector
        message = refusal(attacker, shadow_pod("attack", twin, {**pod, "tolerations": [KEPT_TOLERATION]}))
        assert "may not tolerate e2e.liqo-stack.io/kept=admins:NoSchedule" in message, message
        message = refusal(attacker, shadow_pod("attack", twin, {**pod, "nodeSelector": {FOR_HOMES: "no"}}))
        assert f"may use only nodes with {FOR_HOMES}=yes" in message, message

        # a compromised home (its virtual kubelet, which deletes ShadowPods of no home pod, stopped): what
        # the policy admits, the agent holds to the nodes: a required affinity for a node outside the
        # selector, or for the kept node while tolerating every taint, finds no node; and a ShadowPod the
        # policy does not see (the foreign admin's own) is refused by the agent alone
        runtime.stop(SHARED_KUBELET)
        try:
            for name, node, tolerations in (("elsewhere", worker, []), ("kept-node", kept, [{"operator": "Exists"}])):
                attacker.create(shadow_pod(name, twin, {**pod, "affinity": on_node(node), "tolerations": tolerations}))
            client.create(shadow_pod("admins", twin, {**pod, "tolerations": [KEPT_TOLERATION]}))
            for name in ("elsewhere", "kept-node"):
                stuck = wait_until(functools.partial(unschedulable, client, twin, name), 60, f"{name} unschedulable")
                assert stuck.spec.nodeName is None and stuck.spec.nodeSelector == {FOR_HOMES: "yes"}
            refused = wait_until(lambda: create_failed(client, twin, "admins"), 60, "refused by the agent")
            assert "e2e.liqo-stack.io/kept=admins:NoSchedule" in refused["message"]
            assert get_or_none(client, Pod, "admins", twin) is None
        finally:
            for name in shadows:
                with contextlib.suppress(ApiError):
                    client.delete(ShadowPodResource, name, namespace=twin)
            runtime.start(SHARED_KUBELET)
        pods: list[Any] = list(client.list(Pod, namespace=twin))
        on_nodes = {p.spec.nodeName for p in pods if p.metadata.name in (*at_home, *shadows)}
        assert kept not in on_nodes and worker not in on_nodes, "no pod of home on a node kept from it"
    finally:
        for name in at_home:
            home.delete(Pod, name, namespace=offloaded, grace_period=0)
        wait_until(lambda: runtime.ready(SHARED_KUBELET) and node_ready(home, virtual), 90, "the virtual kubelet back")
        # gone from the twin too (the next tests read what runs there: a new floor names a pod it refuses)
        wait_until(
            lambda: not any(get_or_none(client, Pod, name, twin) for name in (*at_home, *shadows)),
            60,
            "the test's pods gone from the twin",
        )


def on_node(node: str) -> dict[str, Any]:
    """A required node affinity for one node, by its hostname."""
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def unschedulable(client: Client, twin: str, name: str) -> Any:
    """The pod, once the foreign scheduler found no node for it."""
    there: Any = get_or_none(client, Pod, name, twin)
    conditions = (there and there.status and there.status.conditions) or []
    return there if any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conditions) else None


def create_failed(client: Client, twin: str, name: str) -> Any:
    status = cast(Any, client.get(ShadowPodResource, name, namespace=twin)).get("status") or {}
    return status if status.get("reason") == "CreateFailed" else None


def running_there(client: Client, twin: str, name: str) -> Any:
    pod: Any = get_or_none(client, Pod, name, twin)
    return pod if pod is not None and pod.status and pod.status.phase == "Running" else None


# -- how much: the objects a home may keep in a twin (docs/security.md#objects) ----------------------
def test_a_twin_holds_no_more_configmaps_than_its_limit_and_home_says_why(
    offloaded: str, home: Client, foreign: dict[str, Client], identity_kubeconfig: Path, dev_env: DevEnvironment
) -> None:
    """foreign-1's admin limits home's twins there to 100 ConfigMaps (the twin's own kube-root-ca.crt
    among them): the home's ConfigMaps fill the twin to 100, the 101st is refused, and home says why on
    it. The home identity may neither change nor delete the limit."""
    client, twin, limit = foreign[FOREIGN], offloaded + TWIN_SUFFIX, 100
    set_quota(client, {"objects": {"count/configmaps": str(limit)}})
    try:

        def enforced() -> Any:
            quota: Any = get_or_none(client, ResourceQuota, names.TWIN_OBJECTS_QUOTA, twin)
            status: Any = (quota and quota.status) or None
            counted = status and (status.hard or {}).get("count/configmaps") == str(limit) and status.used
            return int(status.used["count/configmaps"]) if counted else None

        before = wait_until(enforced, 60, "the twin's ResourceQuota at 100 ConfigMaps, counted")
        batch: dict[str, Any] = {"e2e-batch": "configmaps"}
        made = [f"cm-{n}" for n in range(limit - before + 1)]
        for name in made:
            home.create(
                cast(
                    ConfigMap,
                    ConfigMap.from_dict({"metadata": {"name": name, "namespace": offloaded, "labels": batch}}),
                )
            )

        def filled() -> list[str] | None:
            copies = {cast(Any, c).metadata.name for c in client.list(ConfigMap, namespace=twin, labels=batch)}
            missing = [name for name in made if name not in copies]
            return missing if len(copies) == limit - before and len(missing) == 1 else None

        (refused,) = wait_until(filled, 90, f"the twin filled to {limit} ConfigMaps, one left out")
        event = wait_until(lambda: warning_on(home, offloaded, refused, "exceeded quota"), 60, "the reason at home")
        assert event.reason == "ReflectionFailed" and f"{FOREIGN} refused the copy" in event.message
        assert f"{names.TWIN_OBJECTS_QUOTA}" in event.message and f"limited: count/configmaps={limit}" in event.message
        assert enforced() == limit

        def can_i(*args: str) -> str:
            command = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", str(identity_kubeconfig), "auth", "can-i"]
            return subprocess.run([*command, *args], capture_output=True, text=True, timeout=30).stdout.strip()

        for verb in ("patch", "update", "delete"):
            assert can_i(verb, f"resourcequotas/{names.TWIN_OBJECTS_QUOTA}", "-n", twin) == "no", verb
    finally:
        set_quota(client, {"objects": None})
        for cm in home.list(ConfigMap, namespace=offloaded, labels={"e2e-batch": "configmaps"}):
            home.delete(ConfigMap, cast(Any, cm).metadata.name, namespace=offloaded)


def test_a_new_floor_is_previewed_with_the_pods_it_would_refuse_and_applied_without_stopping_them(
    offloaded: str, home: Client, foreign: dict[str, Client], installed: auto.Stack
) -> None:
    """Last in the module: the stack's floor of foreign-1 raised to restricted (the module's `installed`
    puts the config back afterwards)."""
    lax = running_on_foreign_1(home, offloaded, "lax")
    config = PulumiEnvironment.liqo_config(installed)
    for cluster in config["foreignClusters"]:
        if cluster["clusterId"] == FOREIGN:
            cluster["podSecurity"] = "restricted"
    PulumiEnvironment.set_liqo_config(installed, config)
    previewed_stack = installed.preview(on_output=print)
    twin = offloaded + TWIN_SUFFIX
    assert f"podSecurity restricted would refuse pods running in twin namespace {twin}" in previewed_stack.stdout
    assert "lax" in previewed_stack.stdout, "the pod is named"
    assert cast(Any, foreign[FOREIGN].get(Namespace, twin)).metadata.labels[names.POD_SECURITY_ENFORCE_LABEL] == (
        "baseline"
    ), "a preview changes nothing"
    installed.up(on_output=print)
    wait_until(
        lambda: (
            cast(Any, foreign[FOREIGN].get(Namespace, twin)).metadata.labels.get(names.POD_SECURITY_ENFORCE_LABEL)
            == "restricted"
        ),
        30,
        "the twin relabelled by the foreign agent",
    )
    after: Any = home.get(Pod, "lax", namespace=offloaded)
    assert after.metadata.uid == lax.metadata.uid and after.status.phase == "Running", "it keeps running"
    home.delete(Pod, "lax", namespace=offloaded, grace_period=0)
