"""The Pulumi program: stack config -> components. `__main__.py` and the tests both run `main()`.

A user's own Pulumi program may run it too, passing the `kubernetes.Provider` it already has for a
cluster (by cluster id) instead of a kubeconfig in the stack config (it is `liqo_stack.main`). Give
each the settings of the stack's own (`liqo_stack.declaring.components.cluster.provider`):
`cluster_identifier` = the cluster id (without it, a new kubeconfig replaces every object through
that provider, CRDs and their objects included), server-side apply, mutable Secrets and ConfigMaps.

    providers = {"home": home_provider, "foreign-1": foreign_provider}
    stack = liqo_stack.main(providers)
    k8s.apps.v1.Deployment(..., opts=pulumi.ResourceOptions(provider=home_provider,
                                                            depends_on=[stack.offloadings["demo"]]))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import pulumi
import pulumi.runtime.config as pulumi_config
import pulumi_kubernetes as k8s
import yaml
from lightkube import KubeConfig

from liqo_stack.declaring import claims
from liqo_stack.declaring import config as stack_config
from liqo_stack.declaring.components import Cluster, ForeignAgent, HomeControlPlane, NamespaceOffloadings, Peering
from liqo_stack.declaring.components.cluster import provider
from liqo_stack.declaring.components.credentials import server_of
from liqo_stack.declaring.components.destroy_guard import DestroyGuard
from liqo_stack.declaring.components.shard import VirtualKubeletShard
from liqo_stack.declaring.components.tenant import ForeignTenant
from liqo_stack.declaring.floor import refused_by_new_floor
from liqo_stack.declaring.plan import refused_twin_names, stack_plan, virtual_kubelet_shards


def load_config() -> stack_config.StackConfig | stack_config.ForeignSideStackConfig:
    """Validate the whole `liqo:` config before any resource is registered: a home stack's, or a foreign
    cluster's side (liqo:foreignSide)."""
    try:
        return stack_config.any_from_pulumi_config(pulumi_config.CONFIG.get() or pulumi_config.get_config_env())
    except stack_config.ConfigError as err:
        raise pulumi.RunError(f"{err}\nFix Pulumi.<stack>.yaml (or `pulumi config set ...`) and run again.") from None


def _foresee_floors(config: stack_config.StackConfig, peerings: Mapping[str, Peering]) -> None:
    """In a preview: the running pods each foreign cluster's new pod-security floor would refuse, named
    by that cluster's API server (liqo_stack/declaring/floor.py); a cluster the stack has no kubeconfig of, or
    that does not answer, is said to be unchecked."""
    for foreign in config.foreign_clusters:
        if not foreign.has_kubeconfig:
            continue
        try:
            kubeconfig = KubeConfig.from_dict(yaml.safe_load(foreign.kubeconfig_text()))
            refused = refused_by_new_floor(kubeconfig, config.home.cluster_id, foreign.pod_security)
        except Exception as err:  # a preview goes on: this is advice, the stack's own diff is the plan
            pulumi.log.info(
                f"{foreign.cluster_id}: the pods a podSecurity of {foreign.pod_security} would refuse were not "
                f"checked: {err}",
                resource=peerings[foreign.cluster_id],
            )
            continue
        for twin, warnings in sorted(refused.items()):
            pulumi.log.warn(
                f"{foreign.cluster_id}: podSecurity {foreign.pod_security} would refuse pods running in twin "
                f"namespace {twin} (they keep running; new ones like them are refused): " + "; ".join(warnings),
                resource=peerings[foreign.cluster_id],
            )


def _check_claims(access: stack_config.ClusterAccess, home_ids: list[str], setting: str) -> None:
    """Before any resource is registered: nothing the stack declares for these homes in that cluster
    takes over an object liqo-stack did not create (liqo_stack/declaring/claims.py). Raises ConfigError."""
    if not access.has_kubeconfig:
        pulumi.log.warn(
            f"{setting}: {access.cluster_id} is reached through the program's own provider: the objects this stack "
            "declares there were not checked for objects it would take over (docs/security.md)"
        )
        return
    problem = claims.check(access.kubeconfig_text(), access.cluster_id, home_ids, setting)
    if problem is not None:
        raise stack_config.ConfigError(problem)


