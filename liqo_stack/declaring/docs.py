"""Generated documentation: `python -m liqo_stack.declaring.docs config > docs/configuration.md`, and
`python -m liqo_stack.declaring.docs identities > docs/identities.md`.

The configuration reference is written from the pydantic models of `liqo_stack/declaring/config.py` (their
field types, defaults, constraints and descriptions), so the page cannot say anything the program
does not accept; `tests/unit/test_docs.py` fails when the committed page is stale.
"""

from __future__ import annotations

import json
import sys
import types
import typing
from collections.abc import Iterator
from enum import Enum
from typing import Any

from annotated_types import Ge, Le, MaxLen, MinLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from liqo_stack.declaring import config, manifests
from runtime.api import format_duration, names

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


PAGES = {"config": config_reference, "identities": identities_reference}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in PAGES:
        print(f"usage: {REGENERATE}, or {REGENERATE_IDENTITIES}", file=sys.stderr)
        return 2
    sys.stdout.write(PAGES[argv[0]]())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
