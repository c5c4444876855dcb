"""Resource reflection (docs/reflection.md): what offloaded pods use follows them into the foreign cluster.

One `ReflectionManager` per foreign cluster, inside its virtual kubelet: it computes which namespaces
are twinned there and runs every member that follows them (a reflector per kind of `runtime.forging.kinds`,
the opted-in custom resources of `custom.py`, tokens, events, storage, the pod offloader), with the
VirtualNode's settings applied live.
"""

from runtime.forging.objects import ReflectionSettings
from runtime.reflection.context import Peering
from runtime.reflection.manager import ReflectionManager

__all__ = ["Peering", "ReflectionManager", "ReflectionSettings"]
