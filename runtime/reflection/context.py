"""What every part of one virtual kubelet shares: its peering (clients, cluster ids, the VirtualNode)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lightkube import AsyncClient

from runtime.api import VirtualNodeSpec, names
from runtime.forging.objects import ReflectionSettings, settings_from
from runtime.kube.serving import EngineMetrics
from runtime.kube.shared import SharedWatches
from runtime.kube.warnings import Warnings


@dataclass(frozen=True)
class Peering:
    """Built once, by whoever knows its virtual nodes (runtime/virtualkubelet/kubelet.py), and read by
    every member: nothing is patched in afterwards.

    `node_spec`: the VirtualNode's spec as the home informer holds it now (None before it is known);
    `virtual_node`: the VirtualNode itself (what its conditions and events are written on).
    `node_names`: the virtual nodes of the foreign cluster (its node pools), the first the primary one,
    whose VirtualNode's settings the cluster's one reflector set follows; `spec_of`: a node's spec;
    `node_labels`: the labels a virtual Node carries now (what the scheduler at home sees);
    `shared_home`: the home cluster's shared informers, one per process (every peering it serves
    shares them; default: this peering's own)."""

    home: AsyncClient
    foreign: AsyncClient
    home_cluster_id: str
    foreign_cluster_id: str
    node_spec: Callable[[], VirtualNodeSpec | None] = lambda: None
    virtual_node: Callable[[], Mapping[str, Any] | None] = lambda: None
    metrics: EngineMetrics | None = None
    node_names: tuple[str, ...] = ()
    spec_of: Callable[[str], VirtualNodeSpec | None] = lambda _: None
    node_labels: Callable[[str], Mapping[str, str]] = lambda _: {}
    # the members' informers at home: one watch per kind, whatever the number of twinned namespaces
    shared_home: SharedWatches | None = None
    warnings: Warnings = field(init=False)

    def __post_init__(self) -> None:
        # frozen: the defaults derived from the other fields are set once, here
        set_once = object.__setattr__
        set_once(self, "node_names", self.node_names or (names.virtual_node_name(self.foreign_cluster_id),))
        set_once(self, "warnings", Warnings(self.home, "liqo-virtual-kubelet", self.node_name))
        if self.shared_home is None:
            set_once(self, "shared_home", SharedWatches(self.home))

    @property
    def home_watches(self) -> SharedWatches:
        assert self.shared_home is not None  # set in __post_init__
        return self.shared_home

    @property
    def node_name(self) -> str:
        return self.node_names[0]

    def settings_of(self, kind: str) -> ReflectionSettings:
        return settings_from(self.node_spec(), kind)

    async def conflict(self, home: Mapping[str, Any], reason: str, held: str, consequence: str) -> None:
        """A foreign object in the way that is not ours (DESIGN: never modified or deleted): say so on
        the home object it stands in the way of."""
        message = f"{self.foreign_cluster_id} already holds a {held} that liqo did not create: {consequence}"
        await self.warnings.warn(home, reason, message)
