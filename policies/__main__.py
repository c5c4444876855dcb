"""liqo-stack's policy pack. The checks are pure functions in liqo_stack/foreseeing/policy.py; this file wires them
into pulumi-policy and gives them the stack config, which the engine sends in its ConfigureStack call."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    PolicyPack,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy import policy as policy_module

from liqo_stack.declaring import config as stack_config
from liqo_stack.declaring.package import properties as package
from liqo_stack.declaring.package.parts import OffloadedNamespaceSettings, parse_part
from liqo_stack.declaring.package.schema import OFFLOADED_NAMESPACE
from liqo_stack.foreseeing import policy as checks

# -- the stack config -------------------------------------------------------------------------------
# pulumi-policy 1.21 reads only the tags of ConfigureStack; the engine also sends the stack's config and
# which keys are secret. Keep them: every check is a function of the `liqo:` config.
_STACK: dict[str, Any] = {"config": {}, "secret_keys": [], "stack": ""}
_configure_stack = policy_module._PolicyAnalyzerServicer.ConfigureStack


def _capture_stack(self: Any, request: Any, context: Any) -> Any:
    _STACK.update(config=dict(request.config), secret_keys=list(request.config_secret_keys), stack=request.stack)
    return _configure_stack(self, request, context)


policy_module._PolicyAnalyzerServicer.ConfigureStack = _capture_stack  # type: ignore[method-assign,assignment]


def _component(args: StackValidationArgs) -> Any:
    """The package's `Stack` component (a program in another language: docs/package.md), if any."""
    return next((r for r in args.resources if r.resource_type == package.STACK), None)


def _stack_config(args: StackValidationArgs) -> stack_config.StackConfig | stack_config.ForeignSideStackConfig | None:
    """The `liqo:` stack config; in a program that declares the package's `Stack`, its properties."""
    try:
        component = _component(args)
        if component is not None:  # it shows its settings as an output (the pack sees outputs only)
            return package.config_of(component.name, _plain(dict(component.props))[package.SETTINGS])
        return stack_config.any_from_pulumi_config(_STACK["config"])
    except stack_config.ConfigError:
        return None  # the program itself fails the preview, naming the field
    except Exception:  # a property computed from outputs not known yet: the component declares nothing yet
        return None


def _offloaded_namespaces(args: StackValidationArgs) -> list[tuple[str, OffloadedNamespaceSettings]]:
    """The package's OffloadedNamespace components (an application team's stack): each one's settings."""
    found = []
    for resource in args.resources:
        if resource.resource_type != OFFLOADED_NAMESPACE:
            continue
        try:
            settings = _plain(dict(resource.props))[package.SETTINGS]
            found.append((resource.name, parse_part(OffloadedNamespaceSettings, settings, "")))
        except Exception:  # invalid (the program reports why) or not known yet in this preview
            continue
    return found


def _is_secret(args: StackValidationArgs) -> Callable[[str], bool]:
    """The engine names the secret config keys at the top level (`liqo:foreignClusters` holds a secret when
    any value in it is one); the pack's working directory is the pack, so Pulumi.<stack>.yaml is not at hand.
    The package's schema makes a kubeconfig property secret in every language, whatever the program gives."""
    if _component(args) is not None:
        return lambda _: True
    return checks.is_secret_in(_STACK["secret_keys"])


def _settings(args: StackValidationArgs) -> checks.PolicySettings:
    return checks.PolicySettings.from_policy_config({"all": dict(args.get_config() or {})})


def _report(found: list[checks.Violation], policy: str, report: ReportViolation, args: StackValidationArgs) -> None:
    component = _component(args)
    for violation in found:
        if violation.policy == policy:
            # a package program has no `liqo:` settings: name the component's properties
            message = violation.message
            if component is not None:
                message = package.in_program_terms(message, component.name)
            report(message, None)


