"""The properties of the package's part components (docs/package.md), built from the stack config's own
models and fields so that each setting is checked and described once (liqo_stack/declaring/config.py):

- `Home`: the home settings of a stack config, without its foreign clusters and namespaces;
- `Peering`: one foreign cluster (a `ForeignCluster`) and the home settings it is declared against;
- `ForeignSide`: a foreign cluster's own side (`liqo:foreignSide`) and how its agent runs;
- `OffloadedNamespace`: one offloaded namespace (a `NamespaceOffloadingConfig`), the home cluster's id,
  and optionally the clusters the home offers, as the platform's stack outputs them.

Light on purpose (no Pulumi runtime), as properties.py: the schema and the policy pack import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import ConfigDict, Field, ValidationError, create_model, model_validator

from liqo_stack.declaring import config as stack_config
from liqo_stack.declaring.config import (
    ClusterId,
    ConfigError,
    ConfigModel,
    ForeignCluster,
    ForeignSide,
    ForeignSideStackConfig,
    NamespaceOffloadingConfig,
    RuntimeConfig,
    StackConfig,
)
from runtime.api import NamespaceMappingStrategy, names
from runtime.api.plan import selected_clusters, twin_namespace_name, virtual_node_labels

# The settings of a stack config that are the home's: everything but what a Peering or an
# OffloadedNamespace declares on its own.
_NOT_HOME = ("foreign_clusters", "namespaces", "namespace_selectors")


def _fields_of(model: type[ConfigModel], names_: list[str]) -> dict[str, Any]:
    return {name: (model.model_fields[name].annotation, model.model_fields[name]) for name in names_}


HomeSettings: type[ConfigModel] = create_model(
    "HomeSettings",
    __base__=ConfigModel,
    __doc__="The home installation: a stack config's settings without its foreign clusters and namespaces.",
    **_fields_of(StackConfig, [name for name in StackConfig.model_fields if name not in _NOT_HOME]),
)


def home_stack_config(home: ConfigModel, foreign_clusters: list[ForeignCluster]) -> StackConfig:
    """The stack config the home settings and these foreign clusters make (checks across them run)."""
    return StackConfig.model_validate({**home.model_dump(by_alias=True), "foreignClusters": foreign_clusters})


class PeeringSettings(ConfigModel):
    """One peering: a foreign cluster, declared against the home settings of the Home it peers."""

    home: HomeSettings = Field(
        description="the home settings, as the Home component was given them (its `settings` output)"
    )
    foreign_cluster: ForeignCluster = Field(
        description="the foreign cluster: with its admin kubeconfig (its side declared here too) or with the "
        "identityKubeconfig its own stack (ForeignSide) issued"
    )
    control_plane: list[str] = Field(
        default_factory=list,
        description="the Home's `controlPlane` output: the home control plane's resources this peering is made "
        "after and removed before (same stack only)",
    )

    @model_validator(mode="after")
    def _one_peering_per_process(self) -> Self:
        if self.home.runtime.peerings_per_process != 1:  # type: ignore[attr-defined]
            raise ValueError(
                "home.runtime.peeringsPerProcess: a Peering declared on its own runs its own virtual kubelet (1); "
                "share processes between peerings in one Stack"
            )
        return self

    def stack_config(self) -> StackConfig:
        return home_stack_config(self.home, [self.foreign_cluster])


class ForeignSideSettings(ForeignSide):
    """A foreign cluster's own side, for one or more homes (a foreign side stack's `liqo:foreignSide`)."""

    runtime: RuntimeConfig = Field(
        default_factory=RuntimeConfig, description=ForeignSideStackConfig.model_fields["runtime"].description
    )

    def stack_config(self) -> ForeignSideStackConfig:
        side = ForeignSide.model_validate(self.model_dump(by_alias=True, exclude={"runtime"}))
        return ForeignSideStackConfig(foreign_side=side, runtime=self.runtime)


class OfferedCluster(ConfigModel):
    """A cluster the home offers, as the platform stack outputs it (`foreignClusters.<id>`)."""

    model_config = ConfigDict(extra="ignore")  # the outputs say more (capacity, taints, ...)
    labels: dict[str, str] = Field(default_factory=dict, description="its virtual node's labels")


def _named_cluster_ids(namespace: NamespaceOffloadingConfig) -> set[str]:
    """The cluster ids a selector names (`liqo.io/remote-cluster-id in (...)`, `=`, `==`)."""
    named: set[str] = set()
    for term in namespace.selector().node_selector_terms:
        for requirement in term.match_expressions or []:
            if requirement.key == names.REMOTE_CLUSTER_ID_LABEL and requirement.operator == "In":
                named.update(requirement.values or [])
    return named


class OffloadedNamespaceSettings(NamespaceOffloadingConfig):
    """One namespace offloaded by an application team's stack, given a provider of the home cluster."""

    home_cluster_id: ClusterId = Field(
        description="the home cluster's id (the platform stack's `homeClusterId` output): twin names derive from it"
    )
    offered_clusters: dict[str, OfferedCluster] | None = Field(
        default=None,
        description="the clusters the home offers, by id, with their labels: the platform stack's `foreignClusters` "
        "output (through a StackReference). Given, a clusterSelector that names a cluster not offered, or "
        "selects none, fails the preview",
    )

    @model_validator(mode="after")
    def _selects_offered_clusters(self) -> Self:
        if self.namespace_mapping_strategy is NamespaceMappingStrategy.DEFAULT_NAME:
            twin = f"{self.name}-{self.home_cluster_id}"
            if len(twin) > 63:
                raise ValueError(f"name: its twin name {twin} would exceed 63 characters")
        if self.offered_clusters is None:
            return self
        offered = sorted(self.offered_clusters)
        unknown = sorted(_named_cluster_ids(self) - set(offered))
        if unknown:
            raise ValueError(
                f"clusterSelector: selects cluster {', '.join(unknown)}, which home {self.home_cluster_id} does not "
                f"peer (offeredClusters: {offered})"
            )
        if not self.selected_clusters():
            raise ValueError(
                f"clusterSelector: selects none of the clusters home {self.home_cluster_id} offers ({offered}, "
                "matched on the labels in offeredClusters)"
            )
        return self

    def selected_clusters(self) -> list[str]:
        """The offered clusters the selector picks, on the labels the platform stack declared."""
        offered = self.offered_clusters or {}
        labels = {cid: virtual_node_labels(cid, cluster.labels) for cid, cluster in offered.items()}
        return selected_clusters(self.selector(), labels)

    def offloading(self) -> NamespaceOffloadingConfig:
        return NamespaceOffloadingConfig.model_validate(
            self.model_dump(by_alias=True, exclude={"home_cluster_id", "offered_clusters"})
        )

    def plan(self) -> dict[str, Any]:
        """The namespace's entry of a stack's `namespaces` output (liqo_stack/declaring/plan.py)."""
        twin = twin_namespace_name(
            self.name, self.namespace_mapping_strategy, self.home_cluster_id, self.remote_namespace_name
        )
        found: dict[str, Any] = {
            "podOffloadingStrategy": self.pod_offloading_strategy.value,
            "namespaceMappingStrategy": self.namespace_mapping_strategy.value,
            "twinNamespace": twin,
        }
        if self.offered_clusters is not None:
            found["clusters"] = {cid: {"twinNamespace": twin} for cid in self.selected_clusters()}
        return found


