"""Pulumi components of a liqo-stack: the home control plane, a foreign agent and a peering per
foreign cluster, and the declared namespace offloadings."""

from liqo_stack.declaring.components.cluster import Cluster
from liqo_stack.declaring.components.foreign import ForeignAgent
from liqo_stack.declaring.components.home import HomeControlPlane
from liqo_stack.declaring.components.offloading import NamespaceOffloadings
from liqo_stack.declaring.components.peering import Peering

__all__ = ["Cluster", "ForeignAgent", "HomeControlPlane", "NamespaceOffloadings", "Peering"]