def _plain(value: Any) -> Any:
    """pulumi-policy hands properties as read-only proxies (Mapping, Sequence): plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(v) for v in value]
    return value


def _objects(args: StackValidationArgs) -> list[tuple[str, Mapping[str, Any]]]:
    """The Kubernetes objects of the stack (pulumi-kubernetes resources), each with the cluster id of its
    provider (`clusterIdentifier`, which the stack sets to the id of its config; else the provider's name)."""
    objects: list[tuple[str, Mapping[str, Any]]] = []
    for resource in args.resources:
        kind = resource.resource_type
        if not kind.startswith("kubernetes:") or resource.provider is None:
            continue
        try:
            manifest = _plain(dict(resource.props))
            provider = resource.provider
            cluster_id = str((provider.props or {}).get("clusterIdentifier") or provider.name)
        except Exception:  # computed from outputs not known yet: not an RBAC object (those are literal)
            continue
        if isinstance(manifest, dict) and manifest.get("kind"):
            objects.append((cluster_id, manifest))
    return objects


def _config_policy(
    name: str,
    compute: Callable[[stack_config.StackConfig, checks.PolicySettings, StackValidationArgs], list[checks.Violation]],
) -> StackValidationPolicy:
    level, description = checks.POLICIES[name]

    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        namespaces = _offloaded_namespaces(args)
        for component, ns in namespaces:
            offered = len(ns.offered_clusters) if ns.offered_clusters is not None else None
            settings = _settings(args)
            for violation in checks.offloaded_namespace_violations(
                ns, ns.home_cluster_id, offered, settings.reserved_namespaces
            ):
                if violation.policy == name:
                    report(package.in_program_terms(violation.message, component), None)
        if namespaces and _component(args) is None and not any(k.startswith("liqo:") for k in _STACK["config"]):
            return  # an application team's stack: its OffloadedNamespaces are all it declares
        config = _stack_config(args)
        if config is None:
            args.not_applicable("the stack config is invalid (the program reports why)")
            return
        if isinstance(config, stack_config.ForeignSideStackConfig):
            args.not_applicable("a foreign side's stack: this checks a home stack's config")
            return
        _report(compute(config, _settings(args), args), name, report, args)

    return StackValidationPolicy(
        name=name,
        description=description,
        enforcement_level=EnforcementLevel.MANDATORY if level == checks.MANDATORY else EnforcementLevel.ADVISORY,
        validate=validate,
        config_schema=_SCHEMAS.get(name),
    )


def _extended(
    config: stack_config.StackConfig, _: checks.PolicySettings, __: StackValidationArgs
) -> list[checks.Violation]:
    offered, unread = checks.offered_by(config)
    for line in unread:
        print(f"{checks.EXTENDED_RESOURCE_ROUNDS_TO_ZERO}: skipped {line}", flush=True)
    return checks.extended_resources_rounding_to_zero(config, offered)


_SCHEMAS = {
    checks.RESERVED_NAMESPACE_SAME_NAME: PolicyConfigSchema(
        properties={"reservedNamespaces": {"type": "array", "items": {"type": "string"}}}
    ),
    checks.SHARING_PERCENTAGE_HIGH: PolicyConfigSchema(
        properties={"maxSharingPercentage": {"type": "integer", "minimum": 1, "maximum": 100}}
    ),
}


def _least_privilege() -> StackValidationPolicy:
    description = checks.POLICIES[checks.HOME_IDENTITY_LEAST_PRIVILEGE][1]

    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        config = _stack_config(args)
        if config is None:
            args.not_applicable("the stack config is invalid (the program reports why)")
            return
        # a home stack holds its one identity; a foreign side's stack issues one to each home it serves
        homes = (
            [home.cluster_id for home in config.foreign_side.homes]
            if isinstance(config, stack_config.ForeignSideStackConfig)
            else [config.home.cluster_id]
        )
        objects = _objects(args)
        for home_id in homes:
            for violation in checks.home_identity_privileges(home_id, objects):
                report(violation.message, None)

    return StackValidationPolicy(
        name=checks.HOME_IDENTITY_LEAST_PRIVILEGE,
        description=description,
        enforcement_level=EnforcementLevel.MANDATORY,
        validate=validate,
    )


POLICIES: list[Policy] = [
    _config_policy(checks.EXTENDED_RESOURCE_ROUNDS_TO_ZERO, _extended),
    _least_privilege(),
    _config_policy(checks.KUBECONFIG_AS_SECRET, lambda c, _, args: checks.plain_kubeconfigs(c, _is_secret(args))),
    _config_policy(
        checks.RESERVED_NAMESPACE_SAME_NAME, lambda c, s, _: checks.reserved_namespace_names(c, s.reserved_namespaces)
    ),
    *[
        _config_policy(name, lambda c, s, _: checks.advisories(c, s.max_sharing_percentage))
        for name in (
            checks.NAMESPACE_WITHOUT_SELECTOR,
            checks.SHARING_PERCENTAGE_HIGH,
            checks.NO_HEALTH_CHECK_THRESHOLD,
        )
    ],
]

if __name__ == "__main__":
    PolicyPack(name="liqo-stack", policies=POLICIES, enforcement_level=EnforcementLevel.MANDATORY)
