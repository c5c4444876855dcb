"""The stack config (`liqo:` namespace of Pulumi.<stack>.yaml), as typed models validated once.

A bad config fails before any resource is registered, with one line per problem that names the
config path (e.g. `liqo:foreignClusters[1].sharingPercentage`) and what is allowed there.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from runtime.api import (
    CustomResourceReflection,
    DurationError,
    NamespaceMappingStrategy,
    NodeSelector,
    PodOffloadingStrategy,
    ReflectionPolicy,
    SelectorSyntaxError,
    Taint,
    format_duration,
    names,
    parse_duration,
    parse_selector,
)
from runtime.api.leaderelection import LeaderElectionTiming
from runtime.api.namespaceselector import NamespaceOffloadingSelectorSpec, parse_label_selector, selector_problems
from runtime.api.network import (
    DEFAULT_REMAPPING_POOL,
    ForeignPodNetwork,
    PodNetworkError,
    parse_network,
    ranges_seen_by,
    remapped_pod_cidrs,
)
from runtime.api.nodeaccess import NodeAccess
from runtime.api.quantities import parse_quantity
from runtime.api.quota import (
    CHECKED_UNDER,
    DEFAULT_TWIN_OBJECT_LIMITS,
    LimitsEnforcement,
    QuotaSpec,
    object_limit_problem,
)
from runtime.api.twinnames import declared_pattern_problem
from runtime.api.virtualnode import ApiServerAddress

CONFIG_NAMESPACE = "liqo"
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# Resource types whose reflection can be configured (docs/reflection.md: pods, PVCs and ServiceAccounts can't).
REFLECTED_RESOURCES = ("configmap", "secret", "service", "endpointslice", "ingress", "event")


class ConfigError(ValueError):
    """The stack config is invalid; `str()` lists every problem with its config path."""


def _dns_label(value: str) -> str:
    if not names.is_dns_label(value):
        raise ValueError(names.DNS_LABEL_RULE)
    return value


def _check_labels(labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        prefix, slash, name = key.rpartition("/")
        bad_prefix = slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix))
        if bad_prefix or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
            raise ValueError(f"label key {key!r} is not a valid Kubernetes label key")
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            raise ValueError(f"label value {value!r} (of {key!r}) is not a valid Kubernetes label value")
    return labels


def _check_quantities(resources: dict[str, str]) -> dict[str, str]:
    for name, quantity in resources.items():
        try:
            parse_quantity(str(quantity))
        except ValueError as err:
            raise ValueError(f"{name}: {quantity!r} is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)") from err
    return resources


def _numbers_as_text(resources: Any) -> Any:
    """`cpu: 4` in YAML is a number; a Kubernetes quantity is its text."""
    if isinstance(resources, dict):
        return {
            k: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for k, v in resources.items()
        }
    return resources


def _network(value: str) -> str:
    return str(parse_network(value))


def _whole_seconds(minimum: int, maximum: int) -> BeforeValidator:
    """A duration setting (`30s`, `2m`, or a bare number of seconds, as older configs wrote it), as whole
    seconds: the VirtualNode CRD carries seconds as an integer."""

    def to_seconds(value: Any) -> Any:
        if not isinstance(value, str | int | float):
            return value  # pydantic reports the wrong type
        try:
            seconds = parse_duration(value, minimum=minimum, maximum=maximum)
        except DurationError as err:
            raise ValueError(err.reason) from None
        if seconds != int(seconds):
            raise ValueError(f"is not a whole number of seconds, e.g. {format_duration(round(seconds) or 1)}")
        return int(seconds)

    # written as text (`30s`): the package's schema (liqo_stack/declaring/package) types it as a string
    return BeforeValidator(to_seconds, json_schema_input_type=str)


ClusterId = Annotated[str, AfterValidator(_dns_label)]
Cidr = Annotated[str, AfterValidator(_network)]
Labels = Annotated[dict[str, str], AfterValidator(_check_labels)]
Quantities = Annotated[dict[str, str], BeforeValidator(_numbers_as_text), AfterValidator(_check_quantities)]
Percentage = Annotated[int, Field(ge=1, le=100, strict=True)]


def _twin_name_pattern(value: str) -> str:
    problem = declared_pattern_problem(value, "")
    if problem is not None:
        raise ValueError(problem)
    return value


# liqo:foreignClusters[].twinNames and liqo:foreignSide.homes[].twinNames (runtime/api/twinnames.py)
TwinNames = Annotated[
    list[Annotated[str, AfterValidator(_twin_name_pattern)]],
    Field(
        default_factory=list,
        description="twin namespace names the home may take here beyond `<namespace>-<home id>` (DefaultName), "
        "for EnforceSameName and SelectedName: names, or patterns where `*` stands for any run of letters, digits "
        "and '-' (e.g. `team-*`); never `kube-*`, `liqo*`, `default` nor another home's `*-<its id>`; none: "
        "DefaultName only (docs/security.md#twin-names)",
    ),
]


def parse_api_server_address(value: str) -> ApiServerAddress:
    """`https://host:port`, `host:port`, `[ipv6]:port` or a bare host (port 443), as a kubeconfig's
    `server` or a pod's KUBERNETES_SERVICE_HOST/PORT would say it."""
    text = value.strip()
    url = urlsplit(text if "://" in text else f"https://{text}")
    try:
        port = url.port or 443
    except ValueError:
        raise ValueError(f"{value!r}: the port must be a number from 1 to 65535") from None
    if url.scheme != "https" or not url.hostname or url.path not in ("", "/") or url.query or url.username:
        raise ValueError(f"{value!r} is not an API server address: write host:port or https://host:port")
    return ApiServerAddress(host=url.hostname, port=port)


def _api_server_address(value: Any) -> Any:
    if isinstance(value, str):
        parse_api_server_address(value)
    return value


def repeated_in(values: list[str]) -> list[str]:
    """The values that occur more than once, sorted (a list's validators name them)."""
    return sorted({v for v in values if values.count(v) > 1})


class ConfigModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class ClusterAccess(ConfigModel):
    """How to reach a cluster: kubeconfig content (set it with `pulumi config set --secret`) or a file."""

    cluster_id: ClusterId = Field(
        description="stable name of the cluster (a DNS label); objects are keyed by it, so a new kubeconfig for "
        "the same id updates in place and replaces nothing"
    )
    kubeconfig: str | None = Field(
        default=None,
        description="kubeconfig content, as a Pulumi secret (`pulumi config set --secret --path`); or kubeconfigPath",
    )
    kubeconfig_path: str | None = Field(default=None, description="a kubeconfig file; or kubeconfig (content)")
    context: str | None = Field(default=None, description="context of that kubeconfig (default: its current context)")
    pod_cidr: Cidr | None = Field(
        default=None,
        alias="podCIDR",
        description="the range this cluster's pods take their IPs from: lets the plan detect overlapping pod ranges "
        "and remap them (docs/reflection.md)",
    )

    @model_validator(mode="after")
    def _one_kubeconfig(self) -> Self:
        if self.kubeconfig is not None and self.kubeconfig_path is not None:
            raise ValueError("set one of kubeconfig (content, as a secret) or kubeconfigPath (a file), not both")
        return self

    @property
    def has_kubeconfig(self) -> bool:
        """False when a program passes its own provider for this cluster instead (liqo_stack.declaring.program)."""
        return self.kubeconfig is not None or self.kubeconfig_path is not None

    def kubeconfig_text(self) -> str:
        """The kubeconfig, restricted to `context` when one is named."""
        if not self.has_kubeconfig:
            raise ConfigError(
                f"cluster {self.cluster_id}: no kubeconfig in the stack config; set its kubeconfig "
                "(`pulumi config set --secret`) or kubeconfigPath"
            )
        if self.kubeconfig is not None:
            text = self.kubeconfig
        else:
            path = Path(self.kubeconfig_path or "").expanduser()
            if not path.is_file():
                raise ConfigError(f"cluster {self.cluster_id}: kubeconfigPath {str(path)!r} is not a readable file")
            text = path.read_text()
        return _select_context(text, self.context, self.cluster_id) if self.context else text


def current_cluster(kubeconfig_text: str) -> dict[str, Any]:
    """The `cluster` entry (server, CA) of a kubeconfig's current context, else of its first context or
    first cluster; {} when it names none (or is not a kubeconfig: connecting to the cluster reports it)."""
    import yaml

    kubeconfig = yaml.safe_load(kubeconfig_text)
    if not isinstance(kubeconfig, dict):
        return {}
    contexts = {c.get("name"): c.get("context") or {} for c in kubeconfig.get("contexts") or []}
    current = contexts.get(kubeconfig.get("current-context")) or next(iter(contexts.values()), {})
    clusters = {c.get("name"): c.get("cluster") or {} for c in kubeconfig.get("clusters") or []}
    cluster: dict[str, Any] = clusters.get(current.get("cluster")) or next(iter(clusters.values()), {})
    return cluster


def _select_context(text: str, context: str, cluster_id: str) -> str:
    import yaml

    config = yaml.safe_load(text)
    contexts = {c["name"]: c for c in config.get("contexts") or []}
    if context not in contexts:
        raise ConfigError(f"cluster {cluster_id}: context {context!r} not in its kubeconfig ({sorted(contexts)})")
    chosen = contexts[context]["context"]
    config["contexts"] = [contexts[context]]
    config["current-context"] = context
    config["clusters"] = [c for c in config.get("clusters") or [] if c["name"] == chosen["cluster"]]
    config["users"] = [u for u in config.get("users") or [] if u["name"] == chosen.get("user")]
    return str(yaml.safe_dump(config))


def _dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError("must be a DNS-1123 subdomain: lower-case letters, digits, '-' and '.'")
    return value


class StorageClassConfig(ConfigModel):
    """A StorageClass of the foreign cluster that home claims of class `liqo` get there (docs/reflection.md)."""

    storage_class_name: Annotated[str, AfterValidator(_dns_subdomain)] = Field(
        description="a StorageClass of the foreign cluster"
    )
    default: bool = Field(default=False, description="the class `liqo` claims get there (at most one)")


def _pool_name(value: str) -> str:
    if not names.is_pool_name(value):
        raise ValueError(
            f"{value!r} is no pool name: up to 32 lowercase letters, digits and '-', as it ends a node name"
        )
    return value


def _some_selector(selector: dict[str, str]) -> dict[str, str]:
    if not selector:
        raise ValueError(
            "a node pool selects the foreign nodes it stands for; for the whole cluster leave virtualNodes out"
        )
    return selector


class VirtualNodeConfig(ConfigModel):
    """One node pool of a foreign cluster: a virtual node of its own, standing for the foreign nodes
    its selector picks (its capacity is theirs, and its pods run only there)."""

    name: Annotated[str, AfterValidator(_pool_name)] = Field(
        description="the pool's name; its virtual node is `liqo-<clusterId>-<name>`"
    )
    node_selector: Annotated[Labels, AfterValidator(_some_selector)] = Field(
        description="labels of the foreign nodes of the pool (the VirtualNode's offloadingPatch.nodeSelector, "
        "merged into every pod offloaded through it), e.g. `node.kubernetes.io/instance-type: gpu`"
    )
    labels: Labels = Field(
        default_factory=dict, description="labels of its virtual node, over the cluster's `labels` (e.g. `pool: gpu`)"
    )
    sharing_percentage: Percentage | None = Field(
        default=None, description="share of the pool's free resources it offers (default: the cluster's)"
    )
    taints: list[Taint] = Field(default_factory=list, description="taints of its virtual node, beside the cluster's")


PodSecurityLevel = Literal["privileged", "baseline", "restricted"]


def _object_limits(limits: dict[str, str]) -> dict[str, str]:
    for name in limits:
        if problem := object_limit_problem(name):
            raise ValueError(problem)
    return limits


class GrantConfig(ConfigModel):
    """What the foreign cluster grants the home cluster: its Quota, enforced by its foreign agent
    before a pod starts there (docs/security.md#grants)."""

    limits_enforcement: LimitsEnforcement = Field(
        default=LimitsEnforcement.SOFT,
        description="how strictly the grant is held: "
        + "; ".join(f"`{level.value}`: {checked}" for level, checked in CHECKED_UNDER.items()),
    )
    resources: Quantities = Field(
        default_factory=dict,
        description="the most the home's pods may request there in all, e.g. `cpu: 8`, `memory: 16Gi`, `pods: 100`; "
        "none: what the foreign cluster advertises to the home",
    )
    cordoned: bool = Field(
        default=False, description="no new pod of the home starts there; the running ones go on (see docs/security.md)"
    )
    objects: Annotated[Quantities, AfterValidator(_object_limits)] = Field(
        default_factory=dict,
        description="what the home may keep in each twin namespace there, as a ResourceQuota of it: counts and "
        "storage over the defaults ("
        + ", ".join(f"`{k}: {v}`" for k, v in DEFAULT_TWIN_OBJECT_LIMITS.items())
        + "); raise or lower any, or add other `count/<resource>` limits",
    )

    def quota(self, nodes: NodesConfig | None = None) -> QuotaSpec:
        """The home's Quota; `nodes`: the nodes it may use there (declared beside the grant)."""
        return QuotaSpec(
            limitsEnforcement=self.limits_enforcement,
            resources=dict(self.resources),
            cordoned=self.cordoned,
            nodes=nodes.access() if nodes is not None else None,
            objects=dict(self.objects) or None,
        )


