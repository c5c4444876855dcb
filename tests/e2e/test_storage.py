"""docs/reflection.md's storage fabric end to end: a claim of the home StorageClass `liqo` follows its first pod
to a virtual node, is provisioned in that foreign cluster with the negotiated storage class, and
comes back as a home PV bound to the claim with affinity to the virtual node.

Each foreign dev cluster gets statically provisioned hostPath PVs of class `local-static` (Immediate
binding), the class the `installed` stack negotiates as the default for both peerings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Event, PersistentVolume, PersistentVolumeClaim, Pod
from lightkube.resources.storage_v1 import StorageClass

from liqo_stack.dev.external_runtime import ExternalRuntime
from runtime.api import names
from tests.support.kube import VIRTUAL_NODES, get_or_none, queue_drained, remote_pod, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

FOREIGN_CLASS = "local-static"
STATIC_VOLUMES = 5  # per foreign cluster: each test's claim takes one (a released static PV is not reused)


def twin_of(namespace: str) -> str:
    return f"{namespace}-home"


@pytest.fixture(scope="module", autouse=True)
def static_volumes(foreign: dict[str, Client]) -> Iterator[None]:
    """In each foreign cluster a no-provisioner class and 2Gi hostPath PVs in it, bound by its PV controller."""
    for cluster_id, client in foreign.items():
        storage_class: Any = StorageClass.from_dict(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": FOREIGN_CLASS},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "Immediate",
            }
        )
        client.apply(storage_class, field_manager="test-storage")
        for index in range(STATIC_VOLUMES):
            volume: Any = PersistentVolume.from_dict(
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolume",
                    "metadata": {"name": f"static-{cluster_id}-{index}"},
                    "spec": {
                        "capacity": {"storage": "2Gi"},
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": FOREIGN_CLASS,
                        "persistentVolumeReclaimPolicy": "Retain",
                        "hostPath": {"path": f"/tmp/static-{index}"},
                    },
                }
            )
            client.apply(volume, field_manager="test-storage")
    yield
    for client in foreign.values():
        for volume in client.list(PersistentVolume):
            if volume.metadata and str(volume.metadata.name).startswith("static-"):
                client.delete(PersistentVolume, str(volume.metadata.name))
        client.delete(StorageClass, FOREIGN_CLASS)


def claim(name: str, namespace: str, storage: str = "1Gi") -> Any:
    return PersistentVolumeClaim.from_dict(
        {
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": "db"}},
            "spec": {
                "storageClassName": names.STORAGE_CLASS_NAME,
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": storage}},
            },
        }
    )


def pod_with(name: str, namespace: str, claim_name: str, node: str | None = None) -> Any:
    return Pod.from_dict(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                **({"nodeSelector": {names.HOSTNAME_LABEL: node}} if node else {}),
                "containers": [
                    {
                        "name": "db",
                        "image": "postgres:17",
                        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql/data"}],
                    }
                ],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}],
            },
        }
    )


def provisioned_sentinel(home: Client, client: Client, namespace: str, cluster_id: str) -> None:
    """A sentinel: a claim created now, as the scheduler leaves it for the virtual node of `cluster_id`,
    until its virtual kubelet has created the remote claim. One home watch of the namespace's claims
    feeds its FIFO storage queue, and a reconcile's first await is its write (storage.py): once the
    sentinel is provisioned, every earlier claim change in the namespace has been decided. Larger
    than the static PVs, it binds none of them; deleted again."""
    body = claim("sentinel", namespace, storage="5Gi")
    body.metadata.annotations = {names.SELECTED_NODE_ANNOTATION: VIRTUAL_NODES[cluster_id]}
    home.create(body)
    try:
        wait_until(
            lambda: get_or_none(client, PersistentVolumeClaim, "sentinel", twin_of(namespace)),
            60,
            "the sentinel claim provisioned",
        )
    finally:
        home.delete(PersistentVolumeClaim, "sentinel", namespace=namespace)


def running(home: Client, namespace: str, name: str, timeout: float = 90) -> Any:
    def check() -> Any:
        pod: Any = get_or_none(home, Pod, name, namespace)
        return pod if pod is not None and pod.status and pod.status.phase == "Running" else None

    return wait_until(check, timeout, f"pod {name} Running at home")


def bound(client: Client, name: str, namespace: str, timeout: float = 60) -> Any:
    def check() -> Any:
        found: Any = get_or_none(client, PersistentVolumeClaim, name, namespace)
        return found if found is not None and found.status and found.status.phase == "Bound" else None

    return wait_until(check, timeout, f"claim {namespace}/{name} Bound")


def home_volume(home: Client, claim_uid: str) -> Any:
    try:
        return home.get(PersistentVolume, f"pvc-{claim_uid}")
    except Exception:
        return None


def test_a_liqo_claim_follows_its_pod_to_a_virtual_node_and_comes_back_as_a_bound_volume(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    home.create(claim("data", offloaded))
    home.create(pod_with("writer", offloaded, "data"))
    writer = running(home, offloaded, "writer")
    node = writer.spec.nodeName
    assert node in VIRTUAL_NODES.values()
    cluster_id = node.removeprefix("liqo-")
    other_id = next(c for c in VIRTUAL_NODES if c != cluster_id)
    twin = twin_of(offloaded)

    # the claim went to that foreign cluster only, with the negotiated default class, and bound there
    remote = bound(foreign[cluster_id], "data", twin)
    assert remote.spec.storageClassName == FOREIGN_CLASS
    assert remote.metadata.labels == {
        "app": "db",
        names.ORIGIN_LABEL: "home",
        names.DESTINATION_LABEL: cluster_id,
    }
    assert names.SELECTED_NODE_ANNOTATION not in (remote.metadata.annotations or {})
    assert str(remote.spec.volumeName).startswith(f"static-{cluster_id}-")
    assert get_or_none(foreign[other_id], PersistentVolumeClaim, "data", twin) is None

    # at home: the claim is bound to a PV that stands for the remote volume, on that virtual node only
    home_claim = bound(home, "data", offloaded)
    uid = home_claim.metadata.uid
    assert home_claim.spec.volumeName == f"pvc-{uid}"
    volume = wait_until(
        lambda: (v := home_volume(home, uid)) is not None and v.spec.capacity == {"storage": "2Gi"} and v,
        30,
        "home PV sized as the remote volume",
    )
    assert volume.spec.storageClassName == names.STORAGE_CLASS_NAME
    assert volume.spec.accessModes == ["ReadWriteOnce"]
    assert (volume.spec.claimRef.namespace, volume.spec.claimRef.name, volume.spec.claimRef.uid) == (
        offloaded,
        "data",
        uid,
    )
    terms = volume.spec.nodeAffinity.required.nodeSelectorTerms
    assert [(e.key, e.operator, e.values) for t in terms for e in t.matchExpressions] == [
        (names.HOSTNAME_LABEL, "In", [node])
    ]
    assert volume.status.phase == "Bound"

    # the offloaded pod mounts the remote claim
    remote_writer: Any = wait_until(lambda: remote_pod(foreign[cluster_id], twin, "writer"), 30, "remote writer")
    volumes = {v.name: v for v in remote_writer.spec.volumes}
    assert volumes["data"].persistentVolumeClaim.claimName == "data"

    # a later pod mounting the claim goes to the same virtual node (data gravity)
    home.create(pod_with("reader", offloaded, "data"))
    assert running(home, offloaded, "reader").spec.nodeName == node

    # deleting the claim (once no pod uses it) deletes the remote claim and the home PV
    for name in ("writer", "reader"):
        home.delete(Pod, name, namespace=offloaded, grace_period=0)
    home.delete(PersistentVolumeClaim, "data", namespace=offloaded)
    wait_until(
        lambda: get_or_none(foreign[cluster_id], PersistentVolumeClaim, "data", twin) is None, 90, "remote claim gone"
    )
    wait_until(lambda: home_volume(home, uid) is None, 60, "home PV gone")


def test_a_restarted_virtual_kubelet_recreates_and_rewrites_no_volume(
    offloaded: str, home: Client, foreign: dict[str, Client], runtime: ExternalRuntime
) -> None:
    home.create(claim("kept", offloaded))
    home.create(pod_with("keeper", offloaded, "kept"))
    cluster_id = running(home, offloaded, "keeper").spec.nodeName.removeprefix("liqo-")
    twin = twin_of(offloaded)
    uid = bound(home, "kept", offloaded).metadata.uid
    wait_until(lambda: (v := home_volume(home, uid)) is not None and v.spec.capacity == {"storage": "2Gi"}, 30, "PV")

    def state() -> tuple[Any, ...]:
        remote: Any = foreign[cluster_id].get(PersistentVolumeClaim, "kept", namespace=twin)
        volume: Any = home.get(PersistentVolume, f"pvc-{uid}")
        return (
            remote.metadata.uid,
            remote.metadata.resourceVersion,
            volume.metadata.uid,
            volume.metadata.resourceVersion,
        )

    before = state()
    runtime.kill(f"kubelet-{cluster_id}")
    runtime.start(f"kubelet-{cluster_id}")
    # the restarted kubelet is at work once a new claim is provisioned through it
    home.create(claim("after", offloaded))
    home.create(pod_with("after", offloaded, "after", node=f"liqo-{cluster_id}"))
    running(home, offloaded, "after", timeout=120)
    bound(foreign[cluster_id], "after", twin)
    # its storage queue requeued every claim when its stores synced; once drained, the reconcile of
    # `kept` has begun, and in storage.py a reconcile's first await is the write it makes
    url = runtime.probes_url(f"kubelet-{cluster_id}")
    assert url is not None
    wait_until(lambda: queue_drained(url, "storage"), 60, "the restarted kubelet's storage queue drained")
    assert state() == before, "neither the remote claim nor the home PV was rewritten or recreated"


def test_a_retained_volume_keeps_the_remote_claim_until_the_home_volume_is_deleted(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    home.create(claim("archive", offloaded))
    home.create(pod_with("archiver", offloaded, "archive"))
    cluster_id = running(home, offloaded, "archiver").spec.nodeName.removeprefix("liqo-")
    twin = twin_of(offloaded)
    uid = bound(home, "archive", offloaded).metadata.uid
    remote_uid = bound(foreign[cluster_id], "archive", twin).metadata.uid
    wait_until(lambda: home_volume(home, uid), 30, "home PV")
    home.patch(PersistentVolume, f"pvc-{uid}", {"spec": {"persistentVolumeReclaimPolicy": "Retain"}})
    home.delete(Pod, "archiver", namespace=offloaded, grace_period=0)
    home.delete(PersistentVolumeClaim, "archive", namespace=offloaded)
    wait_until(
        lambda: (v := home_volume(home, uid)) is not None and v.status.phase == "Released", 90, "home PV Released"
    )
    provisioned_sentinel(home, foreign[cluster_id], offloaded, cluster_id)
    kept: Any = get_or_none(foreign[cluster_id], PersistentVolumeClaim, "archive", twin)
    assert kept is not None and kept.metadata.uid == remote_uid and kept.metadata.deletionTimestamp is None
    # the administrator lets the data go: deleting the home PV deletes the remote claim
    home.delete(PersistentVolume, f"pvc-{uid}")
    wait_until(
        lambda: get_or_none(foreign[cluster_id], PersistentVolumeClaim, "archive", twin) is None,
        60,
        "remote claim gone with the retained home PV",
    )


def test_a_foreign_claim_that_is_not_ours_is_left_alone_and_reported(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    twin = twin_of(offloaded)
    squatter: Any = PersistentVolumeClaim.from_dict(
        {
            "metadata": {"name": "taken", "namespace": twin},
            "spec": {
                "storageClassName": "fast-ssd",  # no such class there: it stays Pending
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    )
    for client in foreign.values():
        client.create(squatter)
    home.create(claim("taken", offloaded))
    home.create(pod_with("blocked", offloaded, "taken"))

    def warned() -> Any:
        events: Any = home.list(Event, namespace=offloaded, fields={"involvedObject.name": "taken"})
        return [e for e in events if e.reason == "ProvisioningConflict"]

    found = wait_until(warned, 60, "a conflict event on the home claim")
    assert "did not create" in found[0].message
    for client in foreign.values():
        left: Any = client.get(PersistentVolumeClaim, "taken", namespace=twin)
        assert names.ORIGIN_LABEL not in (left.metadata.labels or {})
        assert left.spec.storageClassName == "fast-ssd"
    home_claim: Any = home.get(PersistentVolumeClaim, "taken", namespace=offloaded)
    assert home_claim.status.phase == "Pending"
    home.delete(Pod, "blocked", namespace=offloaded, grace_period=0)
