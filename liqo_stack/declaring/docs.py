"""Generated documentation: `python -m liqo_stack.declaring.docs config > docs/configuration.md`,
`python -m liqo_stack.declaring.docs identities > docs/identities.md`, and the tables of
docs/security.md, rewritten in place: `python -m liqo_stack.declaring.docs security`.

The configuration reference is written from the pydantic models of `liqo_stack/declaring/config.py` (their
field types, defaults, constraints and descriptions), so the page cannot say anything the program
does not accept; `tests/unit/test_docs.py` fails when the committed page is stale.
"""

from __future__ import annotations

import json
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from annotated_types import Ge, Le, MaxLen, MinLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from liqo_stack.declaring import config, manifests
from runtime.api import CustomResourceReflection, format_duration, names
from runtime.api.quota import CHECKED_UNDER, LimitsEnforcement

REGENERATE = "python -m liqo_stack.declaring.docs config > docs/configuration.md"

HEADER = f"""# Configuration reference

<!-- GENERATED from the pydantic models of liqo_stack/declaring/config.py: do not edit by hand.
     Regenerate with: {REGENERATE} -->

The stack reads one config namespace, `liqo:`, from `Pulumi.<stack>.yaml`. It is validated as a
whole before any resource is registered: a bad value fails `pulumi preview` with its path, e.g.
`liqo:foreignClusters[1].sharingPercentage: Input should be less than or equal to 100 (got 120)`,
and a setting that is not listed here is refused (`is not a known setting`). Set nested keys with
`pulumi config set --path`, e.g. `pulumi config set --path liqo:runtime.mode cluster`.

Durations (`duration`) are written as in kubectl: `10s`, `2m`, `1h30m`, or a bare number of seconds.
Example stack: [`Pulumi.dev.yaml`](../Pulumi.dev.yaml); what the settings do: [Declaring a
stack](stack.md).
"""

# Constrained string types of config.py, by the validator that defines them.
_VALIDATED = {
    "_dns_label": "cluster id (DNS label)",
    "_network": "CIDR",
    "_check_labels": "labels",
    "_check_quantities": "quantities",
    "_api_server_address": "API server address",
    "_image_reference": "image reference",
    "_image_digest": "image digest",
    "_dns_subdomain": "DNS subdomain",
    "_whole_seconds": "duration",
    "_api_group": "API group",
    "_api_version": "API version",
    "_resource_name": "resource (plural)",
    "_pool_name": "pool name (DNS label, up to 32)",
    "_twin_name_pattern": "namespace name or pattern",
}
# Kubernetes core types the config takes as they are.
_CORE = {
    "Taint": "Taint (`key`, `value`, `effect`: NoSchedule, PreferNoSchedule or NoExecute)",
    "NodeSelector": "core NodeSelector (`nodeSelectorTerms`)",
}


def _validated_name(metadata: list[Any]) -> str | None:
    for item in metadata:
        func = getattr(item, "func", None)
        qualname = getattr(func, "__qualname__", "")
        for name, shown in _VALIDATED.items():
            if qualname == name or qualname.startswith(f"{name}."):
                return shown
    return None


def _type_name(annotation: Any, metadata: list[Any] | None = None) -> str:
    """How the reference names a type, with its bounds (e.g. `integer (1 to 100)`)."""
    return _bare_type_name(annotation, metadata or []) + _bounds(metadata or [])


def _bare_type_name(annotation: Any, metadata: list[Any]) -> str:
    shown = _validated_name(metadata)
    if shown:
        return shown
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0], list(annotation.__metadata__))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args if a is not type(None))
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"map of {_type_name(args[0])} to {_type_name(args[1])}"
    if origin is typing.Literal:
        return " | ".join(f"`{a}`" for a in args)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " | ".join(f"`{m.value}`" for m in annotation)
    if isinstance(annotation, type) and annotation.__name__ in _CORE:
        return _CORE[annotation.__name__]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    return {str: "string", int: "integer", bool: "boolean", float: "number"}.get(annotation, str(annotation))