class AllowedToleration(ConfigModel):
    """A toleration the home's pods may have there (a core Toleration: a pod's toleration is allowed when
    one of these tolerates every taint it does)."""

    key: str = Field(default="", description="the taint's key; none (with operator Exists): every taint")
    operator: Literal["Equal", "Exists"] = Field(
        default="Equal", description="Equal (the taint's value too) or Exists (any value)"
    )
    value: str = Field(default="", description="the taint's value, with Equal")
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        default="", description="NoSchedule, PreferNoSchedule or NoExecute; none: every effect"
    )
    toleration_seconds: int | None = Field(
        default=None, ge=0, description="with NoExecute: how long at most a pod may stay once the taint is added"
    )

    @model_validator(mode="after")
    def _a_valid_toleration(self) -> Self:
        if self.key:
            _check_labels({self.key: ""})
        elif self.operator != "Exists":
            raise ValueError("a toleration without a key tolerates every taint: give it operator Exists")
        if self.operator == "Exists" and self.value:
            raise ValueError("operator Exists matches any value: leave value out")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds goes with effect NoExecute only")
        return self


class NodesConfig(ConfigModel):
    """Which of the foreign cluster's nodes the home's pods may use there, enforced by that cluster (its
    admission policy and its agent, docs/security.md#nodes); its virtual node at home counts only those."""

    selector: Labels = Field(
        default_factory=dict,
        description="labels of the nodes the home's pods may use (added to each pod's nodeSelector there); "
        "none: any node",
    )
    tolerations: list[AllowedToleration] = Field(
        default_factory=list,
        description="the taints its pods may tolerate there, as tolerations; none: no taint but Kubernetes' "
        "node.kubernetes.io/not-ready and unreachable (a pod's toleration of every taint is narrowed to these)",
    )

    def access(self) -> NodeAccess | None:
        if not self.selector and not self.tolerations:
            return None
        tolerations = [t.model_dump(by_alias=True, exclude_defaults=True) for t in self.tolerations]
        return NodeAccess.model_validate({"selector": dict(self.selector) or None, "tolerations": tolerations or None})


class ForeignCluster(ClusterAccess):
    """A foreign cluster: how to reach it (as `home`), and what its virtual node at home shows."""

    pod_security: PodSecurityLevel = Field(
        default="baseline",
        description="the pod-security floor of its twin namespaces (Kubernetes' Pod Security Admission levels "
        "`privileged`, `baseline`, `restricted`): its API server refuses offloaded pods the level forbids",
    )
    grant: GrantConfig = Field(
        default_factory=GrantConfig, description="what it grants the home cluster, enforced there (its Quota)"
    )
    twin_names: TwinNames
    nodes: NodesConfig = Field(
        default_factory=NodesConfig,
        description="which of its nodes the home's pods may use, enforced there (in its Quota, beside the grant)",
    )

    labels: Labels = Field(
        default_factory=dict,
        description="labels suggested for its virtual node (what cluster selectors match), "
        "e.g. `topology.liqo.io/region: europe`",
    )
    sharing_percentage: Percentage | None = Field(
        default=None,
        description="share of its free resources the virtual node offers (default: liqo:sharingPercentage)",
    )
    fixed_resources: Quantities = Field(
        default_factory=dict,
        description="resources the virtual node offers whatever the share, e.g. `nvidia.com/gpu: 1` "
        "(an extended resource the share would round to zero)",
    )
    taints: list[Taint] = Field(
        default_factory=list, description="taints of its virtual node (`key`, `value`, `effect`), beside liqo's own"
    )
    remapped_pod_cidr: Cidr | None = Field(
        default=None,
        alias="remappedPodCIDR",
        description="where the home cluster shows this cluster's pod IPs; default: a block of liqo:network."
        "remappingPool when its podCIDR overlaps the home range or one seen before",
    )
    storage_classes: list[StorageClassConfig] = Field(
        default_factory=list,
        description="the storage classes negotiated for the peering (what `liqo` claims get there); "
        "none: the foreign cluster's default class",
    )
    api_server_address: Annotated[str, AfterValidator(_api_server_address)] | None = Field(
        default=None,
        description="where the home cluster's identity reaches this cluster's API server; default: its kubeconfig's "
        "server (needed when a program passes its own provider instead of a kubeconfig)",
    )

    # docs/offloading.md: a cluster gone for good would hold its VirtualNode (and `pulumi up`) forever
    abandon_unreachable_after: Annotated[int, _whole_seconds(0, 30 * 24 * 3600)] | None = Field(
        default=None,
        description="when its peering is removed (the cluster leaves this list, or the stack is destroyed) while "
        "its API server has not answered for this long (`0s`: at once), the removal stops waiting for its twin "
        "namespaces there: the VirtualNode is released, what is left behind in the cluster is said in a "
        "`PeeringAbandoned` event, and pulumi drops its objects there from its state (deleteUnreachable); set it "
        "with one `pulumi up`, remove the cluster with the next; default: the removal waits for the cluster",
    )
    virtual_nodes: list[VirtualNodeConfig] = Field(
        default_factory=list,
        description="node pools: the cluster offered as several virtual nodes, each standing for the foreign "
        "nodes its nodeSelector picks; none: one virtual node, `liqo-<clusterId>`, for the whole cluster",
    )
    identity_kubeconfig: str | None = Field(
        default=None,
        description="the home identity's kubeconfig that the foreign cluster's own stack issued (its output "
        "`homeIdentities`, set as a secret): with it this stack declares nothing in that cluster and holds no admin "
        "credentials of it; that stack declares its side (agent, tenant, podSecurity, grant). See docs/security.md",
    )
    identity_kubeconfig_path: str | None = Field(
        default=None, description="that kubeconfig as a file; or identityKubeconfig (content)"
    )

    @model_validator(mode="after")
    def _issued_identity_alone(self) -> Self:
        """Peered through an identity the foreign side issued: nothing of that side is declared here."""
        if self.identity_kubeconfig is not None and self.identity_kubeconfig_path is not None:
            raise ValueError("set one of identityKubeconfig (content, as a secret) or identityKubeconfigPath, not both")
        if not self.peers_through_issued_identity:
            return self
        if self.kubeconfig is not None or self.kubeconfig_path is not None:
            raise ValueError(
                "identityKubeconfig: the foreign cluster's own stack declares its side; leave kubeconfig and "
                "kubeconfigPath out (this stack holds no admin credentials of that cluster)"
            )
        for field, where in (
            ("pod_security", "podSecurity"),
            ("grant", "grant"),
            ("twin_names", "twinNames"),
            ("nodes", "nodes"),
        ):
            if field in self.model_fields_set:
                raise ValueError(
                    f"{where}: declared by the foreign cluster's own stack (liqo:foreignSide.homes[].{where}) when "
                    "it issues the identity; leave it out here"
                )
        return self

    @property
    def peers_through_issued_identity(self) -> bool:
        """The foreign side is declared by that cluster's own stack (docs/security.md)."""
        return self.identity_kubeconfig is not None or self.identity_kubeconfig_path is not None

    def kubeconfig_to_read(self) -> str:
        """What the toolkit reads this cluster with (previews, the policy pack): its admin kubeconfig,
        else the identity its own stack issued, which reads the home's tenant and twins only."""
        return self.identity_kubeconfig_text() if self.peers_through_issued_identity else self.kubeconfig_text()

    def identity_kubeconfig_text(self) -> str:
        if self.identity_kubeconfig is not None:
            return self.identity_kubeconfig
        path = Path(self.identity_kubeconfig_path or "").expanduser()
        if not path.is_file():
            raise ConfigError(f"cluster {self.cluster_id}: identityKubeconfigPath {str(path)!r} is not a readable file")
        return path.read_text()

    @field_validator("virtual_nodes")
    @classmethod
    def _distinct_pools(cls, pools: list[VirtualNodeConfig]) -> list[VirtualNodeConfig]:
        pool_names = [p.name for p in pools]
        repeated = repeated_in(pool_names)
        if repeated:
            raise ValueError(f"each pool name may be used once; repeated: {repeated}")
        selectors = [sorted(p.node_selector.items()) for p in pools]
        same = sorted({p.name for p, s in zip(pools, selectors, strict=True) if selectors.count(s) > 1})
        if same:
            raise ValueError(
                f"pools {same} select the same foreign nodes (one nodeSelector): their capacity would count twice"
            )
        return pools

    @model_validator(mode="after")
    def _pools_within_the_nodes(self) -> Self:
        """A pool whose nodeSelector contradicts the nodes the home may use there would have none."""
        for index, pool in enumerate(self.virtual_nodes):
            for key, value in pool.node_selector.items():
                allowed = self.nodes.selector.get(key, value)
                if allowed != value:
                    raise ValueError(
                        f"virtualNodes[{index}].nodeSelector {key}={value}: the home may use only nodes with "
                        f"{key}={allowed} there (nodes.selector), so pool {pool.name!r} would have none"
                    )
        return self

    @model_validator(mode="after")
    def _node_names_fit(self) -> Self:
        for pool in self.virtual_nodes:
            node = names.virtual_node_name(self.cluster_id, pool.name)
            if len(node) > 63:  # it is the Node's kubernetes.io/hostname label too
                raise ValueError(f"virtualNodes: the virtual node {node!r} of pool {pool.name!r} is over 63 characters")
        return self

    @field_validator("storage_classes")
    @classmethod
    def _one_default(cls, classes: list[StorageClassConfig]) -> list[StorageClassConfig]:
        names_ = [c.storage_class_name for c in classes]
        repeated = repeated_in(names_)
        if repeated:
            raise ValueError(f"each storageClassName may be listed once; repeated: {repeated}")
        defaults = [c.storage_class_name for c in classes if c.default]
        if len(defaults) > 1:
            raise ValueError(f"at most one storage class may be the default; these are: {defaults}")
        return classes


