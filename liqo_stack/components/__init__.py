"""Pulumi components of a liqo-stack: the home control plane, a foreign agent and a peering per
foreign cluster, and the declared namespace offloadings."""

from liqo_stack.components.cluster import Cluster
from liqo_stack.components.foreign import ForeignAgent
from liqo_stack.components.home import HomeControlPlane
from liqo_stack.components.offloading import NamespaceOffloadings
from liqo_stack.components.peering import Peering

__all__ = ["Cluster", "ForeignAgent", "HomeControlPlane", "NamespaceOffloadings", "Peering"]