def _bounds(metadata: list[Any]) -> str:
    found: dict[str, Any] = {}
    flat = [inner for item in metadata for inner in (item.metadata if isinstance(item, FieldInfo) else [item])]
    for item in flat:
        if isinstance(item, Ge):
            found["min"] = item.ge
        elif isinstance(item, Le):
            found["max"] = item.le
        elif isinstance(item, MinLen):
            found["min items"] = item.min_length
        elif isinstance(item, MaxLen):
            found["max items"] = item.max_length
    if "min" in found and "max" in found:
        return f" ({found['min']} to {found['max']})"
    return "".join(f" ({key} {value})" for key, value in found.items())


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "see below"
    else:
        value = info.default
    if value is None or value is PydanticUndefined:
        return "-"
    if isinstance(value, Enum):
        value = value.value
    if _validated_name(info.metadata) == "duration":
        return f"`{format_duration(value)}`"
    return f"`{json.dumps(value)}`" if not isinstance(value, str) else f"`{value}`"


def _model_of(annotation: Any) -> tuple[type[config.ConfigModel], str] | None:
    """The config model a field holds (directly, in a list or as map values), with the path suffix."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _model_of(args[0])
    if origin in (typing.Union, types.UnionType):
        models = [m for m in map(_model_of, args) if m]
        return models[0] if models else None
    if origin is list:
        inner = _model_of(args[0])
        return (inner[0], "[]" + inner[1]) if inner else None
    if origin is dict:
        inner = _model_of(args[1])
        keys = typing.get_args(args[0])
        return (inner[0], ".<" + ("|".join(keys) if keys else "name") + ">" + inner[1]) if inner else None
    if isinstance(annotation, type) and issubclass(annotation, config.ConfigModel):
        return annotation, ""
    return None


def _fields(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo]]:
    for name, info in model.model_fields.items():
        yield (info.alias or name), info


def _sections(model: type[BaseModel], path: str) -> Iterator[tuple[str, type[BaseModel]]]:
    yield path, model
    for key, info in _fields(model):
        nested = _model_of(info.annotation)
        if nested:
            yield from _sections(nested[0], f"{path}.{key}{nested[1]}" if path else f"{key}{nested[1]}")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


FOREIGN_SIDE_HEADER = """# A foreign cluster's own stack

A foreign cluster's admins may declare its side in a stack of their own, with their own credentials:
its `liqo:` config has `foreignSide` (and optionally `runtime`, as above) instead of `home` and
`foreignClusters`. Its output `homeIdentities` holds, per home it serves, the kubeconfig that home's
stack sets as `liqo:foreignClusters[].identityKubeconfig` (see [security.md](security.md)).
"""


def _models() -> Iterator[tuple[str, type[BaseModel]]]:
    """Every section: a home stack's settings, then a foreign side's own (its runtime is the same)."""
    yield from _sections(config.StackConfig, "")
    yield "", config.ForeignSideStackConfig  # a marker: the foreign side's part starts
    yield from _sections(config.ForeignSide, "foreignSide")


def config_reference() -> str:
    """The configuration reference page (docs/configuration.md)."""
    out = [HEADER]
    for path, model in _models():
        if model is config.ForeignSideStackConfig:
            out.append(FOREIGN_SIDE_HEADER)
            continue
        out.append(f"## `liqo:{path}`\n" if path else "## `liqo:` (top level)\n")
        if model.__doc__ and model is not config.ConfigModel:
            out.append(" ".join(model.__doc__.split()) + "\n")
        out.append("| key | type | default | description |\n| --- | --- | --- | --- |")
        for key, info in _fields(model):
            type_name = _type_name(info.annotation, list(info.metadata))
            description = info.description or ""
            if not description:
                raise ValueError(f"liqo:{path}.{key} has no description: add description= to its Field")
            out.append(f"| `{key}` | {_cell(type_name)} | {_cell(_default(info))} | {_cell(description)} |")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


REGENERATE_IDENTITIES = "python -m liqo_stack.declaring.docs identities > docs/identities.md"

IDENTITIES_HEADER = f"""# What each identity may do, in each cluster

<!-- GENERATED from the RBAC rules of liqo_stack/declaring/manifests.py: do not edit by hand.
     Regenerate with: {REGENERATE_IDENTITIES} -->