class NetworkConfig(ConfigModel):
    """The pod networks as the home cluster sees them."""

    remapping_pool: Cidr = Field(
        default=DEFAULT_REMAPPING_POOL,
        description="where overlapping foreign pod ranges are remapped from (each gets a block of its own size)",
    )


class NamespaceOffloadingConfig(ConfigModel):
    """A namespace offloaded by the stack (a NamespaceOffloading, as `liqo-stack offload namespace` makes)."""

    # a namespace name follows the same DNS-1123 label rule
    name: ClusterId = Field(description="the home namespace")
    namespace_mapping_strategy: NamespaceMappingStrategy = Field(
        default=NamespaceMappingStrategy.DEFAULT_NAME,
        description="how twin namespaces are named: DefaultName `<namespace>-<home cluster id>`, EnforceSameName, "
        "or SelectedName (remoteNamespaceName); immutable once offloaded",
    )
    remote_namespace_name: ClusterId | None = Field(
        default=None, description="the twin namespaces' name, with SelectedName only"
    )
    pod_offloading_strategy: PodOffloadingStrategy = Field(
        default=PodOffloadingStrategy.LOCAL_AND_REMOTE,
        description="where its pods may run: LocalAndRemote, Local (home nodes only), Remote (virtual nodes only)",
    )
    cluster_selector: list[str] | NodeSelector = Field(
        default_factory=list,
        description="which foreign clusters get a twin, matched on their virtual nodes' labels: label-selector "
        "strings, ORed (like repeated `--selector`), or a core NodeSelector; empty: every cluster",
    )

    @field_validator("cluster_selector")
    @classmethod
    def _parseable(cls, value: list[str] | NodeSelector) -> list[str] | NodeSelector:
        if isinstance(value, list):
            try:
                parse_selector(value)
            except SelectorSyntaxError as err:
                raise ValueError(str(err)) from err
        return value

    @model_validator(mode="after")
    def _remote_name_with_selected_name(self) -> Self:
        selected = self.namespace_mapping_strategy is NamespaceMappingStrategy.SELECTED_NAME
        if selected and not self.remote_namespace_name:
            raise ValueError("namespaceMappingStrategy SelectedName requires remoteNamespaceName")
        if not selected and self.remote_namespace_name:
            raise ValueError(
                f"remoteNamespaceName is only used with namespaceMappingStrategy SelectedName "
                f"(this one is {self.namespace_mapping_strategy.value})"
            )
        return self

    def selector(self) -> NodeSelector:
        return (
            parse_selector(self.cluster_selector) if isinstance(self.cluster_selector, list) else self.cluster_selector
        )


class NamespaceSelectorConfig(ConfigModel):
    """Every namespace whose labels match `selector` offloaded, now and whenever one is labelled later
    (a NamespaceOffloadingSelector, as `liqo-stack offload namespaces --namespace-selector` makes)."""

    name: ClusterId = Field(description="the NamespaceOffloadingSelector's name (a DNS label)")
    selector: str = Field(
        description="which namespaces, by label, in kubectl's `-l` syntax: `team=shop`, `env in (dev,test)`, "
        "`!legacy`, ANDed with commas; never kube-system, kube-public, kube-node-lease, default, liqo"
    )
    namespace_mapping_strategy: Literal["DefaultName", "EnforceSameName"] = Field(
        default="DefaultName",
        description="how the twin namespaces are named: DefaultName `<namespace>-<home cluster id>` or "
        "EnforceSameName (SelectedName names one namespace only)",
    )
    pod_offloading_strategy: PodOffloadingStrategy = Field(
        default=PodOffloadingStrategy.LOCAL_AND_REMOTE,
        description="where their pods may run: LocalAndRemote, Local (home nodes only), Remote (virtual nodes only)",
    )
    cluster_selector: list[str] | NodeSelector = Field(
        default_factory=list,
        description="which foreign clusters get their twins, as in liqo:namespaces[].clusterSelector",
    )

    @field_validator("selector")
    @classmethod
    def _namespace_selector(cls, value: str) -> str:
        try:
            problems = selector_problems(parse_label_selector(value))
        except SelectorSyntaxError as err:
            raise ValueError(str(err)) from err
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @field_validator("cluster_selector")
    @classmethod
    def _parseable(cls, value: list[str] | NodeSelector) -> list[str] | NodeSelector:
        return NamespaceOffloadingConfig._parseable(value)

    def spec(self) -> NamespaceOffloadingSelectorSpec:
        cluster_selector = (
            parse_selector(self.cluster_selector) if isinstance(self.cluster_selector, list) else self.cluster_selector
        )
        return NamespaceOffloadingSelectorSpec(
            namespace_selector=parse_label_selector(self.selector),
            namespace_mapping_strategy=self.namespace_mapping_strategy,
            pod_offloading_strategy=self.pod_offloading_strategy,
            cluster_selector=cluster_selector,
        )


