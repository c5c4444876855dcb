"""The foreign agent's pods as its informers keep them: what its readers use, nothing else.

The agent holds every pod of its cluster (local ones for the advertisement, offloaded ones, packed,
for the ShadowPod controller too), so each byte kept per pod is kept thousands of times. Readers:
- the advertisement, at each pod event: the node a pod is on, its containers' requests, its phase,
  its origin label;
- the ShadowPod controller: UID, labels and annotations, the fields a live pod may change (images,
  resources, activeDeadlineSeconds, tolerations), the phase and the restart counts.
"""

from __future__ import annotations

from typing import Any

from lightkube.models.core_v1 import Container, PodSpec, PodStatus


def _container(container: Container) -> Container:
    return Container(name=container.name, image=container.image, resources=container.resources)


def as_the_agent_reads(pod: Any) -> Any:
    """Informer trim: the pod without what no agent reader uses (env, volumes, probes, conditions...)."""
    spec = pod.spec
    if spec is not None:
        pod.spec = PodSpec(
            containers=[_container(c) for c in spec.containers or []],
            initContainers=[_container(c) for c in spec.initContainers] if spec.initContainers else None,
            nodeName=spec.nodeName,
            activeDeadlineSeconds=spec.activeDeadlineSeconds,
            tolerations=spec.tolerations,
        )
    status = pod.status
    if status is not None:
        pod.status = PodStatus(
            phase=status.phase,
            containerStatuses=status.containerStatuses,
            initContainerStatuses=status.initContainerStatuses,
        )
    return pod