def foreign_side(
    config: stack_config.ForeignSideStackConfig, providers: Mapping[str, k8s.Provider] | None = None
) -> LiqoStack:
    """A foreign cluster's own stack: its agent and admission policy, and for each home it serves a
    tenant, an identity, a floor and a grant; the identities' kubeconfigs are its outputs
    (`homeIdentities`, secrets), which each home's stack sets as identityKubeconfig."""
    try:
        stack, identities = declare_foreign_side(config, providers)
    except stack_config.ConfigError as err:
        raise pulumi.RunError(str(err)) from None
    pulumi.export("homeIdentities", pulumi.Output.secret(identities))
    pulumi.export("foreignCluster", config.foreign_side.cluster_id)
    return stack


def declare_foreign_side(
    config: stack_config.ForeignSideStackConfig,
    providers: Mapping[str, k8s.Provider] | None = None,
    opts: pulumi.ResourceOptions | None = None,
    *,
    where: str = f"{stack_config.CONFIG_NAMESPACE}:foreignSide",
) -> tuple[LiqoStack, dict[str, pulumi.Output[str]]]:
    """Declare a foreign cluster's side from its validated config: `foreign_side()` from the stack config,
    the package's `ForeignSide` component from its properties (`opts`: of the top-level resources; `where`:
    the side's path in error messages). Returns the stack and each home's identity kubeconfig, by home id.
    Raises ConfigError, naming the setting, before any resource is registered."""
    side = config.foreign_side
    given = dict(providers or {})
    unknown = sorted(set(given) - {side.cluster_id})
    if unknown:
        raise stack_config.ConfigError(
            f"providers given for clusters {unknown}: a foreign side declares {side.cluster_id} only"
        )
    kubeconfig = _kubeconfig(side, where, side.cluster_id in given)
    if kubeconfig is None and side.api_server_address is None:
        raise stack_config.ConfigError(
            f"{where}.apiServerAddress: cluster {side.cluster_id} has no kubeconfig in the stack "
            "config: set where the home identities reach its API server (host:port)"
        )
    _check_claims(side, [home.cluster_id for home in side.homes], f"{where}.homes")
    top = opts or pulumi.ResourceOptions()
    own = given.get(side.cluster_id)
    assert own is not None or kubeconfig is not None
    foreign = Cluster(
        side.cluster_id, own or provider(side.cluster_id, cast(pulumi.Output[str], kubeconfig), top), kubeconfig
    )
    agent = ForeignAgent(side.cluster_id, foreign, config.runtime, custom_resources=side.custom_reflection(), opts=top)
    identities = {}
    for home in side.homes:
        tenant = ForeignTenant(
            f"{home.cluster_id}-{side.cluster_id}", foreign, home, agent, side.api_server_address, opts=top
        )
        identities[home.cluster_id] = tenant.side.kubeconfig
        pulumi.log.info(
            f"home cluster {home.cluster_id}: its stack peers with the identity in this stack's output "
            f"homeIdentities.{home.cluster_id} (`pulumi stack output homeIdentities --show-secrets`), set as its "
            f"liqo:foreignClusters[].identityKubeconfig for {side.cluster_id}"
        )
    return LiqoStack(clusters={side.cluster_id: foreign}, offloadings={}), identities


@dataclass(frozen=True)
class LiqoStack:
    """What a program gets back: the clusters (with their providers), the declared offloadings, and the
    resolved plan (liqo_stack/plan.py: the stack's outputs)."""

    clusters: Mapping[str, Cluster]
    offloadings: Mapping[str, pulumi.CustomResource]
    plan: Mapping[str, Any] = field(default_factory=dict)