class OnDemandConfig(ConfigModel):
    """Namespaces labelled `liqo-stack.io/on-demand-offloading=true`, offloaded while their pods ask for a
    virtual node: the defaults their annotations override (docs/offloading.md#on-demand-offloading)."""

    pod_offloading_strategy: PodOffloadingStrategy = Field(
        default=PodOffloadingStrategy.LOCAL_AND_REMOTE,
        description="where their pods may run once offloaded: LocalAndRemote, Local, Remote",
    )
    cluster_selector: list[str] = Field(
        default_factory=list,
        description="which foreign clusters get their twins: label-selector strings, ORed; empty: every cluster",
    )
    grace_period_seconds: Annotated[int, _whole_seconds(1, 7 * 24 * 3600)] = Field(
        default=300,
        description="how long an on-demand offloading stays with no pod on a virtual node before it is removed "
        "(a duration, 1s to 7 days)",
    )

    @field_validator("cluster_selector")
    @classmethod
    def _parseable(cls, value: list[str]) -> list[str]:
        NamespaceOffloadingConfig._parseable(value)
        return value

    def args(self) -> list[str]:
        """The controller-manager's flags for these defaults."""
        return [
            f"--on-demand-pod-offloading-strategy={self.pod_offloading_strategy.value}",
            *(f"--on-demand-cluster-selector={text}" for text in self.cluster_selector),
            f"--on-demand-grace-period={self.grace_period_seconds}",
        ]


class ReflectorConfig(ConfigModel):
    """The reflection of one resource type."""

    type: ReflectionPolicy = Field(
        default=ReflectionPolicy.DENY_LIST,
        description="DenyList: all but objects annotated `liqo.io/skip-reflection`; AllowList: only objects "
        "annotated `liqo.io/allow-reflection`",
    )
    workers: int = Field(default=3, ge=0, le=64, description="concurrent reconciles; 0 turns this type off")


# API groups that are not custom resources' (no CRD serves them): liqo's own and Kubernetes' built-in
# ones (other *.k8s.io groups, gateway.networking.k8s.io or snapshot.storage.k8s.io, are CRDs)
_BUILT_IN_K8S_IO_GROUPS = (
    "admissionregistration",
    "apiextensions",
    "apiregistration",
    "authentication",
    "authorization",
    "certificates",
    "coordination",
    "discovery",
    "events",
    "flowcontrol.apiserver",
    "internal.apiserver",
    "metrics",
    "networking",
    "node",
    "rbac.authorization",
    "resource",
    "scheduling",
    "storage",
    "storagemigration",
)
_NOT_CUSTOM_GROUPS = (names.GROUP, "liqo.io", *(f"{group}.k8s.io" for group in _BUILT_IN_K8S_IO_GROUPS))
_VERSION_NAME = re.compile(r"^v[0-9]+((alpha|beta)[0-9]+)?$")


def _api_group(value: str) -> str:
    if "*" in value:
        raise ValueError("a wildcard is not a group: name one API group (e.g. cert-manager.io)")
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value) or "." not in value:
        raise ValueError("must be a custom resource's API group, a DNS subdomain with a dot (e.g. cert-manager.io)")
    if value in _NOT_CUSTOM_GROUPS:
        raise ValueError(f"{value} is not a custom resource's group (liqo's own and Kubernetes' built-in ones)")
    return value


def _api_version(value: str) -> str:
    if not _VERSION_NAME.fullmatch(value):
        raise ValueError("must be a Kubernetes API version such as v1, v1beta1 or v2alpha3")
    return value


def _resource_name(value: str) -> str:
    if "*" in value:
        raise ValueError("a wildcard is not a resource: name each resource type to reflect (its plural)")
    if not names.is_dns_label(value) or "/" in value:
        raise ValueError("must be the resource's plural as in its CRD's name, lower case (e.g. certificates)")
    return value


class CustomResourceConfig(ConfigModel):
    """One custom resource type reflected into the twins, named as in its CRD (see docs/reflection.md)."""

    group: Annotated[str, AfterValidator(_api_group)] = Field(description="its API group, e.g. cert-manager.io")
    version: Annotated[str, AfterValidator(_api_version)] = Field(description="the version reflected, e.g. v1")
    resource: Annotated[str, AfterValidator(_resource_name)] = Field(
        description="its plural, e.g. certificates (the CRD is `<resource>.<group>`)"
    )
    type: ReflectionPolicy = Field(
        default=ReflectionPolicy.ALLOW_LIST,
        description="AllowList (default): only objects annotated `liqo.io/allow-reflection`; DenyList: all but "
        "objects annotated `liqo.io/skip-reflection`",
    )
    workers: int = Field(default=3, ge=0, le=64, description="concurrent reconciles; 0 turns this type off")
    reflect_status: bool = Field(
        default=False,
        description="the copy's status comes back to the home object (its CRD needs a status subresource at home)",
    )


class ReflectionConfig(ConfigModel):
    """Resource reflection into the twin namespaces (docs/reflection.md); applied live through the VirtualNodes."""

    resources: dict[Literal[REFLECTED_RESOURCES], ReflectorConfig] = Field(  # type: ignore[valid-type]
        default_factory=dict,
        description="per resource type (" + ", ".join(REFLECTED_RESOURCES) + "): its policy and workers",
    )
    custom_resources: list[CustomResourceConfig] = Field(
        default_factory=list,
        description="custom resource types reflected too, each opted in by group, version and resource",
    )
    skip_labels: list[str] = Field(default_factory=list, description="labels never copied to the reflected objects")
    skip_annotations: list[str] = Field(
        default_factory=list, description="annotations never copied to the reflected objects"
    )

    def settings(self) -> dict[str, ReflectorConfig]:
        return {name: self.resources.get(name, ReflectorConfig()) for name in REFLECTED_RESOURCES}

    def custom_reflection(self) -> list[CustomResourceReflection]:
        """The opted-in custom resources as the VirtualNodes (and the RBAC granted for them) carry them."""
        return [CustomResourceReflection.model_validate(c.model_dump()) for c in self.custom_resources]

    @field_validator("custom_resources")
    @classmethod
    def _one_version_each(cls, custom: list[CustomResourceConfig]) -> list[CustomResourceConfig]:
        named = [f"{c.resource}.{c.group}" for c in custom]
        repeated = repeated_in(named)
        if repeated:
            raise ValueError(f"each custom resource is reflected in one version; repeated: {repeated}")
        return custom


