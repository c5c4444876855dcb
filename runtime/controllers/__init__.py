"""The controllers: NamespaceOffloading and the webhooks' CA bundle (home), NamespaceMap (foreign agent)."""

from runtime.controllers.namespacemap import NamespaceMapController
from runtime.controllers.namespaceoffloading import NamespaceOffloadingController, phase_of
from runtime.controllers.webhookconfig import CaBundleController

__all__ = ["CaBundleController", "NamespaceMapController", "NamespaceOffloadingController", "phase_of"]