def _kubeconfig(access: stack_config.ClusterAccess, path: str, has_provider: bool) -> pulumi.Output[str] | None:
    """The cluster's kubeconfig from the config (a secret), checked before any resource is registered;
    without one, what the stack would have read from it must be in the config."""
    if access.has_kubeconfig:
        text = access.kubeconfig_text()
        if isinstance(access, stack_config.ForeignCluster) and access.api_server_address is None:
            server_of(text, access.cluster_id)  # the home identity's kubeconfig points there
        return pulumi.Output.secret(text)
    if not has_provider:
        raise stack_config.ConfigError(
            f"{path}: cluster {access.cluster_id} has no kubeconfig: set kubeconfig (as a secret) or kubeconfigPath, "
            "or pass the program's own kubernetes.Provider for it"
        )
    if isinstance(access, stack_config.ForeignCluster) and access.api_server_address is None:
        raise stack_config.ConfigError(
            f"{path}.apiServerAddress: cluster {access.cluster_id} has no kubeconfig in the stack config: set where "
            "the home identity reaches its API server (host:port)"
        )
    return None


def declare(
    config: stack_config.StackConfig,
    providers: Mapping[str, k8s.Provider] | None = None,
    opts: pulumi.ResourceOptions | None = None,
    *,
    where: str = f"{stack_config.CONFIG_NAMESPACE}:",
    guard_destroy: bool = True,
) -> LiqoStack:
    """Declare a home stack from its validated config: `main()` from the stack config, the package's
    `Stack` component (liqo_stack/declaring/package) from its properties. `providers`: a program's own provider per
    cluster id, used instead of one made from that cluster's kubeconfig; `opts`: of the top-level
    resources (the package parents them to its component); `where`: what error messages put before a
    setting's path; `guard_destroy`: whether to declare the destroy guards (components/destroy_guard.py;
    not in the package's provider). Raises ConfigError, naming the setting, before any resource is
    registered."""
    given = dict(providers or {})
    issued = [f for f in config.foreign_clusters if f.peers_through_issued_identity]  # their side is theirs
    accesses = {config.home.cluster_id: (f"{where}home", config.home)} | {
        f.cluster_id: (f"{where}foreignClusters[{i}]", f)
        for i, f in enumerate(config.foreign_clusters)
        if not f.peers_through_issued_identity
    }
    unknown = sorted(set(given) - set(accesses))
    if unknown:
        raise stack_config.ConfigError(
            f"providers given for clusters {unknown}, which the stack config does not name (or peers through "
            f"an identity their own stack issued): key them by the cluster ids of {where}home and "
            f"{where}foreignClusters ({sorted(accesses)})"
        )
    for foreign_config in issued:
        foreign_config.identity_kubeconfig_text()  # a missing file fails here, naming the setting
    kubeconfigs = {cid: _kubeconfig(access, path, cid in given) for cid, (path, access) in accesses.items()}
    for index, foreign_config in enumerate(config.foreign_clusters):
        if not foreign_config.peers_through_issued_identity:
            _check_claims(foreign_config, [config.home.cluster_id], f"{where}foreignClusters[{index}]")
    if not config.home.has_kubeconfig and config.virtual_kubelet.home_api_server_address is None:
        raise stack_config.ConfigError(
            f"{where}virtualKubelet.homeApiServerAddress: {where}home has no kubeconfig in the stack config: set "
            "where offloaded pods reach the home API server (host:port)"
        )
    top = opts or pulumi.ResourceOptions()
    clusters = {}
    abandonable = {f.cluster_id for f in config.foreign_clusters if f.abandon_unreachable_after is not None}
    for cid, kubeconfig in kubeconfigs.items():
        own = given.get(cid)
        if own is not None:
            clusters[cid] = Cluster(cid, own, kubeconfig)
        elif kubeconfig is not None:
            abandon = cid in abandonable  # its objects there may be dropped from the state on removal
            clusters[cid] = Cluster(cid, provider(cid, kubeconfig, top, delete_unreachable=abandon), kubeconfig)
    home = clusters[config.home.cluster_id]

    home_plane = HomeControlPlane("home", home, config.runtime, config.on_demand.args(), opts=top)
    handlers: list[pulumi.Resource] = [home_plane.controller_manager]
    peerings: dict[str, Peering] = {}
    agents: dict[str, ForeignAgent | None] = {}
    shard_of = virtual_kubelet_shards(config)
    shards = {
        shard: VirtualKubeletShard(shard, config=config, home=home, home_plane=home_plane, opts=top)
        for shard in dict.fromkeys(shard_of.values())
    }
    for foreign_config in config.foreign_clusters:
        foreign = clusters.get(foreign_config.cluster_id)
        agent = None
        if foreign is not None:
            agent = ForeignAgent(
                foreign.cluster_id,
                foreign,
                config.runtime,
                custom_resources=config.reflection.custom_reflection(),
                opts=top,
            )
        else:
            pulumi.log.info(
                f"{foreign_config.cluster_id}: peered through the identity its own stack issued; that stack declares "
                f"its side and must serve home cluster {config.home.cluster_id} (liqo:foreignSide.homes[].clusterId)"
                + (
                    f" with customResources {[c.crd_name for c in config.reflection.custom_reflection()]}"
                    if config.reflection.custom_resources
                    else ""
                )
            )
        peering = Peering(
            f"{config.home.cluster_id}-{foreign_config.cluster_id}",
            config=config,
            foreign_config=foreign_config,
            home=home,
            foreign=foreign,
            home_plane=home_plane,
            agent=agent,
            shard=shards.get(shard_of.get(foreign_config.cluster_id, "")),
            opts=top,
        )
        handlers.append(peering.virtual_kubelet)
        peerings[foreign_config.cluster_id] = peering
        agents[foreign_config.cluster_id] = agent
    offloadings = NamespaceOffloadings(
        "offloadings", home, config.namespaces, home_plane, handlers, config.namespace_selectors, opts=top
    )

    if guard_destroy and home.kubeconfig is not None:
        _guard_destroy(home.kubeconfig, home_plane, list(shards.values()), peerings, agents, top)
    if pulumi.runtime.is_dry_run():
        _foresee_floors(config, peerings)
    for refused in refused_twin_names(config):  # the foreign agent says it too, on the offloading's condition
        pulumi.log.warn(refused, resource=offloadings)
    return LiqoStack(clusters=clusters, offloadings=offloadings.offloadings, plan=stack_plan(config))


