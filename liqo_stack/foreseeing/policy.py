"""The checks of the policy pack (`policies/`), as pure functions of the stack config and its objects.

`policies/__main__.py` runs them inside `pulumi preview --policy-pack policies`; `liqo-stack preview`
and `liqo-stack promote` report them too. Every message names the stack config path to change.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from liqo_stack.declaring.config import ForeignCluster, NamespaceOffloadingConfig, StackConfig
from runtime.api import NamespaceMappingStrategy, names, twinnames
from runtime.api.plan import shared_resources

# -- the policies, their default enforcement and per-stack settings --------------------------------
EXTENDED_RESOURCE_ROUNDS_TO_ZERO = "liqo-extended-resource-rounds-to-zero"
HOME_IDENTITY_LEAST_PRIVILEGE = "liqo-home-identity-least-privilege"
KUBECONFIG_AS_SECRET = "liqo-kubeconfig-as-secret"
RESERVED_NAMESPACE_SAME_NAME = "liqo-reserved-namespace-same-name"
NAMESPACE_WITHOUT_SELECTOR = "liqo-namespace-without-cluster-selector"
SHARING_PERCENTAGE_HIGH = "liqo-sharing-percentage-high"
NO_HEALTH_CHECK_THRESHOLD = "liqo-no-health-check-threshold"

MANDATORY = "mandatory"
ADVISORY = "advisory"

POLICIES: dict[str, tuple[str, str]] = {
    EXTENDED_RESOURCE_ROUNDS_TO_ZERO: (
        MANDATORY,
        "An extended resource (GPUs, anything but cpu and memory) a foreign cluster offers must not round "
        "down to zero on its virtual node (1 GPU x 90 % = 0).",
    ),
    HOME_IDENTITY_LEAST_PRIVILEGE: (
        MANDATORY,
        "The home cluster's identity in a foreign cluster is bound only in its tenant namespace, to the "
        "verbs the runtime needs.",
    ),
    KUBECONFIG_AS_SECRET: (MANDATORY, "A kubeconfig given as content in the stack config is a Pulumi secret."),
    RESERVED_NAMESPACE_SAME_NAME: (
        MANDATORY,
        "No namespace is offloaded with EnforceSameName (or SelectedName) onto a name reserved in the "
        "foreign clusters (kube-*, liqo*, default, the tenant namespaces): the foreign clusters refuse them.",
    ),
    NAMESPACE_WITHOUT_SELECTOR: (
        ADVISORY,
        "A namespace offloaded with no cluster selector goes to every peered cluster.",
    ),
    SHARING_PERCENTAGE_HIGH: (ADVISORY, "A sharing percentage above 95 leaves a foreign cluster no headroom."),
    NO_HEALTH_CHECK_THRESHOLD: (
        ADVISORY,
        "Foreign clusters' health checks have an explicit failure threshold (liqo:virtualKubelet.failureThreshold).",
    ),
}

# what no foreign cluster lets a home take as a twin (runtime/api/twinnames.py): refused here before that
DEFAULT_RESERVED_NAMESPACES = twinnames.RESERVED
DEFAULT_MAX_SHARING_PERCENTAGE = 95
# Resources the sharing percentage may cut to fractions without harm: they are kept in milli units or bytes.
DIVISIBLE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})


@dataclass(frozen=True)
class Violation:
    policy: str
    message: str

    @property
    def enforcement(self) -> str:
        return POLICIES[self.policy][0]


@dataclass(frozen=True)
class PolicySettings:
    """Per-stack settings, from the policy config file (`--policy-pack-config`)."""

    reserved_namespaces: tuple[str, ...] = DEFAULT_RESERVED_NAMESPACES
    max_sharing_percentage: int = DEFAULT_MAX_SHARING_PERCENTAGE
    enforcement: dict[str, str] = field(default_factory=dict)  # policy -> mandatory | advisory | disabled

    @classmethod
    def from_policy_config(cls, config: Mapping[str, Any]) -> PolicySettings:
        """From a policy pack config file: {"<policy>": "advisory" | {"enforcementLevel": ..., ...}}."""
        unknown = sorted(set(config) - set(POLICIES) - {"all"})
        if unknown:
            raise ValueError(f"policy config: unknown policies {unknown}; known: {sorted(POLICIES)}")
        enforcement: dict[str, str] = {}
        settings: dict[str, Any] = {}
        for name, value in config.items():
            level = value if isinstance(value, str) else (value or {}).get("enforcementLevel")
            if level is not None:
                if level not in (MANDATORY, ADVISORY, "disabled"):
                    raise ValueError(f"policy config: {name}.enforcementLevel must be mandatory, advisory or disabled")
                enforcement[name] = level
            if isinstance(value, Mapping):
                settings.update({k: v for k, v in value.items() if k != "enforcementLevel"})
        reserved = settings.get("reservedNamespaces", DEFAULT_RESERVED_NAMESPACES)
        if not isinstance(reserved, list | tuple) or not all(isinstance(r, str) for r in reserved):
            raise ValueError(
                f"policy config: {RESERVED_NAMESPACE_SAME_NAME}.reservedNamespaces must be a list of names"
            )
        maximum = settings.get("maxSharingPercentage", DEFAULT_MAX_SHARING_PERCENTAGE)
        if not isinstance(maximum, int | float) or not 1 <= maximum <= 100:
            raise ValueError(f"policy config: {SHARING_PERCENTAGE_HIGH}.maxSharingPercentage must be 1 to 100")
        return cls(reserved_namespaces=tuple(reserved), max_sharing_percentage=int(maximum), enforcement=enforcement)

    def level(self, policy: str) -> str:
        return self.enforcement.get(policy, POLICIES[policy][0])


def _foreign_path(index: int) -> str:
    return f"liqo:foreignClusters[{index}]"


def _sharing_path(config: StackConfig, index: int, foreign: ForeignCluster) -> str:
    return (
        f"{_foreign_path(index)}.sharingPercentage"
        if foreign.sharing_percentage is not None
        else "liqo:sharingPercentage"
    )


# -- mandatory ------------------------------------------------------------------------------------


def extended_resources_rounding_to_zero(
    config: StackConfig, available: Mapping[str, Mapping[str, str]]
) -> list[Violation]:
    """Per foreign cluster, what it offers (its advertisement, or its nodes' allocatable) x the sharing
    percentage, as the virtual kubelet computes it: an extended resource that floors to 0 is denied."""
    found = []
    for index, foreign in enumerate(config.foreign_clusters):
        offered = available.get(foreign.cluster_id)
        if not offered:
            continue
        extended = {r: q for r, q in offered.items() if r not in DIVISIBLE_RESOURCES and r != "pods"}
        sharing = config.sharing_of(foreign)
        shared = shared_resources(extended, sharing, foreign.fixed_resources)
        for resource in shared.rounded_to_zero:
            path = _foreign_path(index)
            found.append(
                Violation(
                    EXTENDED_RESOURCE_ROUNDS_TO_ZERO,
                    f"{path} ({foreign.cluster_id}): {resource}: {offered[resource]} available x {sharing}% "
                    f"({_sharing_path(config, index, foreign)}) rounds down to 0 on virtual node "
                    f"{names.virtual_node_name(foreign.cluster_id)}, so no pod can use it there. "
                    f'Fix: set {path}.fixedResources."{resource}" (e.g. {offered[resource]}), or raise the '
                    f"sharing percentage.",
                )
            )
    return found


def plain_kubeconfigs(config: StackConfig, is_secret: Callable[[str], bool]) -> list[Violation]:
    """Kubeconfig content (not a path) whose config value is not a Pulumi secret."""
    clusters: list[tuple[str, str | None]] = [("liqo:home.kubeconfig", config.home.kubeconfig)]
    clusters += [(f"{_foreign_path(i)}.kubeconfig", f.kubeconfig) for i, f in enumerate(config.foreign_clusters)]
    return [
        Violation(
            KUBECONFIG_AS_SECRET,
            f"{path} holds a kubeconfig in plain text: it must be a Pulumi secret. Fix: "
            f"pulumi config set --secret --path '{path}' \"$(cat <kubeconfig file>)\"",
        )
        for path, content in clusters
        if content is not None and not is_secret(path)
    ]


def is_secret_in(paths: Iterable[str]) -> Callable[[str], bool]:
    """A path is secret when it or a value containing it is (`liqo:foreignClusters` set whole as a secret)."""
    secrets = set(paths)

    def check(path: str) -> bool:
        return any(path == s or path.startswith((s + ".", s + "[")) for s in secrets)

    return check


# The (group, resource, verb) triples the home identity needs in its tenant namespace: the stack's own rules.
def _allowed_triples() -> set[tuple[str, str, str]]:
    from liqo_stack.declaring.manifests import HOME_IDENTITY_TENANT_RULES

    return {
        (group, resource, verb)
        for rule in HOME_IDENTITY_TENANT_RULES
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _excess(rules: Iterable[Mapping[str, Any]]) -> list[str]:
    allowed = _allowed_triples()
    excess = []
    for rule in rules:
        if rule.get("nonResourceURLs"):
            excess.append(f"nonResourceURLs {rule['nonResourceURLs']}")
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                for verb in rule.get("verbs") or []:
                    if (group, resource, verb) not in allowed:
                        excess.append(f"{verb} {resource}{'.' + group if group else ''}")
    return sorted(set(excess))


def _wildcards(rules: Iterable[Mapping[str, Any]]) -> list[str]:
    """The fields of these rules that ask for `*` (every group, resource, verb or name)."""
    return sorted(
        {
            f"{field} {rule.get(field)}"
            for rule in rules
            for field in ("apiGroups", "resources", "verbs", "resourceNames")
            if any("*" in str(value) for value in rule.get(field) or [])
        }
    )


def _reads_named_crds_only(rules: Iterable[Mapping[str, Any]]) -> bool:
    """The one cluster-wide grant the home identity may have: reading the opted-in custom resources'
    CRDs by name (runtime/reflection/custom.py), nothing else."""
    rules = list(rules)
    return bool(rules) and all(
        rule.get("apiGroups") == ["apiextensions.k8s.io"]
        and rule.get("resources") == ["customresourcedefinitions"]
        and set(rule.get("verbs") or []) <= {"get", "list", "watch"}
        and rule.get("resourceNames")
        and not _wildcards([rule])
        for rule in rules
    )


def home_identity_privileges(home_cluster_id: str, objects: Iterable[tuple[str, Mapping[str, Any]]]) -> list[Violation]:
    """Over the stack's objects (cluster id, manifest): the home identity's bindings in foreign clusters,
    and the role the foreign agents bind it to in twin namespaces, which may name custom resources
    (liqo:reflection.customResources) but never ask for `*`."""
    from liqo_stack.declaring.manifests import HOME_IN_TWIN_NAMESPACE_ROLE

    objects = [(c, m) for c, m in objects if c != home_cluster_id]
    identity, tenant = names.home_identity_name(home_cluster_id), names.tenant_namespace(home_cluster_id)
    roles = {
        (c, m.get("kind"), (m.get("metadata") or {}).get("namespace"), (m.get("metadata") or {}).get("name")): m
        for c, m in objects
        if m.get("kind") in ("Role", "ClusterRole")
    }
    found = []
    fix = (
        "the identity's rules are not stack config: they come from liqo_stack/declaring/manifests.py "
        "(HOME_IDENTITY_TENANT_RULES); remove the object that grants more"
    )
    for (cluster_id, kind, _, name), manifest in roles.items():
        wildcards = _wildcards(manifest.get("rules") or [])
        if kind == "ClusterRole" and name == HOME_IN_TWIN_NAMESPACE_ROLE and wildcards:
            found.append(
                Violation(
                    HOME_IDENTITY_LEAST_PRIVILEGE,
                    f"{cluster_id}: ClusterRole {name} (the home identity's rights in twin namespaces) asks for "
                    f"`*` ({', '.join(wildcards)}); name each custom resource in liqo:reflection.customResources",
                )
            )
    for cluster_id, manifest in objects:
        kind = manifest.get("kind")
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        meta = manifest.get("metadata") or {}
        subjects = manifest.get("subjects") or []
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == identity for s in subjects):
            continue
        scope = f"{meta['namespace']}/" if meta.get("namespace") else ""
        where = f"{cluster_id}: {kind} {scope}{meta.get('name')}"
        ref = manifest.get("roleRef") or {}
        cluster_role = roles.get((cluster_id, "ClusterRole", None, ref.get("name")))
        if kind == "ClusterRoleBinding" and cluster_role and _reads_named_crds_only(cluster_role.get("rules") or []):
            continue
        if kind == "ClusterRoleBinding":
            found.append(
                Violation(
                    HOME_IDENTITY_LEAST_PRIVILEGE, f"{where} binds the home identity {identity} cluster-wide; {fix}"
                )
            )
            continue
        if meta.get("namespace") != tenant:
            found.append(
                Violation(
                    HOME_IDENTITY_LEAST_PRIVILEGE,
                    f"{where} binds the home identity {identity} outside its tenant namespace {tenant}; {fix}",
                )
            )
            continue
        ref_ns = meta.get("namespace") if ref.get("kind") == "Role" else None
        role = roles.get((cluster_id, ref.get("kind"), ref_ns, ref.get("name")))
        if role is None:
            found.append(
                Violation(
                    HOME_IDENTITY_LEAST_PRIVILEGE,
                    f"{where} binds the home identity to {ref.get('kind')} {ref.get('name')}, which the stack "
                    f"does not declare, so its rules cannot be checked; {fix}",
                )
            )
            continue
        excess = _excess(role.get("rules") or [])
        if excess:
            found.append(
                Violation(
                    HOME_IDENTITY_LEAST_PRIVILEGE,
                    f"{where} grants the home identity {identity} more than the runtime needs: "
                    f"{', '.join(excess)}; {fix}",
                )
            )
    return found


def reserved_namespace_names(
    config: StackConfig, reserved: Iterable[str] = DEFAULT_RESERVED_NAMESPACES
) -> list[Violation]:
    found = []
    for index, ns in enumerate(config.namespaces):
        found += reserved_twin_name(ns, f"liqo:namespaces[{index}]", config.home.cluster_id, reserved)
    return found


def reserved_twin_name(
    ns: NamespaceOffloadingConfig, path: str, home_cluster_id: str, reserved: Iterable[str]
) -> list[Violation]:
    """One offloaded namespace (`path`: where it is declared; `liqo:` alone: the settings are its own) whose
    twins would take a reserved name."""
    within = path if path.endswith(":") else f"{path}."
    if ns.namespace_mapping_strategy is NamespaceMappingStrategy.ENFORCE_SAME_NAME:
        remote, setting = ns.name, f"{within}namespaceMappingStrategy"
    elif ns.namespace_mapping_strategy is NamespaceMappingStrategy.SELECTED_NAME and ns.remote_namespace_name:
        remote, setting = ns.remote_namespace_name, f"{within}remoteNamespaceName"
    else:
        return []
    matched = next((p for p in reserved if fnmatch.fnmatchcase(remote, p)), None)
    if not matched:
        return []
    return [
        Violation(
            RESERVED_NAMESPACE_SAME_NAME,
            f"{setting}: namespace {ns.name} would be offloaded onto {remote!r} in the foreign clusters, "
            f"a reserved name ({matched}). Fix: use namespaceMappingStrategy DefaultName (twin "
            f"{ns.name}-{home_cluster_id}) or SelectedName with another remoteNamespaceName.",
        )
    ]


def offloaded_namespace_violations(
    ns: NamespaceOffloadingConfig,
    home_cluster_id: str,
    offered_clusters: int | None,
    reserved: Iterable[str] = DEFAULT_RESERVED_NAMESPACES,
) -> list[Violation]:
    """The package's OffloadedNamespace component (an application team's stack, docs/package.md): the checks
    of a stack's namespaces, on its own properties (`liqo:` + property: renamed by the caller).
    `offered_clusters`: how many clusters its offeredClusters lists; None: not given (unknown)."""
    found = reserved_twin_name(ns, "liqo:", home_cluster_id, reserved)
    if not ns.cluster_selector and (offered_clusters is None or offered_clusters > 1):
        clusters = f"all {offered_clusters}" if offered_clusters is not None else "all the"
        found.append(
            Violation(
                NAMESPACE_WITHOUT_SELECTOR,
                f"liqo:clusterSelector: namespace {ns.name} has no cluster selector, so it is offloaded to {clusters} "
                "clusters its home peers (and to any peered later). Set a selector if that is not meant.",
            )
        )
    return found


# -- advisory -------------------------------------------------------------------------------------


def advisories(config: StackConfig, max_sharing_percentage: int = DEFAULT_MAX_SHARING_PERCENTAGE) -> list[Violation]:
    found = []
    if len(config.foreign_clusters) > 1:
        for index, ns in enumerate(config.namespaces):
            if not ns.cluster_selector:
                found.append(
                    Violation(
                        NAMESPACE_WITHOUT_SELECTOR,
                        f"liqo:namespaces[{index}].clusterSelector: namespace {ns.name} has no cluster selector, so "
                        f"it is offloaded to all {len(config.foreign_clusters)} peered clusters (and to any peered "
                        f"later). Set a selector if that is not meant.",
                    )
                )
    if config.sharing_percentage > max_sharing_percentage:
        found.append(
            Violation(
                SHARING_PERCENTAGE_HIGH,
                f"liqo:sharingPercentage: {config.sharing_percentage}% is above {max_sharing_percentage}%: foreign "
                f"clusters keep almost nothing for their own workloads.",
            )
        )
    for index, foreign in enumerate(config.foreign_clusters):
        if foreign.sharing_percentage is not None and foreign.sharing_percentage > max_sharing_percentage:
            found.append(
                Violation(
                    SHARING_PERCENTAGE_HIGH,
                    f"{_foreign_path(index)}.sharingPercentage: {foreign.sharing_percentage}% of "
                    f"{foreign.cluster_id} is above {max_sharing_percentage}%: it keeps almost nothing for its own "
                    f"workloads.",
                )
            )
    if "failure_threshold" not in config.virtual_kubelet.model_fields_set:
        clusters = ", ".join(f.cluster_id for f in config.foreign_clusters)
        found.append(
            Violation(
                NO_HEALTH_CHECK_THRESHOLD,
                f"liqo:virtualKubelet.failureThreshold is not set: the health checks of {clusters} use the default "
                f"({config.virtual_kubelet.failure_threshold} failures). Declare it so the time to NotReady is a "
                f"decision.",
            )
        )
    return found


# -- what the foreign clusters offer (live): the only input not in the stack config ------------------


def offered_by(config: StackConfig) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Per foreign cluster: its published advertisement to this home cluster (what the virtual kubelet
    will share from), or, before the first install, its nodes' allocatable minus what runs there.
    Returns also one line per cluster that could not be read (its check is skipped, never guessed)."""
    import yaml
    from lightkube import KubeConfig
    from lightkube.resources.core_v1 import Node, Pod

    from liqo_stack import kube
    from runtime.api.advertisement import as_quantity, available_for, loads_of
    from runtime.api.nodeaccess import NodeRules
    from runtime.api.resources import ResourceAdvertisementResource

    home_id = config.home.cluster_id
    offered: dict[str, dict[str, str]] = {}
    unread: list[str] = []
    for index, foreign in enumerate(config.foreign_clusters):
        try:
            client = kube.client(KubeConfig.from_dict(yaml.safe_load(foreign.kubeconfig_to_read())))
            try:
                published = client.get(
                    ResourceAdvertisementResource, foreign.cluster_id, namespace=names.tenant_namespace(home_id)
                )
                offered[foreign.cluster_id] = dict((published.get("spec") or {}).get("resources") or {})
                continue
            except Exception as err:
                if not is_not_found(err):  # no advertisement yet, or no CRD yet (before the first install)
                    raise
            nodes, loads = list(client.list(Node)), loads_of(client.list(Pod, namespace="*"))
            usable = NodeRules.of(foreign.nodes.access())  # the nodes the home may use there
            available = available_for(home_id, nodes, loads, usable)
            offered[foreign.cluster_id] = {r: as_quantity(a) for r, a in available.items()}
        except Exception as err:  # an unreachable cluster must not hide the other checks
            unread.append(f"{_foreign_path(index)} ({foreign.cluster_id}): cannot read what it offers: {err}")
    return offered, unread


def is_not_found(err: Exception) -> bool:
    """A 404, whether lightkube decoded a Status (ApiError) or the kind itself is unknown (no CRD yet)."""
    response = getattr(err, "response", None)
    return getattr(response, "status_code", None) == 404
