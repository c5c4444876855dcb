"""The agent keeps its pods trimmed: what its readers compute from a trimmed pod is what they
compute from the whole pod."""

from __future__ import annotations

import copy
from typing import Any

from lightkube.resources.core_v1 import Node, Pod

from runtime.api.advertisement import available_for, load_of, pod_requests
from runtime.controllers.trimming import as_the_agent_reads
from runtime.forging.pods import restart_counts
from runtime.forging.shadowpods import live_changes

WHOLE: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "twin", "uid": "u-1", "labels": {"liqo.io/origin": "home", "app": "a"}},
    "spec": {
        "nodeName": "node-1",
        "activeDeadlineSeconds": 60,
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "volumes": [{"name": "v", "emptyDir": {}}],
        "initContainers": [{"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "2"}}}],
        "containers": [
            {
                "name": "web",
                "image": "nginx:1.27",
                "env": [{"name": "A", "value": "1"}],
                "volumeMounts": [{"name": "v", "mountPath": "/v"}],
                "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}},
            }
        ],
    },
    "status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "podIP": "10.0.0.1",
        "containerStatuses": [{"name": "web", "image": "nginx:1.27", "imageID": "", "ready": True, "restartCount": 3}],
        "initContainerStatuses": [
            {"name": "init", "image": "busybox", "imageID": "", "ready": True, "restartCount": 1}
        ],
    },
}


def test_a_trimmed_pod_gives_its_readers_what_the_whole_pod_gives() -> None:
    whole = Pod.from_dict(copy.deepcopy(WHOLE))
    trimmed = as_the_agent_reads(Pod.from_dict(copy.deepcopy(WHOLE)))
    assert trimmed.spec.volumes is None and trimmed.spec.containers[0].env is None, "trimmed indeed"
    assert trimmed.status.conditions is None and trimmed.status.podIP is None

    assert pod_requests(trimmed) == pod_requests(whole)
    node = Node.from_dict(
        {
            "metadata": {"name": "node-1"},
            "status": {"allocatable": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    load = load_of(trimmed)
    assert load is not None and load == load_of(whole)
    assert available_for("home", [node], [load]) == {"cpu": 2}, "4 less the init container's 2"
    assert (
        restart_counts(trimmed.to_dict()["status"])
        == restart_counts(whole.to_dict()["status"])
        == {
            "web": 3,
            "init": 1,
        }
    )
    shadow = {
        "metadata": {"labels": {"app": "b"}},
        "spec": {
            "pod": {
                "containers": [{"name": "web", "image": "nginx:1.28", "resources": {"requests": {"cpu": "1"}}}],
                "tolerations": [{"key": "other", "operator": "Exists"}],
                "activeDeadlineSeconds": 30,
            }
        },
    }
    changes = live_changes(shadow, trimmed.to_dict())
    assert changes == live_changes(shadow, whole.to_dict())
    assert changes[0]["spec"]["containers"] == [{"name": "web", "image": "nginx:1.28"}], "the live pod is patched"
