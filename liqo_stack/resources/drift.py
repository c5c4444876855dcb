"""What a refresh sees of a live object: the fields liqo-stack owns, compared with what it declared.

Pure functions over plain dicts (no cluster): the dynamic provider's `read` feeds them the live
object and the set of fields our field manager held after its last apply.

- `owned_fields`: the union of a manager's `Apply` entries of `metadata.managedFields` (FieldsV1).
- `project`: the part of an object a FieldsV1 set names. Fields other writers own (the runtime's
  status, finalizers, webhook caBundles, the API server's defaults) are not in it, so they never
  show as drift.
- `comparable`: Secrets with their values replaced by digests (`stringData` is write-only: the API
  server keeps it base64-encoded in `data`), so neither the comparison nor the state holds a value.
- `overlay`: the declared manifest with the live value wherever the live object disagrees, which
  is what the engine diffs against the program: `preview --refresh` shows the drift, `up` restores it.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
from typing import Any

FieldSet = dict[str, Any]

# A FieldsV1 key names the item it sits in: "." is the item itself, not one of its children.
_SELF = "."


def _union(left: FieldSet, right: FieldSet) -> FieldSet:
    merged = dict(left)
    for key, sub in right.items():
        merged[key] = _union(merged[key], sub) if key in merged else sub
    return merged


def owned_fields(managed_fields: list[dict[str, Any]] | None, manager: str) -> FieldSet:
    """The fields `manager` declared by server-side apply (its Update entries are edits, not declarations)."""
    owned: FieldSet = {}
    for entry in managed_fields or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply" and not entry.get("subresource"):
            owned = _union(owned, entry.get("fieldsV1") or {})
    return owned


def fields_of(manifest: Any) -> FieldSet:
    """The FieldsV1 set of a manifest's own paths, its lists owned whole (no schema says their keys)."""
    if isinstance(manifest, dict):
        return {f"f:{key}": fields_of(value) for key, value in manifest.items()}
    return {}


def _matches(item: Any, index: int, key: str) -> bool:
    """Whether the list item at `index` is the one a FieldsV1 list key names (k: keys, v: values, i: index)."""
    kind, _, raw = key.partition(":")
    if kind == "k":
        wanted = json.loads(raw)
        return isinstance(item, dict) and all(item.get(k) == v for k, v in wanted.items())
    if kind == "v":
        return bool(item == json.loads(raw))
    if kind == "i":
        return index == int(raw)
    return False


def project(value: Any, fields: FieldSet) -> Any:
    """The subset of `value` that `fields` names; a field owned as a whole (atomic) keeps its whole value."""
    children = {key: sub for key, sub in fields.items() if key != _SELF}
    if not children:
        return copy.deepcopy(value)
    if isinstance(value, dict):
        return {
            key[2:]: project(value[key[2:]], sub)
            for key, sub in children.items()
            if key.startswith("f:") and key[2:] in value
        }
    if isinstance(value, list):
        kept = []
        for index, item in enumerate(value):  # the live order
            for key, sub in children.items():
                if _matches(item, index, key):
                    kept.append(project(item, sub))
                    break
        return kept
    return value


def _digest(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def _decoded(encoded: Any) -> bytes:
    try:
        return base64.b64decode(str(encoded), validate=True)
    except (binascii.Error, ValueError):
        return str(encoded).encode()


def comparable(manifest: dict[str, Any]) -> dict[str, Any]:
    """`manifest` with a Secret's values as digests of their bytes, `stringData` and `data` alike."""
    if manifest.get("kind") != "Secret" or manifest.get("apiVersion") != "v1":
        return manifest
    digested = dict(manifest)
    if isinstance(manifest.get("data"), dict):
        digested["data"] = {k: _digest(_decoded(v)) for k, v in manifest["data"].items()}
    if isinstance(manifest.get("stringData"), dict):
        digested["stringData"] = {k: _digest(str(v).encode()) for k, v in manifest["stringData"].items()}
    return digested


def live_view(live: dict[str, Any], fields: FieldSet) -> dict[str, Any]:
    """The owned part of a live object, comparable with `comparable(declared)`."""
    view: dict[str, Any] = project(live, fields)
    # identity is never in managedFields, and always as declared (a new one is a new object)
    for key in ("apiVersion", "kind"):
        if key in live:
            view[key] = live[key]
    live_meta = live.get("metadata") or {}
    identity = {key: live_meta[key] for key in ("name", "namespace") if key in live_meta}
    if identity:
        view["metadata"] = {**identity, **(view.get("metadata") or {})}
    if live.get("kind") == "Secret" and live.get("apiVersion") == "v1":
        data = live.get("data") or {}
        view = comparable(view)
        owned_string_data = fields.get("f:stringData") or {}
        if owned_string_data:
            # the server moved them to `data`: their live value is there
            view["stringData"] = {
                key[2:]: _digest(_decoded(data[key[2:]]))
                for key in owned_string_data
                if key.startswith("f:") and key[2:] in data
            }
    return view


def digest_of(view: Any) -> str:
    return _digest(json.dumps(view, sort_keys=True, separators=(",", ":")).encode())


def _same(declared: Any, live: Any) -> bool:
    """Equal as Kubernetes means it: Pulumi carries integers as floats (1.0 is 1)."""
    if isinstance(declared, bool) or isinstance(live, bool):
        return declared is live
    if isinstance(declared, int | float) and isinstance(live, int | float):
        return float(declared) == float(live)
    return bool(declared == live)


def overlay(declared: Any, live: Any, *, undeclared: bool = False) -> Any:
    """`declared` where the live view agrees with it, the live value where it does not.

    Only declared paths are walked unless `undeclared`: a field the live view has and the program
    never declared is mostly a default or a list key the server filled in, not an edit. A declared
    field missing live is left out, so the diff shows it removed. A list whose length changed is
    shown whole.
    """
    if isinstance(declared, dict) and isinstance(live, dict):
        kept = {key: overlay(want, live[key], undeclared=undeclared) for key, want in declared.items() if key in live}
        if undeclared:
            kept.update({key: value for key, value in live.items() if key not in declared})
        return kept
    if isinstance(declared, list) and isinstance(live, list) and len(declared) == len(live):
        return [overlay(want, found, undeclared=undeclared) for want, found in zip(declared, live, strict=True)]
    return declared if _same(declared, live) else live


def in_sync(declared: dict[str, Any], view: dict[str, Any]) -> bool:
    """Whether the live view agrees with every declared path (for a state recorded before digests)."""
    declared = comparable(declared)
    return same_tree(overlay(declared, view), declared)


def drifted(declared: dict[str, Any], view: dict[str, Any]) -> dict[str, Any]:
    """What to report for a live object known to differ from its last apply: the declared paths
    with their live values; if none of them differs, the change is in a field the program leaves to
    the server inside an owned value (a key added to an item of an atomic list), so the undeclared
    fields show too."""
    declared = comparable(declared)
    shown: dict[str, Any] = overlay(declared, view)
    if same_tree(shown, declared):
        shown = overlay(declared, view, undeclared=True)
    return shown


def same_tree(left: Any, right: Any) -> bool:
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same_tree(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same_tree(a, b) for a, b in zip(left, right, strict=True))
    return _same(left, right)