def _guard_destroy(
    home_kubeconfig: pulumi.Output[str],
    home_plane: HomeControlPlane,
    shards: list[VirtualKubeletShard],
    peerings: Mapping[str, Peering],
    agents: Mapping[str, ForeignAgent | None],
    top: pulumi.ResourceOptions,
) -> None:
    """A guard for the home control plane and one per peering, each deleted before what it guards: they
    stop the removal while namespaces the stack does not declare are offloaded there."""
    DestroyGuard("destroy-guard-home", home_kubeconfig=home_kubeconfig, guarded=[home_plane, *shards], opts=top)
    for foreign_id, peering in peerings.items():
        agent = agents.get(foreign_id)
        guarded = [peering, *([agent] if agent else [])]
        DestroyGuard(
            f"destroy-guard-{foreign_id}",
            home_kubeconfig=home_kubeconfig,
            guarded=guarded,
            cluster=foreign_id,
            opts=top,
        )


def main(providers: Mapping[str, k8s.Provider] | None = None) -> LiqoStack:
    """Declare the stack from the stack config. `providers`: a program's own provider per cluster id, used
    instead of one made from that cluster's kubeconfig."""
    config = load_config()
    if isinstance(config, stack_config.ForeignSideStackConfig):
        return foreign_side(config, providers)
    try:
        stack = declare(config, providers)
    except stack_config.ConfigError as err:
        raise pulumi.RunError(str(err)) from None
    for key, value in stack.plan.items():
        pulumi.export(key, value)
    return stack
