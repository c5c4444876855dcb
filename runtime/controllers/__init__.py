"""The controllers. Home: NamespaceOffloading, NamespaceOffloadingSelector, on-demand offloading,
the webhooks' CA bundle.
Foreign agent: NamespaceMap, ShadowPod, ResourceAdvertisement."""

from runtime.controllers.advertisement import AdvertisementController
from runtime.controllers.namespacemap import NamespaceMapController
from runtime.controllers.namespaceoffloading import NamespaceOffloadingController, phase_of
from runtime.controllers.namespaceselector import NamespaceSelectorController
from runtime.controllers.ondemand import OnDemandController
from runtime.controllers.shadowpod import ShadowPodController
from runtime.controllers.webhookconfig import CaBundleController

__all__ = [
    "AdvertisementController",
    "CaBundleController",
    "NamespaceMapController",
    "NamespaceOffloadingController",
    "NamespaceSelectorController",
    "OnDemandController",
    "ShadowPodController",
    "phase_of",
]
