"""The controllers: NamespaceOffloading (home), NamespaceMap (foreign agent)."""

from runtime.controllers.namespacemap import NamespaceMapController
from runtime.controllers.namespaceoffloading import NamespaceOffloadingController, phase_of

__all__ = ["NamespaceMapController", "NamespaceOffloadingController", "phase_of"]
