"""Resource reflection (seed 002): what offloaded pods use follows them into the foreign cluster.

One `Reflection` per foreign cluster, inside its virtual kubelet: a reflector per kind
(`kinds.py`: ConfigMaps, Secrets, Services, Ingresses) for every namespace offloaded there,
with the policies and skip lists of the VirtualNode applied live.
"""

from runtime.reflection.forging import ReflectionSettings
from runtime.reflection.reflection import Reflection

__all__ = ["Reflection", "ReflectionSettings"]
