"""Packed stores: what a reader gets back is what was stored, and a stored pod costs a fraction."""

from __future__ import annotations

import copy
import tracemalloc
from typing import Any, cast

from lightkube.resources.core_v1 import ConfigMap, Pod

from runtime.kube.packing import Packed, Packer, unpacked


def running_pod(name: str) -> dict[str, Any]:
    """A pod as a Deployment makes it and a kubelet reports it (the shape of a burst's pods)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": "burst-7d9f8c-",
            "namespace": "bench",
            "uid": f"uid-{name}",
            "resourceVersion": "4242",
            "creationTimestamp": "2026-11-23T10:00:00Z",
            "labels": {"app": "burst", "pod-template-hash": "7d9f8c"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "burst-7d9f8c", "uid": "rs", "controller": True}
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                    "volumeMounts": [{"name": "token", "mountPath": "/var/run/secrets", "readOnly": True}],
                }
            ],
            "volumes": [{"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}],
            "nodeName": "liqo-foreign-1",
            "tolerations": [{"key": "virtual-node.liqo.io/not-allowed", "operator": "Exists", "effect": "NoExecute"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": "2026-11-23T10:00:01Z"}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "podIP": "10.200.0.5",
            "startTime": "2026-11-23T10:00:01Z",
            "containerStatuses": [
                {
                    "name": "main",
                    "image": "busybox",
                    "imageID": "busybox@sha256:abc",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-11-23T10:00:02Z"}},
                }
            ],
        },
    }


def test_a_packed_pod_reads_back_as_the_pod_it_was() -> None:
    packer = Packer(Pod)
    packer.pack(Pod.from_dict(running_pod("first")))  # the store's dictionary
    pod = cast(Pod, Pod.from_dict(running_pod("second")))
    packed = packer.pack(pod)

    assert packed.to_dict() == pod.to_dict() == running_pod("second")
    assert packed.metadata == pod.metadata
    assert packed.status == pod.status
    assert packed.spec.containers[0].resources.requests == {"cpu": "10m", "memory": "16Mi"}
    assert packed.unpacked() == pod


def test_a_reader_cannot_alter_the_store() -> None:
    packed = Packer(Pod).pack(Pod.from_dict(running_pod("p")))
    metadata = packed.metadata
    assert metadata is not None
    metadata.labels = {"changed": "yes"}
    body = packed.to_dict()
    body["status"]["phase"] = "Failed"

    assert packed.metadata is not None and packed.metadata.labels == {"app": "burst", "pod-template-hash": "7d9f8c"}
    assert packed.to_dict()["status"]["phase"] == "Running"


def test_pods_of_one_burst_pack_to_a_fraction_of_their_decoded_size() -> None:
    packer = Packer(Pod)
    bodies = [running_pod(f"burst-7d9f8c-{i:05d}") for i in range(200)]
    for i, body in enumerate(bodies):  # each its own name, IP and resourceVersion, as in a real burst
        body["status"]["podIP"] = f"10.200.{i // 250}.{i % 250}"
        body["metadata"]["resourceVersion"] = str(5000 + i)

    def held(make: Any) -> float:
        tracemalloc.start()
        kept = [make(copy.deepcopy(body)) for body in bodies]
        size = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert len(kept) == len(bodies)
        return size / len(bodies)

    decoded_size = held(Pod.from_dict)
    packed_size = held(lambda body: packer.pack(Pod.from_dict(body)))
    assert packed_size < decoded_size / 5, f"packed {packed_size:.0f} B against decoded {decoded_size:.0f} B"
    assert isinstance(packer.pack(Pod.from_dict(bodies[0])), Packed)


def test_objects_larger_than_the_window_the_first_one_sized_read_back_whole() -> None:
    """The first object sizes the compressor's window; a later one many times its size still packs."""
    packer = Packer(ConfigMap)
    packer.pack(ConfigMap.from_dict({"metadata": {"name": "small"}, "data": {"a": "b"}}))
    text = "".join(f"line {i} of a large ConfigMap\n" for i in range(20_000))  # ~600 KB
    large = ConfigMap.from_dict({"metadata": {"name": "large", "namespace": "apps"}, "data": {"file": text}})
    packed = packer.pack(large)
    assert packed.to_dict()["data"]["file"] == text
    assert packed.metadata is not None and packed.metadata.name == "large"


def test_unpacked_decodes_a_packed_object_once_and_passes_the_rest_through() -> None:
    pod = cast(Pod, Pod.from_dict(running_pod("p")))
    packed = Packer(Pod).pack(pod)

    assert unpacked(packed) == pod and not isinstance(unpacked(packed), Packed)
    assert unpacked(pod) is pod
    assert unpacked(None) is None