class VirtualKubeletConfig(ConfigModel):
    """Settings of every virtual kubelet (the VirtualNodes' spec)."""

    health_check_interval_seconds: Annotated[int, _whole_seconds(1, 3600)] = Field(
        default=10, description="how often the foreign API server is checked (a duration, 1s to 1h)"
    )
    failure_threshold: int = Field(
        default=3, ge=1, le=100, description="failed checks in a row before the virtual node turns NotReady"
    )
    # docs/reflection.md: offloaded pods get tokens of the home API server (off: no token leaves home) ...
    api_server_token_support: bool = Field(
        default=True,
        description="offloaded pods that mount their ServiceAccount token get one the home API server issued "
        "(off: no token leaves home)",
    )
    # issue 38 section 4: written as an annotation on every VirtualNode, where the runtime reads it
    move_unfit_pods_after_seconds: Annotated[int, _whole_seconds(0, 86400)] | None = Field(
        default=None,
        description="a pod the foreign scheduler keeps Unschedulable this long (no foreign node fits it) is moved "
        "(deleted when a controller owns it, else failed), in every offloaded namespace; a NamespaceOffloading's "
        "liqo-stack.io/move-unfit-pods-after annotation overrides it; default: such pods wait",
    )
    # ... and reach it here from the foreign clusters; default: the server of the home kubeconfig
    home_api_server_address: Annotated[str, AfterValidator(_api_server_address)] | None = Field(
        default=None,
        description="where offloaded pods reach the home API server (`host:port` or `https://host:port`); "
        "default: the home kubeconfig's server",
    )


class RuntimeMode(StrEnum):
    CLUSTER = "cluster"  # the runtime runs as Deployments of the runtime image
    EXTERNAL = "external"  # same objects, Deployments scaled to zero; the runtime runs as local processes


