"""The engine every controller shares: informers, work queues, server-side apply."""

from runtime.kube.echoes import OwnWrites
from runtime.kube.errors import unless_gone
from runtime.kube.informing import (
    Event,
    Informer,
    InformerUnion,
    ObjectSource,
    call_when_synced,
    diff_stores,
    object_key,
)
from runtime.kube.queueing import WorkQueue
from runtime.kube.serving import EngineMetrics, ProbeServer

__all__ = [
    "EngineMetrics",
    "Event",
    "Informer",
    "InformerUnion",
    "ObjectSource",
    "OwnWrites",
    "ProbeServer",
    "WorkQueue",
    "call_when_synced",
    "diff_stores",
    "object_key",
    "unless_gone",
]
