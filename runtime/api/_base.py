"""Base classes of the API models: camelCase on the wire, CRD facts next to each model."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from runtime.api import names


class ApiModel(BaseModel):
    """A part of an object: camelCase keys, unknown keys ignored (the API server prunes them anyway)."""

    # defer_build: a model's validator is built on its first use, not at import; each runtime process
    # validates one or two of these models, and building them all cost each process 1.4 MB of RSS
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", defer_build=True)

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    def to_apply(self) -> dict[str, Any]:
        """What a server-side apply of this declares: `to_wire()` without the empty maps of the fields
        that may be left out (absent, they read as the same default). Sent empty, a map that the same
        field manager filled before comes back null: structured-merge-diff prunes the entries the
        apply no longer names and leaves null where the map was, which a CRD schema refuses ("must
        be of type object", kubernetes/kubernetes#135841). Left out, the whole field goes, as it was
        before it was ever set. Lists are left as they are: without a list type, a CRD's lists are
        atomic, replaced whole, so an empty one stays empty."""
        return _without_empty_maps(self, self.to_wire())


def _without_empty_maps(model: BaseModel, wire: dict[str, Any]) -> dict[str, Any]:
    """`wire` (`model` on the wire) without the empty maps of its optional fields, nested models first."""
    out = dict(wire)
    for name, info in type(model).model_fields.items():
        key = info.alias or name
        value, sent = getattr(model, name), out.get(key)
        if not isinstance(sent, dict):
            continue
        if isinstance(value, BaseModel):
            sent = _without_empty_maps(value, sent)
        elif isinstance(value, dict):  # a map of models (e.g. a VirtualNode's reflection settings)
            models = {_wire_key(k): v for k, v in value.items() if isinstance(v, BaseModel)}
            sent = {k: _without_empty_maps(models[k], v) if k in models else v for k, v in sent.items()}
        if sent or info.is_required():
            out[key] = sent
        else:
            del out[key]
    return out


def _wire_key(key: Any) -> str:
    return str(key.value if isinstance(key, Enum) else key)


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    json_path: str
    type: Literal["string", "integer", "number", "boolean", "date"] = "string"
    priority: int = 0


@dataclass(frozen=True)
class CrdInfo:
    kind: str
    plural: str
    scope: Literal["Namespaced", "Cluster"] = "Namespaced"
    short_names: tuple[str, ...] = ()
    printer_columns: tuple[PrinterColumn, ...] = field(default=())
    description: str = ""

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def name(self) -> str:
        return f"{self.plural}.{names.GROUP}"


class ObjectMeta(ApiModel):
    """The metadata fields liqo-stack reads and writes."""

    name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    generation: int | None = None
    resource_version: str | None = None
    uid: str | None = None
    deletion_timestamp: str | None = None


class CustomObject(ApiModel):
    """A custom resource of our group. Subclasses set `crd` and define `spec` (and `status`)."""

    crd: ClassVar[CrdInfo]

    api_version: str = Field(default=names.API_VERSION)
    kind: str = ""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    def model_post_init(self, context: Any) -> None:
        if not self.kind:
            self.kind = self.crd.kind