def parse_part(model: type[ConfigModel], raw: Mapping[str, Any], where: str) -> Any:
    """Validate a part component's properties with its model; ConfigError names each bad property by its
    path in the program (`where` is what goes before it)."""
    try:
        return model.model_validate(dict(raw))
    except ValidationError as err:
        lines = sorted(
            {
                f"{stack_config._path(e['loc'])}: {stack_config._describe(e)}"
                if e["loc"]
                else stack_config._path(()) + stack_config._describe(e)
                for e in err.errors()
            }
        )
        message = "invalid properties:\n  " + "\n  ".join(lines)
        raise ConfigError(stack_config.renamed_settings(message, where)) from None


def part_config(settings: PeeringSettings, where: str) -> StackConfig:
    """The stack config of a Peering: the checks across its settings, named by their path."""
    try:
        return settings.stack_config()
    except ValidationError as err:
        prefix = f"{where}home."
        lines = []
        for e in err.errors():
            line = (
                stack_config._path(e["loc"]) + ": " if e["loc"] else stack_config._path(())
            ) + stack_config._describe(e)
            line = line.replace("liqo:foreignClusters[0]", f"{where}foreignCluster").replace("liqo:", prefix)
            line = line.replace("foreignClusters[0]", "foreignCluster")
            lines.append(line)
        raise ConfigError("invalid properties:\n  " + "\n  ".join(sorted(set(lines)))) from None
