"""What every part of one virtual kubelet shares: its peering (clients, cluster ids, the VirtualNode)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lightkube import AsyncClient

from runtime.api import VirtualNodeSpec, names
from runtime.forging.objects import ReflectionSettings
from runtime.kube.serving import EngineMetrics
from runtime.kube.shared import SharedWatches
from runtime.kube.warnings import Warnings


def settings_from(spec: VirtualNodeSpec | None, kind: str) -> ReflectionSettings:
    """One kind's reflection settings from the VirtualNode's spec (defaults before it is known)."""
    if spec is None:
        return ReflectionSettings()
    chosen = spec.reflection.get(kind)
    patch = spec.offloading_patch
    return ReflectionSettings(
        policy=chosen.type if chosen else ReflectionSettings.policy,
        workers=chosen.workers if chosen else ReflectionSettings.workers,
        labels_not_reflected=frozenset(patch.labels_not_reflected or ()),
        annotations_not_reflected=frozenset(patch.annotations_not_reflected or ()),
        address_ranges=tuple((r.seen_at_home, r.seen_there) for r in spec.endpoint_remappings),
    )


@dataclass
class Peering:
    """`node_spec`: the VirtualNode's spec as the home informer holds it now (None before it is known)."""

    home: AsyncClient
    foreign: AsyncClient
    home_cluster_id: str
    foreign_cluster_id: str
    node_spec: Callable[[], VirtualNodeSpec | None] = lambda: None
    metrics: EngineMetrics | None = None
    warnings: Warnings = field(init=False)
    # the members' informers at home: one watch per kind, whatever the number of twinned namespaces
    home_watches: SharedWatches = field(init=False)

    def __post_init__(self) -> None:
        self.warnings = Warnings(self.home, "liqo-virtual-kubelet", self.node_name)
        self.home_watches = SharedWatches(self.home)

    @property
    def node_name(self) -> str:
        return names.virtual_node_name(self.foreign_cluster_id)

    def settings_of(self, kind: str) -> ReflectionSettings:
        return settings_from(self.node_spec(), kind)

    async def conflict(self, home: Mapping[str, Any], reason: str, held: str, consequence: str) -> None:
        """A foreign object in the way that is not ours (DESIGN: never modified or deleted): say so on
        the home object it stands in the way of."""
        message = f"{self.foreign_cluster_id} already holds a {held} that liqo did not create: {consequence}"
        await self.warnings.warn(home, reason, message)