Every right the stack grants, exactly as it declares it; who trusts whom, and what is enforced
beyond RBAC, is in [security.md](security.md). `<home>` is the home cluster's id, `<foreign>` a
foreign cluster's; a twin namespace is one the foreign agent made for a home namespace.
"""


def _identities() -> list[tuple[str, str, str, list[manifests.Manifest]]]:
    """(identity, cluster, where its rules apply, rules), as the stack declares them."""
    home_identity = f"the home identity `{names.home_identity_username('<home>')}`"
    return [
        (
            "controller-manager (`liqo/liqo-controller-manager`)",
            "home",
            "cluster-wide",
            manifests.CONTROLLER_MANAGER_RULES,
        ),
        (
            "controller-manager (`liqo/liqo-controller-manager`)",
            "home",
            "namespace `liqo`",
            manifests.CONTROLLER_MANAGER_NAMESPACE_RULES,
        ),
        (
            "virtual kubelet (`liqo/liqo-virtual-kubelet-<foreign>`)",
            "home",
            "cluster-wide",
            manifests.virtual_kubelet_rules("<foreign>"),
        ),
        (
            "a shard of virtual kubelets (`liqo/liqo-virtual-kubelets-<shard>`, `liqo:runtime.peeringsPerProcess`): "
            "these, and each of its peerings' rules above, bound to it by that peering",
            "home",
            "cluster-wide",
            manifests.VIRTUAL_KUBELET_RULES,
        ),
        ("foreign agent (`liqo/liqo-foreign-agent`)", "foreign", "cluster-wide", manifests.FOREIGN_AGENT_RULES),
        (home_identity, "foreign", "its tenant namespace `liqo-tenant-<home>`", manifests.HOME_IDENTITY_TENANT_RULES),
        (home_identity, "foreign", "each twin namespace of `<home>`", manifests.home_in_twin_namespace_rules()),
    ]


def identities_reference() -> str:
    """The RBAC page (docs/identities.md)."""
    out = [IDENTITIES_HEADER]
    for identity, cluster, scope, rules in _identities():
        out.append(f"## {identity}: {cluster} cluster, {scope}\n")
        out.append("| API groups | resources | verbs | only these names |\n| --- | --- | --- | --- |")
        for rule in rules:
            groups = ", ".join(f"`{g}`" if g else "core" for g in rule.get("apiGroups") or [])
            resources = ", ".join(f"`{r}`" for r in rule.get("resources") or rule.get("nonResourceURLs") or [])
            verbs = ", ".join(rule.get("verbs") or [])
            only = ", ".join(f"`{n}`" for n in rule.get("resourceNames") or []) or "any"
            out.append(f"| {_cell(groups)} | {_cell(resources)} | {_cell(verbs)} | {_cell(only)} |")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# -- docs/security.md: a page written by hand, whose tables are generated ----------------------------
# Each table sits between a marker naming it and END_GENERATED; the page around them is prose.
SECURITY_PAGE = Path(__file__).resolve().parents[2] / "docs" / "security.md"
REGENERATE_SECURITY = "python -m liqo_stack.declaring.docs security"
_GENERATED = re.compile(
    r"^<!-- GENERATED (?P<name>[a-z-]+)[^\n]*-->\n(?P<body>.*?)^<!-- END GENERATED -->$", re.M | re.S
)
GENERATED_MARKER = f"<!-- GENERATED {{name}} from liqo-stack's own objects: do not edit; {REGENERATE_SECURITY} -->"
END_GENERATED = "<!-- END GENERATED -->"
HOME, FOREIGN = "<home>", "<foreign>"


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows)])


def trust_table() -> str:
    """Who holds which credential, and who trusts it (names from runtime/api/names.py)."""
    liqo, tenant, identity = names.LIQO_NAMESPACE, names.tenant_namespace(HOME), names.home_identity_name(HOME)
    token = names.home_identity_token_prefix(HOME)
    rows = [
        (
            "the stack (`pulumi up`)",
            "an admin kubeconfig of each cluster it declares (a foreign side's own stack: of that cluster only)",
            "each cluster's admins, who run it",
        ),
        (
            "the controller-manager",
            f"its ServiceAccount `{liqo}/{names.CONTROLLER_MANAGER}` at home",
            "the home cluster",
        ),
        (
            "a virtual kubelet",
            f"its ServiceAccount `{liqo}/{names.virtual_kubelet_name(FOREIGN)}` at home, and the home identity's "
            f"kubeconfig for its foreign cluster (home Secret `{liqo}/{names.credentials_secret_name(FOREIGN)}`)",
            "the home cluster; the foreign cluster only as far as the home identity goes",
        ),
        (
            "the home identity",
            f"a token of the ServiceAccount `{tenant}/{identity}` of the foreign cluster (its Secret "
            f"`{token}-<random>` there, [rotated](#credentials-that-change) by deleting it)",
            "the foreign cluster, within the limits below",
        ),
        (
            "the foreign agent",
            f"its ServiceAccount `{liqo}/{names.FOREIGN_AGENT}` in the foreign cluster",
            "the foreign cluster",
        ),
    ]
    return _table(("identity", "holds", "trusted by"), rows)


_READ = frozenset({"get", "list", "watch"})
_ALL = _READ | {"create", "update", "patch", "delete"}


def _may(rule: manifests.Manifest) -> str:
    """One RBAC rule in a few words: `manage` (every verb), `read` (get, list, watch), else its verbs; a
    resource of a named API group as kubectl names it (`ingresses.networking.k8s.io`)."""
    verbs = set(rule.get("verbs") or [])
    groups = [f".{g}" if g else "" for g in rule.get("apiGroups") or [""]]
    resources = ", ".join(f"`{r}{g}`" for g in groups for r in rule.get("resources") or [])
    if verbs == _ALL:
        said = "manage"
    elif verbs == _READ:
        said = "read"
    elif verbs > _READ:
        said = "read, " + ", ".join(v for v in rule["verbs"] if v not in _READ)
    else:
        said = ", ".join(rule.get("verbs") or [])
    only = rule.get("resourceNames")
    return f"{said} {resources}" + (f" (only {', '.join(f'`{n}`' for n in only)})" if only else "")


def _home_identity_scopes() -> list[tuple[str, list[manifests.Manifest]]]:
    """Where the home identity's rules apply in a foreign cluster, and the rules (a custom resource type
    opted in, `<type>`, stands for those of liqo:reflection.customResources)."""
    custom = [CustomResourceReflection(group="<group>", version="<version>", resource="<type>")]
    return [
        (f"its tenant namespace `{names.tenant_namespace(HOME)}`", manifests.HOME_IDENTITY_TENANT_RULES),
        (f"each twin namespace of `{HOME}`", manifests.home_in_twin_namespace_rules(custom)),
        (
            "the cluster, by name (with liqo:reflection.customResources)",
            manifests.custom_resource_definition_rules(custom),
        ),
    ]


def home_identity_rights_table() -> str:
    """What the home identity may do in a foreign cluster, from the rules the stack binds it to."""
    rows = [(where, "; ".join(_may(rule) for rule in rules)) for where, rules in _home_identity_scopes()]
    return _table(("in the foreign cluster, in", "the home identity may"), rows)


@dataclass(frozen=True)
class Refusal:
    """Something the home identity may not do: no rule it is bound to grants any of `verbs` on `resource`."""

    said: str
    group: str
    resource: str
    verbs: frozenset[str]
    scopes: tuple[int, ...] = (0, 1, 2)  # of _home_identity_scopes()


REFUSALS = (
    Refusal(
        "create pods (only ShadowPods, which the foreign agent turns into pods)", "", "pods", frozenset({"create"})
    ),
    Refusal("create, change or delete namespaces (its twins are the foreign agent's to make)", "", "namespaces", _ALL),
    Refusal("read or change its Quota", names.GROUP, "quotas", _ALL),
    Refusal(
        "request tokens for itself, or any account (`serviceaccounts/token`): it cannot mint one that outlives a "
        "revocation",
        "",
        "serviceaccounts/token",
        frozenset({"create"}),
    ),
    Refusal("read the Secrets of its tenant namespace (its own token's among them)", "", "secrets", _ALL, scopes=(0,)),
    Refusal("create, change or bind roles and bindings", "rbac.authorization.k8s.io", "*", _ALL | {"bind", "escalate"}),
    Refusal("change the admission policy", "admissionregistration.k8s.io", "*", _ALL),
)


def _grants(rule: manifests.Manifest, refusal: Refusal) -> bool:
    groups, resources, verbs = (set(rule.get(k) or []) for k in ("apiGroups", "resources", "verbs"))
    group = "*" in groups or refusal.group in groups
    resource = "*" in resources or refusal.resource in resources or (refusal.resource == "*" and bool(resources))
    return group and resource and ("*" in verbs or bool(verbs & refusal.verbs))


def home_identity_refusals_table() -> str:
    """What the home identity may not do, each checked against the rules it is bound to: a rule that
    grants one of them fails the generation (and the docs test), naming it."""
    scopes = _home_identity_scopes()
    for refusal in REFUSALS:
        for index in refusal.scopes:
            where, rules = scopes[index]
            granting = [rule for rule in rules if _grants(rule, refusal)]
            if granting:
                raise ValueError(
                    f"docs/security.md says the home identity may not {refusal.said}, but in {where} "
                    f"it is granted {granting[0]}: fix the rule or the claim (liqo_stack/declaring/docs.py)"
                )
    every = "everywhere it is bound (the three above)"
    rows = [
        (refusal.said, every if len(refusal.scopes) == len(scopes) else ", ".join(scopes[i][0] for i in refusal.scopes))
        for refusal in REFUSALS
    ]
    return _table(("the home identity may not", "checked against its rules"), rows)


_CEL_LITERAL = re.compile(r"^'(?P<text>[^']*)'$")


def _cel_message(expression: str) -> str:
    """A CEL message expression (`'a ' + x.y + ' b'`) as text, each value shown as `` `<y>` ``."""
    parts = [part.strip() for part in expression.split(" + ")]
    return "".join(m["text"] if (m := _CEL_LITERAL.match(p)) else f"`<{p.rsplit('.', 1)[-1]}>`" for p in parts)


def admission_policy_table() -> str:
    """The ShadowPod admission policy's validations, as it words a refusal (manifests.shadowpod_policy)."""
    policy = manifests.shadowpod_policy()
    rows = [
        (str(index), v.get("message") or _cel_message(v["messageExpression"]), v.get("reason", "Invalid"))
        for index, v in enumerate(policy["spec"]["validations"], start=1)
    ]
    return _table(("#", "refused, in the policy's words (`<...>`: filled in when it refuses)", "reason"), rows)


