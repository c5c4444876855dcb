"""The package's components (docs/package.md), for Python programs as for the provider that serves them to
the other languages: the same classes, constructed from the same properties (camelCase, as the schema
names them), checked by the same models.

- `Stack`: everything in one (the `liqo:` settings);
- `Home`: the installation at home (the home control plane);
- `Peering`: one foreign cluster, peered with its admin kubeconfig (its side declared here too) or through
  the `identityKubeconfig` its own stack (`ForeignSide`) issued;
- `ForeignSide`: a foreign cluster's own half, for one or more homes;
- `OffloadedNamespace`: one namespace, offloaded by an application team's stack through its provider of
  the home cluster.

A bad property fails the component before any resource is registered, naming its path in the program
(`resources.<name>.properties.<path>`, as a YAML program writes it).

    from liqo_stack.declaring.package.components import Home, Peering
    home = Home("home", {"home": {"clusterId": "home", "kubeconfigPath": "..."}})
    Peering("foreign-1", {"home": home.settings, "controlPlane": home.control_plane,
                          "foreignCluster": {"clusterId": "foreign-1", "identityKubeconfig": ...}})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import pulumi
import pulumi_kubernetes as k8s
from pulumi.errors import InputPropertiesError, InputPropertyErrorDetails
from pulumi.resource import DependencyResource

from liqo_stack.declaring import config as stack_config
from liqo_stack.declaring import manifests
from liqo_stack.declaring.components import ForeignAgent, HomeControlPlane
from liqo_stack.declaring.components import Peering as PeeringParts
from liqo_stack.declaring.components.cluster import TIMEOUT_SECONDS, WAIT_FOR, Cluster, annotated, provider
from liqo_stack.declaring.components.destroy_guard import DestroyGuard, stack_identity
from liqo_stack.declaring.components.home import HomePlaneDependencies
from liqo_stack.declaring.components.offloading import offloading_spec
from liqo_stack.declaring.package.parts import (
    ForeignSideSettings,
    HomeSettings,
    OffloadedNamespaceSettings,
    PeeringSettings,
    parse_part,
    part_config,
)
from liqo_stack.declaring.package.properties import (
    PROVIDERS,
    SETTINGS,
    config_of,
    properties_path,
    whole_numbers,
    without_secrets,
)
from liqo_stack.declaring.package.schema import (
    FOREIGN_SIDE,
    HOME,
    OFFLOADED_NAMESPACE,
    OUTPUTS,
    PART_OUTPUTS,
    PEERING,
    SECRET_OUTPUTS,
    STACK,
)
from liqo_stack.declaring.plan import virtual_nodes_plan
from liqo_stack.declaring.program import _check_claims, _foresee_floors, _kubeconfig, declare, declare_foreign_side


def _providers(name: str, given: Any, allowed: list[str] | None = None) -> dict[str, k8s.Provider]:
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise stack_config.ConfigError(f"{properties_path(name)}{PROVIDERS}: is not a map of cluster id to provider")
    wrong = sorted(cid for cid, value in given.items() if not isinstance(value, pulumi.ProviderResource))
    if wrong:
        raise stack_config.ConfigError(
            f"{properties_path(name)}{PROVIDERS}.{wrong[0]}: is not a kubernetes provider (pass a kubernetes.Provider)"
        )
    unknown = sorted(set(given) - set(allowed)) if allowed is not None else []
    if unknown:
        raise stack_config.ConfigError(
            f"{properties_path(name)}{PROVIDERS}.{unknown[0]}: this component reaches clusters {allowed} only"
        )
    return dict(given)


def _refused(err: stack_config.ConfigError, name: str) -> InputPropertiesError:
    """The engine shows each property error with its path; the message keeps the full explanation."""
    prefix = properties_path(name)
    errors: list[InputPropertyErrorDetails] = []
    for line in str(err).splitlines():
        path, found, reason = line.strip().partition(": ")
        if found and path.startswith(prefix):
            errors.append({"property_path": path.removeprefix(prefix), "reason": reason})
    return InputPropertiesError(str(err), errors or None)


def _holds_outputs(value: Any) -> bool:
    if isinstance(value, pulumi.Output):
        return True
    if isinstance(value, Mapping):
        return any(_holds_outputs(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_outputs(item) for item in value)
    return False


class _Component(pulumi.ComponentResource):
    """A component declared from its properties once they are known (secrets and values of other
    resources arrive as outputs); its outputs are `OUTPUT_NAMES`."""

    TYPE: str
    OUTPUT_NAMES: tuple[str, ...]

    def __init__(
        self,
        name: str,
        properties: Mapping[str, Any],
        opts: pulumi.ResourceOptions | None = None,
        *,
        guard_destroy: bool = True,
    ):
        """`guard_destroy`: declare the destroy guards (components/destroy_guard.py); the package's provider
        cannot (a dynamic resource runs in the program's language host, not in a YAML or TypeScript one)."""
        super().__init__(self.TYPE, name, None, opts)
        self.guard_destroy = guard_destroy
        self.outputs: dict[str, pulumi.Output[Any]]

        def declared(known: Mapping[str, Any]) -> Mapping[str, Any]:
            return self._checked(name, known)

        if _holds_outputs(properties):
            # a secret property (a kubeconfig) makes the whole plan secret: only the secret outputs stay so
            plan = pulumi.Output.from_input(properties).apply(declared)
            self.outputs = {
                key: pulumi.Output.secret(plan[key]) if key in SECRET_OUTPUTS else pulumi.Output.unsecret(plan[key])
                for key in self.OUTPUT_NAMES
            }
        else:
            plan_now = declared(properties)
            self.outputs = {key: pulumi.Output.from_input(plan_now[key]) for key in self.OUTPUT_NAMES}
        self.register_outputs(self.outputs)

    def _checked(self, name: str, properties: Mapping[str, Any]) -> Mapping[str, Any]:
        try:
            return self._declare(name, properties)
        except stack_config.ConfigError as err:
            raise _refused(err, name) from None

    def _declare(self, name: str, properties: Mapping[str, Any]) -> Mapping[str, Any]:
        raise NotImplementedError

    def _settings(self, model: Any, name: str, properties: Mapping[str, Any]) -> Any:
        settings = {key: whole_numbers(value) for key, value in properties.items() if key != PROVIDERS}
        return parse_part(model, settings, properties_path(name))

    @property
    def settings(self) -> pulumi.Output[Any]:
        """What the component was declared from, kubeconfig contents left out."""
        return self.outputs[SETTINGS]


class Stack(_Component):
    """`liqo-stack:index:Stack`: the home stack, declared from the `liqo:` settings as properties."""

    TYPE = STACK
    OUTPUT_NAMES = tuple(OUTPUTS)

    def _declare(self, name: str, properties: Mapping[str, Any]) -> Mapping[str, Any]:
        config = config_of(name, properties)
        stack = declare(
            config,
            _providers(name, properties.get(PROVIDERS)),
            pulumi.ResourceOptions(parent=self),
            where=properties_path(name),
            guard_destroy=self.guard_destroy,
        )
        return {**stack.plan, SETTINGS: without_secrets(properties)}


class Home(_Component):
    """`liqo-stack:index:Home`: the home control plane (CRDs, controller-manager, webhooks), from the home
    settings of a stack config. Its `settings` and `controlPlane` outputs are what a `Peering` takes."""

    TYPE = HOME
    OUTPUT_NAMES = tuple(PART_OUTPUTS[HOME])

    def _declare(self, name: str, properties: Mapping[str, Any]) -> Mapping[str, Any]:
        where = properties_path(name)
        config = self._settings(HomeSettings, name, properties)  # its checks across peerings run in each Peering
        home_id = config.home.cluster_id
        own = _providers(name, properties.get(PROVIDERS), [home_id]).get(home_id)
        kubeconfig = _kubeconfig(config.home, f"{where}home", own is not None)
        child = pulumi.ResourceOptions(parent=self)
        home = Cluster(home_id, own or provider(home_id, cast(pulumi.Output[str], kubeconfig), child), kubeconfig)
        plane = HomeControlPlane("home", home, config.runtime, config.on_demand.args(), opts=child)
        # the order a Peering reads them in (HomePlaneDependencies): namespace, controller-manager, the rest
        control_plane = pulumi.Output.all(
            plane.namespace.urn, plane.controller_manager.urn, *(r.urn for r in [*plane.crds, *plane.webhooks])
        )
        if self.guard_destroy and kubeconfig is not None:
            DestroyGuard(f"{name}-destroy-guard", home_kubeconfig=kubeconfig, guarded=[plane], opts=child)
        return {
            "homeClusterId": home_id,
            "runtimeMode": config.runtime.mode.value,
            "controlPlane": control_plane,
            SETTINGS: without_secrets(properties),
        }

    @property
    def control_plane(self) -> pulumi.Output[Any]:
        return self.outputs["controlPlane"]


class Peering(_Component):
    """`liqo-stack:index:Peering`: one foreign cluster's peering with a Home of the same stack."""

    TYPE = PEERING
    OUTPUT_NAMES = tuple(PART_OUTPUTS[PEERING])

    def _declare(self, name: str, properties: Mapping[str, Any]) -> Mapping[str, Any]:
        where = properties_path(name)
        settings = self._settings(PeeringSettings, name, properties)
        config = part_config(settings, where)
        foreign_config = config.foreign_clusters[0]
        home_id, foreign_id = config.home.cluster_id, foreign_config.cluster_id
        split = foreign_config.peers_through_issued_identity
        allowed = [home_id] if split else [home_id, foreign_id]
        given = _providers(name, properties.get(PROVIDERS), allowed)
        home_kubeconfig = _kubeconfig(config.home, f"{where}home.home", home_id in given)
        if home_kubeconfig is None and config.virtual_kubelet.home_api_server_address is None:
            raise stack_config.ConfigError(
                f"{where}home.virtualKubelet.homeApiServerAddress: the home has no kubeconfig in these properties: "
                "set where offloaded pods reach the home API server (host:port)"
            )
        child = pulumi.ResourceOptions(parent=self)

        def cluster(cid: str, kubeconfig: pulumi.Output[str] | None) -> Cluster:
            own = given.get(cid)
            made = own or provider(cid, cast(pulumi.Output[str], kubeconfig), child, resource_name=f"{name}-{cid}")
            return Cluster(cid, made, kubeconfig)

        home = cluster(home_id, home_kubeconfig)
        foreign, agent = None, None
        if split:
            foreign_config.identity_kubeconfig_text()  # a missing file fails here, naming the property
        else:
            foreign = cluster(foreign_id, _kubeconfig(foreign_config, f"{where}foreignCluster", foreign_id in given))
            _check_claims(foreign_config, [home_id], f"{where}foreignCluster")  # takes over nothing it did not make
            custom = config.reflection.custom_reflection()
            agent = ForeignAgent(foreign_id, foreign, config.runtime, custom_resources=custom, opts=child)
        urns = settings.control_plane
        if len(urns) < 2:
            raise stack_config.ConfigError(
                f"{where}controlPlane: is required: the Home's controlPlane output (the peering is made after the "
                "home control plane and removed before it)"
            )
        deps = [DependencyResource(urn) for urn in urns]
        plane = HomePlaneDependencies(namespace=deps[0], crds=deps[1:], controller_manager=deps[1])
        peering = PeeringParts(
            f"{home_id}-{foreign_id}",
            config=config,
            foreign_config=foreign_config,
            home=home,
            foreign=foreign,
            home_plane=plane,
            agent=agent,
            opts=child,
        )
        if self.guard_destroy and home_kubeconfig is not None:
            guarded = [peering, *([agent] if agent else [])]
            DestroyGuard(
                f"{name}-destroy-guard",
                home_kubeconfig=home_kubeconfig,
                guarded=guarded,
                cluster=foreign_id,
                opts=child,
            )
        if pulumi.runtime.is_dry_run():
            _foresee_floors(config, {foreign_id: peering})
        return {
            "clusterId": foreign_id,
            "foreignCluster": virtual_nodes_plan(config)[foreign_id],
            SETTINGS: without_secrets(properties),
        }


class ForeignSide(_Component):
    """`liqo-stack:index:ForeignSide`: a foreign cluster's own half, for each home it serves: a tenant, an
    identity (its kubeconfig in `homeIdentities`, a secret), a floor and a grant."""

    TYPE = FOREIGN_SIDE
    OUTPUT_NAMES = tuple(PART_OUTPUTS[FOREIGN_SIDE])

    def _declare(self, name: str, properties: Mapping[str, Any]) -> Mapping[str, Any]:
        settings = self._settings(ForeignSideSettings, name, properties)
        config = settings.stack_config()
        given = _providers(name, properties.get(PROVIDERS), [config.foreign_side.cluster_id])
        _, identities = declare_foreign_side(
            config, given, pulumi.ResourceOptions(parent=self), where=properties_path(name).removesuffix(".")
        )
        return {
            "foreignCluster": config.foreign_side.cluster_id,
            "homeIdentities": pulumi.Output.secret(identities),
            SETTINGS: without_secrets(properties),
        }


# How long an OffloadedNamespace waits for the home's controller-manager (the platform's runtime) to take up
# its offloading before `pulumi up` fails, saying what it waited for.
OFFLOADING_WAIT_SECONDS = 120


class OffloadedNamespace(_Component):
    """`liqo-stack:index:OffloadedNamespace`: one namespace offloaded (a NamespaceOffloading at home), given
    only a provider of the home cluster (`providers.<home cluster id>`). The namespace is ensured and never
    deleted; removing the component unoffloads it (its twins go, with their pods)."""

    TYPE = OFFLOADED_NAMESPACE
    OUTPUT_NAMES = tuple(PART_OUTPUTS[OFFLOADED_NAMESPACE])

    def _declare(self, name: str, properties: Mapping[str, Any]) -> Mapping[str, Any]:
        where = properties_path(name)
        settings = self._settings(OffloadedNamespaceSettings, name, properties)
        home_id = settings.home_cluster_id
        own = _providers(name, properties.get(PROVIDERS), [home_id]).get(home_id)
        if own is None:
            raise stack_config.ConfigError(
                f"{where}{PROVIDERS}.{home_id}: is required: the program's kubernetes.Provider of the home cluster"
            )
        home = Cluster(home_id, own)
        namespace = home.object(
            f"namespace-{settings.name}",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": settings.name}},
            pulumi.ResourceOptions(parent=self, retain_on_delete=True),  # the team's: never deleted here
        )
        # Created once the home's controller has taken it up (its phase written): by then the namespace is
        # labelled for the pod webhook, so the team's pods made after it (a Deployment depending on this
        # component) are offloaded per its strategy, never admitted as local ones in the meantime.
        home.object(
            f"offloading-{settings.name}",
            annotated(
                manifests.namespace_offloading(settings.name, offloading_spec(settings.offloading()), stack_identity()),
                {WAIT_FOR: "jsonpath={.status.offloadingPhase}", TIMEOUT_SECONDS: str(OFFLOADING_WAIT_SECONDS)},
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[namespace]),
        )
        return {
            "namespace": settings.name,
            "plan": settings.plan(),
            SETTINGS: without_secrets(properties),
        }


COMPONENTS: dict[str, type[_Component]] = {
    component.TYPE: component for component in (Stack, Home, Peering, ForeignSide, OffloadedNamespace)
}

__all__ = ["COMPONENTS", "ForeignSide", "Home", "OffloadedNamespace", "Peering", "Stack"]
