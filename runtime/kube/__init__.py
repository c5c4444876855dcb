"""The engine every controller shares: informers, work queues, server-side apply."""

from runtime.kube.informing import Event, Informer, diff_stores, object_key
from runtime.kube.queueing import WorkQueue

__all__ = ["Event", "Informer", "WorkQueue", "diff_stores", "object_key"]