def limits_enforcement_table() -> str:
    """What the foreign agent checks under each limitsEnforcement (runtime/api/quota.py)."""
    rows = [
        (f"`{level.value}`" + (" (default)" if level is LimitsEnforcement.SOFT else ""), checked)
        for level, checked in CHECKED_UNDER.items()
    ]
    return _table(("limitsEnforcement", "what is checked"), rows)


SECURITY_TABLES: dict[str, Callable[[], str]] = {
    "trust": trust_table,
    "home-identity-rights": home_identity_rights_table,
    "home-identity-refusals": home_identity_refusals_table,
    "admission-policy": admission_policy_table,
    "limits-enforcement": limits_enforcement_table,
}


def generated_sections(page: str) -> list[str]:
    """The names of the generated tables a page holds, in order."""
    return [m["name"] for m in _GENERATED.finditer(page)]


def with_generated_tables(page: str) -> str:
    """`page` with each of its generated tables written anew; a marker naming no table is an error."""

    def table(found: re.Match[str]) -> str:
        name = found["name"]
        if name not in SECURITY_TABLES:
            raise ValueError(f"{name}: no such generated table (known: {', '.join(SECURITY_TABLES)})")
        return f"{GENERATED_MARKER.format(name=name)}\n{SECURITY_TABLES[name]()}\n{END_GENERATED}"

    return _GENERATED.sub(table, page)


def write_security_tables(path: Path = SECURITY_PAGE) -> None:
    path.write_text(with_generated_tables(path.read_text()))


PAGES = {"config": config_reference, "identities": identities_reference}


def main(argv: list[str]) -> int:
    if argv == ["security"]:  # tables inside a page written by hand: rewritten in place
        write_security_tables()
        return 0
    if len(argv) != 1 or argv[0] not in PAGES:
        print(f"usage: {REGENERATE}, {REGENERATE_IDENTITIES}, or {REGENERATE_SECURITY}", file=sys.stderr)
        return 2
    sys.stdout.write(PAGES[argv[0]]())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