# An image reference as container runtimes read it: [host[:port]/]path[:tag][@sha256:<digest>]
_IMAGE_NAME = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REFERENCE = re.compile(
    rf"^(?P<name>(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_IMAGE_NAME}(?:/{_IMAGE_NAME})*)"
    r"(?::(?P<tag>\w[\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def _image_reference(value: str) -> str:
    if not _IMAGE_REFERENCE.fullmatch(value):
        raise ValueError(
            "is not an image reference, e.g. registry.example.com/liqo-stack:0.1.0 (optionally @sha256:<64 hex digits>)"
        )
    return value


def _image_digest(value: str) -> str:
    if not _DIGEST.fullmatch(value):
        raise ValueError("is not an image digest: sha256:<64 lowercase hex digits>")
    return value


# Two replicas: one leads, one stands by with warm informers (more only add load on the API servers).
Replicas = Annotated[int, Field(ge=1, le=2, strict=True)]


class ReplicasConfig(ConfigModel):
    """Replicas of each runtime component (cluster mode); they elect a leader on a Lease."""

    controller_manager: Replicas = Field(default=1, description="the controller-manager (with the webhooks)")
    virtual_kubelet: Replicas = Field(default=1, description="each foreign cluster's virtual kubelet")
    foreign_agent: Replicas = Field(default=1, description="the foreign agent in each foreign cluster")


def _same_replicas_for_all(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return {"controllerManager": value, "virtualKubelet": value, "foreignAgent": value}
    return value


class LeaderElectionConfig(ConfigModel):
    """client-go's leader election settings (and defaults), for every component."""

    lease_duration_seconds: Annotated[int, _whole_seconds(1, 3600)] = Field(
        default=15, description="how long a stand-by waits, after the last renewal it saw, before taking the Lease"
    )
    renew_deadline_seconds: Annotated[int, _whole_seconds(1, 3600)] = Field(
        default=10, description="how long the leader tries to renew before it gives up and exits"
    )
    retry_period_seconds: Annotated[int, _whole_seconds(1, 3600)] = Field(
        default=2, description="how often the leader renews and a stand-by tries to take the Lease"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        timing = LeaderElectionTiming(
            self.lease_duration_seconds, self.renew_deadline_seconds, self.retry_period_seconds
        )
        settings = ("leaseDurationSeconds", "renewDeadlineSeconds", "retryPeriodSeconds")
        problems = timing.problems(tuple(f"runtime.leaderElection.{s}" for s in settings))  # type: ignore[arg-type]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def args(self) -> list[str]:
        """The runtime's flags for these settings."""
        return [
            f"--leader-elect-lease-duration={self.lease_duration_seconds}",
            f"--leader-elect-renew-deadline={self.renew_deadline_seconds}",
            f"--leader-elect-retry-period={self.retry_period_seconds}",
        ]


class RuntimeConfig(ConfigModel):
    """Where and how the runtime (controller-manager, virtual kubelets, foreign agents) runs."""

    mode: RuntimeMode = Field(
        default=RuntimeMode.EXTERNAL,
        description="external: the Deployments are scaled to zero and the runtime runs as local processes (the dev "
        "env, the tests); cluster: the Deployments run the runtime image",
    )
    image: Annotated[str, AfterValidator(_image_reference)] = Field(
        default="ghcr.io/liqo-stack/runtime:0.1.0",
        description="the runtime image (cluster mode), `[registry/]name[:tag][@sha256:<digest>]`",
    )
    # What `liqo-stack image build` printed (or `skopeo inspect` of the pushed image): the Deployments
    # then run exactly that image, whatever the tag points to later.
    image_digest: Annotated[str, AfterValidator(_image_digest)] | None = Field(
        default=None,
        description="`sha256:...` as `liqo-stack image build` printed it: the Deployments run `image@imageDigest`",
    )
    # external mode: the API server calls the webhooks at https://127.0.0.1:<webhookPort>
    webhook_port: int = Field(
        default=9443,
        ge=1,
        le=65535,
        strict=True,
        description="external mode: the home API server calls the webhooks at `https://127.0.0.1:<webhookPort>`",
    )
    replicas: Annotated[ReplicasConfig, BeforeValidator(_same_replicas_for_all)] = Field(
        default_factory=ReplicasConfig,
        description="replicas of each component, 1 or 2 (cluster mode); a number sets all three: `replicas: 2`",
    )
    leader_election: LeaderElectionConfig = Field(
        default_factory=LeaderElectionConfig, description="the leader election timings of every component"
    )
    # One process serves many peerings (runtime/virtualkubelet/peerings.py); 1 keeps one Deployment per
    # foreign cluster, as stacks made before it have (no Deployment is replaced by an upgrade).
    peerings_per_process: Annotated[int, Field(ge=1, strict=True)] | Literal["all"] = Field(
        default=1,
        description="cluster mode: how many foreign clusters one virtual-kubelet Deployment serves: 1 (one "
        "Deployment each), N (shards of N, in the order of liqo:foreignClusters) or `all`; external mode: one "
        "local process serves them all",
    )

    @model_validator(mode="after")
    def _one_digest(self) -> Self:
        found = _IMAGE_REFERENCE.fullmatch(self.image)
        in_image = found.group("digest") if found else None
        if in_image and self.image_digest and in_image != self.image_digest:
            raise ValueError(f"imageDigest {self.image_digest} differs from the digest in image {self.image!r}")
        return self

    @property
    def pinned_image(self) -> str:
        """The image the Deployments run: by digest when one is given (in `image` or `imageDigest`)."""
        if self.image_digest is None or "@" in self.image:
            return self.image
        return f"{self.image}@{self.image_digest}"


class StackConfig(ConfigModel):
    """The `liqo:` namespace of a stack's config."""

    home: ClusterAccess = Field(description="the home cluster, where the virtual nodes are")
    foreign_clusters: list[ForeignCluster] = Field(
        min_length=1, description="the foreign clusters, one peering and virtual node each"
    )
    sharing_percentage: Percentage = Field(
        default=90, description="default share of a foreign cluster's free resources its virtual node offers"
    )
    namespaces: list[NamespaceOffloadingConfig] = Field(default_factory=list, description="the offloaded namespaces")
    namespace_selectors: list[NamespaceSelectorConfig] = Field(
        default_factory=list, description="namespaces offloaded by label, those labelled later included"
    )
    on_demand: OnDemandConfig = Field(
        default_factory=OnDemandConfig, description="defaults of namespaces offloaded on demand (a label of theirs)"
    )
    reflection: ReflectionConfig = Field(default_factory=ReflectionConfig, description="resource reflection")
    virtual_kubelet: VirtualKubeletConfig = Field(
        default_factory=VirtualKubeletConfig, description="settings of every virtual kubelet"
    )
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig, description="how the runtime runs")
    network: NetworkConfig = Field(default_factory=NetworkConfig, description="pod networks as seen at home")

    @model_validator(mode="after")
    def _one_cluster_per_virtual_node(self) -> Self:
        """A pool's node name may be another cluster's (pool `1` of `foreign` is `liqo-foreign-1`)."""
        seen: dict[str, tuple[int, str | None]] = {}  # node -> (cluster index, pool)
        for index, foreign in enumerate(self.foreign_clusters):
            pools: list[str | None] = [p.name for p in foreign.virtual_nodes] or [None]
            for pool in pools:
                node = names.virtual_node_name(foreign.cluster_id, pool)
                if node in seen:
                    other, other_pool = seen[node]
                    (at, named), clash = ((index, pool), other) if pool is not None else ((other, other_pool), index)
                    raise ValueError(
                        f"foreignClusters[{at}].virtualNodes: pool {named!r} makes the virtual node {node}, "
                        f"which is foreignClusters[{clash}]'s too: rename the pool"
                    )
                seen[node] = (index, pool)
        return self

    @model_validator(mode="after")
    def _pod_networks_fit(self) -> Self:
        self.remapped_pod_cidrs()  # raises with the config path of what to change
        for foreign in self.foreign_clusters:
            self.ranges_seen_by(foreign.cluster_id)
        return self

    def home_api_server(self) -> ApiServerAddress | None:
        """Where offloaded pods reach the home API server: the address set in the config, else the
        server of the home kubeconfig (None when it names none)."""
        if self.virtual_kubelet.home_api_server_address is not None:
            return parse_api_server_address(self.virtual_kubelet.home_api_server_address)
        if not self.home.has_kubeconfig:
            return None  # a program's own provider reaches home: liqo_stack.declaring.program requires the address then
        server = current_cluster(self.home.kubeconfig_text()).get("server")
        if not server:
            return None
        try:
            return parse_api_server_address(server)
        except ValueError as err:
            raise ConfigError(
                f"liqo:home: the kubeconfig's server {err}; set liqo:virtualKubelet.homeApiServerAddress"
            ) from None

    def ranges_seen_by(self, cluster_id: str) -> dict[str, tuple[str, str]]:
        """Per other cluster: the range the home cluster shows its pods in, and the range the foreign
        cluster `cluster_id` reaches them in (its reflected EndpointSlices' addresses)."""
        networks = [
            ForeignPodNetwork(f.cluster_id, f.pod_cidr, f.remapped_pod_cidr, f"foreignClusters[{index}]")
            for index, f in enumerate(self.foreign_clusters)
        ]
        home = ForeignPodNetwork(self.home.cluster_id, self.home.pod_cidr, None, "home")
        destination = next(n for n in networks if n.cluster_id == cluster_id)
        try:
            return ranges_seen_by(destination, home, networks, self.network.remapping_pool)
        except PodNetworkError as err:
            raise ValueError(f"as {cluster_id} sees the others: {err}") from None

    def remapped_pod_cidrs(self) -> dict[str, str | None]:
        """Per foreign cluster id: the range its pod IPs are shown in at home (None: unchanged)."""
        networks = [
            ForeignPodNetwork(f.cluster_id, f.pod_cidr, f.remapped_pod_cidr, f"foreignClusters[{index}]")
            for index, f in enumerate(self.foreign_clusters)
        ]
        try:
            return remapped_pod_cidrs(self.home.pod_cidr, networks, self.network.remapping_pool)
        except PodNetworkError as err:
            raise ValueError(str(err)) from None

    @field_validator("foreign_clusters")
    @classmethod
    def _unique_cluster_ids(cls, clusters: list[ForeignCluster], info: ValidationInfo) -> list[ForeignCluster]:
        home = info.data.get("home")
        ids = ([home.cluster_id] if home else []) + [c.cluster_id for c in clusters]
        repeated = repeated_in(ids)
        if repeated:
            raise ValueError(f"cluster ids must be unique across home and foreignClusters; repeated: {repeated}")
        return clusters

    @field_validator("namespaces")
    @classmethod
    def _offloadable(
        cls, namespaces: list[NamespaceOffloadingConfig], info: ValidationInfo
    ) -> list[NamespaceOffloadingConfig]:
        offloaded = [n.name for n in namespaces]
        repeated = repeated_in(offloaded)
        if repeated:
            raise ValueError(f"each namespace may be offloaded once; repeated in namespaces: {repeated}")
        home = info.data.get("home")
        for ns in namespaces:
            if home and ns.namespace_mapping_strategy is NamespaceMappingStrategy.DEFAULT_NAME:
                twin = f"{ns.name}-{home.cluster_id}"
                if len(twin) > 63:
                    raise ValueError(f"namespace {ns.name}: its twin name {twin} would exceed 63 characters")
        return namespaces

    @field_validator("namespace_selectors")
    @classmethod
    def _unique_selector_names(cls, selectors: list[NamespaceSelectorConfig]) -> list[NamespaceSelectorConfig]:
        given = [s.name for s in selectors]
        repeated = repeated_in(given)
        if repeated:
            raise ValueError(f"each name may be used once; repeated in namespaceSelectors: {repeated}")
        return selectors

    def sharing_of(self, cluster: ForeignCluster) -> int:
        return cluster.sharing_percentage if cluster.sharing_percentage is not None else self.sharing_percentage


# A setting's path in a message: `liqo:` then a setting's name (`liqo:foreignClusters[0].clusterId`).
_SETTING_PATH = re.compile(rf"\b{CONFIG_NAMESPACE}:(?=[a-zA-Z])")


def renamed_settings(message: str, where: str) -> str:
    """`message` with each `liqo:<setting>` it names written `<where><setting>` (every message names its
    setting from the config namespace; the checks across fields write it too)."""
    return _SETTING_PATH.sub(lambda _: where, message)


def _path(loc: tuple[int | str, ...]) -> str:
    text = f"{CONFIG_NAMESPACE}:"
    for index, part in enumerate(loc):
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == "[key]" or str(part).startswith(("list[", "function-after[")) or part == "NodeSelector":
            continue  # markers pydantic adds for dict keys and union branches
        else:
            text += ("" if index == 0 else ".") + str(part)
    return text


def _describe(error: Mapping[str, Any]) -> str:
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "is not a known setting (check its spelling)"
    elif error["type"] == "missing":
        message = "is required"
    elif isinstance(error.get("input"), str | int | float | bool):
        # scalars only: a mapping may hold a kubeconfig, which must never reach a log
        shown = json.dumps(error["input"])
        if len(shown) <= 80:
            message += f" (got {shown})"
    return message


class HomeServed(ConfigModel):
    """A home cluster this foreign cluster serves: the identity it issues to it, and what it holds it to."""

    cluster_id: ClusterId = Field(description="the home cluster's id (its stack's liqo:home.clusterId)")
    pod_security: PodSecurityLevel = Field(
        default="baseline",
        description="the pod-security floor of its twin namespaces (`privileged`, `baseline`, `restricted`)",
    )
    grant: GrantConfig = Field(default_factory=GrantConfig, description="what it may use here (its Quota)")
    twin_names: TwinNames
    nodes: NodesConfig = Field(
        default_factory=NodesConfig,
        description="which of this cluster's nodes its pods may use (in its Quota, beside the grant)",
    )
    custom_resources: list[CustomResourceConfig] = Field(
        default_factory=list,
        description="the custom resource types its stack reflects (liqo:reflection.customResources): its identity "
        "may write them in its twins and read their CRDs here",
    )


class ForeignSide(ClusterAccess):
    """This stack declares one foreign cluster's side, with that cluster's own admin credentials: its
    agent, the admission policy, and for each home it serves a tenant, an identity, a floor and a grant.
    The home stacks peer with the identities it outputs (`homeIdentities`)."""

    api_server_address: Annotated[str, AfterValidator(_api_server_address)] | None = Field(
        default=None,
        description="where the home identities reach this cluster's API server (host:port); default: its "
        "kubeconfig's server",
    )
    homes: list[HomeServed] = Field(min_length=1, description="the home clusters it serves")

    @field_validator("homes")
    @classmethod
    def _distinct_homes(cls, homes: list[HomeServed]) -> list[HomeServed]:
        ids = [h.cluster_id for h in homes]
        repeated = repeated_in(ids)
        if repeated:
            raise ValueError(f"each home cluster is served once; repeated: {repeated}")
        return homes

    def custom_reflection(self) -> list[CustomResourceReflection]:
        """Every home's custom resource types (the twin role, one per cluster, grants their union)."""
        seen: dict[str, CustomResourceReflection] = {}
        for home in self.homes:
            for custom in home.custom_resources:
                reflection = CustomResourceReflection.model_validate(custom.model_dump())
                seen.setdefault(f"{custom.resource}.{custom.group}", reflection)
        return list(seen.values())


class ForeignSideStackConfig(ConfigModel):
    """The `liqo:` namespace of a foreign cluster's own stack (docs/security.md)."""

    foreign_side: ForeignSide = Field(description="the foreign cluster this stack declares the side of")
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig, description="how its foreign agent runs")

    @model_validator(mode="after")
    def _twin_names_of_one_home(self) -> Self:
        """A home's twinNames stay out of the DefaultName space of the other homes served here."""
        homes = [h.cluster_id for h in self.foreign_side.homes]
        for index, home in enumerate(self.foreign_side.homes):
            for at, pattern in enumerate(home.twin_names):
                problem = declared_pattern_problem(pattern, home.cluster_id, homes)
                if problem is not None:
                    raise ValueError(f"foreignSide.homes[{index}].twinNames[{at}]: {pattern!r} {problem}")
        return self


def parse(raw: Mapping[str, Any], where: str = f"{CONFIG_NAMESPACE}:") -> StackConfig:
    """Validate the `liqo:` settings of a home stack (keys without the namespace, values already decoded).
    `where` is what the error messages put before a setting's path: the config namespace `liqo:`, or
    where else the settings came from (the package's `resources.<name>.properties.`)."""
    try:
        config = parse_any(raw)
    except ConfigError as err:
        if where == f"{CONFIG_NAMESPACE}:":
            raise
        raise ConfigError(renamed_settings(str(err), where).replace("stack config", "properties")) from None
    if not isinstance(config, StackConfig):
        raise ConfigError("liqo:foreignSide: this is a foreign side's stack config, not a home stack's")
    return config


def parse_any(raw: Mapping[str, Any]) -> StackConfig | ForeignSideStackConfig:
    """A home stack's config, or a foreign side's (`liqo:foreignSide`): never both in one stack."""
    model: type[StackConfig | ForeignSideStackConfig] = StackConfig
    if "foreignSide" in raw:
        declares_home = sorted(k for k in raw if k not in ForeignSideStackConfig.model_fields and k != "foreignSide")
        if declares_home:
            raise ConfigError(
                f"invalid stack config:\n  liqo:foreignSide: a stack declares one foreign cluster's side or a home "
                f"cluster, not both: move {', '.join(f'liqo:{k}' for k in declares_home)} to the home's stack"
            )
        model = ForeignSideStackConfig
    try:
        return model.model_validate(dict(raw))
    except ValidationError as err:
        # a check across fields has no location of its own: its message starts with the path
        lines = sorted(
            {f"{_path(e['loc'])}: {_describe(e)}" if e["loc"] else _path(()) + _describe(e) for e in err.errors()}
        )
        raise ConfigError("invalid stack config:\n  " + "\n  ".join(lines)) from None


def from_pulumi_config(all_config: Mapping[str, Any]) -> StackConfig:
    """A home stack's config from the engine's config map ({"liqo:home": "<json>", ...}); other
    namespaces are ignored."""
    return parse(_liqo_settings(all_config))


def any_from_pulumi_config(all_config: Mapping[str, Any]) -> StackConfig | ForeignSideStackConfig:
    """A home stack's config or a foreign side's, from the engine's config map."""
    return parse_any(_liqo_settings(all_config))


def _liqo_settings(all_config: Mapping[str, Any]) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    prefix = f"{CONFIG_NAMESPACE}:"
    for key, value in all_config.items():
        if not key.startswith(prefix):
            continue
        name = key[len(prefix) :]
        if isinstance(value, str):
            with contextlib.suppress(json.JSONDecodeError):  # else a plain string setting
                value = json.loads(value)
        raw[name] = value
    return raw
