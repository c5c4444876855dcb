"""`KubeObject`: any Kubernetes object as a Pulumi resource, applied with server-side apply.

Why by hand: pulumi-kubernetes' provider (pulumi-resource-kubernetes) cannot be built on our
machines (its Go module is not served by the module proxy; see tools/NOTES.md), so this small
dynamic provider covers what liqo-stack needs: create/update by server-side apply with one field
manager, diff on the declared manifest (preview --diff shows exactly what changes), replacement
when an object's identity changes, delete that waits until the object is gone.

Refresh reads the live object like pulumi-kubernetes does: the fields our field manager owned after
its last apply (kept in the state as `owned_fields`), with their live values; when they differ from
what that apply left (`live_digest`), the state's manifest becomes the live one, so `preview
--refresh` shows a hand edit as a diff and `up` applies the declared one again. Fields other writers
own (status, finalizers, the runtime's webhook caBundles, defaults) are outside that set (see
`drift.py`).

Import: the pinned Pulumi cannot import a dynamic resource (`pulumi import` and the `import_`
option both call `read` without the resource's state, and the SDK fails on the missing
`__provider`: pulumi/pulumi#16175). Adoption needs neither: create is a server-side apply, so
declaring an object that already exists takes it over in place (same uid, nothing deleted).

The target cluster is an input: `cluster_id` (stable, from the stack config) and `kubeconfig`
(a Pulumi secret). Only a change of `cluster_id` moves an object; a new kubeconfig for the same
cluster id is used for the next call and never replaces anything.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pulumi
import yaml
from lightkube import ApiError, Client, KubeConfig
from lightkube.codecs import resource_registry
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    CreateResult,
    DiffResult,
    ReadResult,
    ResourceProvider,
    UpdateResult,
)
from pulumi.output import Unknown
from pulumi.runtime import rpc

from liqo_stack.resources import drift

T = TypeVar("T")
FIELD_MANAGER = "liqo-stack"

# The engine calls a dynamic provider from a thread pool. lightkube decodes with msgspec, whose
# first decode of a type from several threads at once crashed the provider process (segfault seen
# in `msgspec._utils.get_class_annotations`), so calls into the cluster take turns.
API_LOCK = threading.Lock()


def serialized(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def locked(*args: Any, **kwargs: Any) -> T:
        with API_LOCK:
            return method(*args, **kwargs)

    return locked


DELETE_TIMEOUT_SECONDS = 300
IDENTITY_FIELDS = ("apiVersion", "kind", "name", "namespace")


def _identity(manifest: dict[str, Any]) -> dict[str, Any]:
    meta = manifest.get("metadata") or {}
    return {
        "apiVersion": manifest.get("apiVersion"),
        "kind": manifest.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
    }


def object_id(cluster_id: str, manifest: dict[str, Any]) -> str:
    ident = _identity(manifest)
    scope = ident["namespace"] or "_"
    return f"{cluster_id}/{ident['apiVersion']}/{ident['kind']}/{scope}/{ident['name']}"


def client_for(kubeconfig: str) -> Client:
    config = KubeConfig.from_dict(yaml.safe_load(kubeconfig))
    return Client(config, field_manager=FIELD_MANAGER)


def _resource_class(client: Client, api_version: str, kind: str) -> Any:
    """Built-in kinds from lightkube's registry; custom kinds from their CRD (plural and scope)."""
    try:
        return resource_registry.load(api_version, kind)
    except Exception:
        pass
    group, _, version = api_version.rpartition("/")
    for crd in client.list(CustomResourceDefinition):
        spec = crd.spec
        if spec.group == group and spec.names.kind == kind:
            factory = create_namespaced_resource if spec.scope == "Namespaced" else create_global_resource
            return factory(group, version, kind, spec.names.plural)
    raise LookupError(f"the cluster serves no kind {kind} in {api_version}: is its CRD installed?")


def integral_numbers(value: Any) -> Any:
    """Pulumi carries every number as a float; Kubernetes fields are mostly integers (1.0 -> 1)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: integral_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integral_numbers(v) for v in value]
    return value


def _apply(props: dict[str, Any]) -> dict[str, Any]:
    client = client_for(props["kubeconfig"])
    manifest = integral_numbers(props["manifest"])
    cls = _resource_class(client, manifest["apiVersion"], manifest["kind"])
    obj = cls.from_dict(manifest) if hasattr(cls, "from_dict") else manifest
    applied = client.apply(obj, force=True)
    if manifest["kind"] == "CustomResourceDefinition":
        _wait_established(client, manifest["metadata"]["name"])
    meta = applied.metadata if hasattr(applied, "metadata") else None
    return {"uid": getattr(meta, "uid", None), **_baseline(_as_dict(applied), manifest)}


def _as_dict(obj: Any) -> dict[str, Any]:
    found: dict[str, Any] = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
    return found


def _baseline(applied: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """What a later refresh compares the live object with: the fields this apply left ours and a
    digest of their values (a digest, not the values: a Secret's would land in the state)."""
    # owning nothing (a Namespace declared by name only): its declared paths, as `read` does
    fields = drift.owned_fields((applied.get("metadata") or {}).get("managedFields"), FIELD_MANAGER) or drift.fields_of(
        manifest
    )
    return {"owned_fields": fields, "live_digest": drift.digest_of(drift.live_view(applied, fields))}


def _wait_established(client: Client, name: str, timeout: float = 60) -> None:
    """Objects of a new kind can be created only once its CRD is Established."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        crd = client.get(CustomResourceDefinition, name)
        conditions = (crd.status.conditions if crd.status else None) or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        time.sleep(0.2)
    raise TimeoutError(f"CustomResourceDefinition {name} not Established after {timeout:.0f}s")


def _get(props: dict[str, Any]) -> Any | None:
    client = client_for(props["kubeconfig"])
    ident = _identity(props["manifest"])
    cls = _resource_class(client, ident["apiVersion"], ident["kind"])
    try:
        return client.get(cls, ident["name"], namespace=ident["namespace"])
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise


DECLARED_KEY = "declared_manifest"


def _as_secret(value: Any) -> dict[str, Any]:
    """`value` marked secret on the wire: the declared manifest may hold a Secret's values."""
    return {rpc._special_sig_key: rpc._special_secret_sig, "value": value}


def _is_known(value: Any) -> bool:
    """False for a value the engine does not know yet (during a preview)."""
    return not (isinstance(value, Unknown) or value == rpc.UNKNOWN)


class KubeObjectProvider(ResourceProvider):
    def __reduce__(self) -> tuple[type, tuple[()]]:
        # Pickled by reference: the state names this class, and every run uses the installed code.
        return (type(self), ())

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = []
        manifest = news.get("manifest")
        if not _is_known(manifest):
            pass  # computed from outputs not known yet (a preview); checked once it is known
        elif not isinstance(manifest, dict):
            failures.append(CheckFailure("manifest", "must be a Kubernetes object (a mapping)"))
        else:
            for field in ("apiVersion", "kind"):
                if not manifest.get(field):
                    failures.append(CheckFailure(f"manifest.{field}", "is required"))
            if not (manifest.get("metadata") or {}).get("name"):
                failures.append(CheckFailure("manifest.metadata.name", "is required"))
        if not news.get("cluster_id"):
            failures.append(CheckFailure("cluster_id", "is required"))
        return CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        if not _is_known(news.get("manifest")):
            return DiffResult(changes=True, replaces=[], delete_before_replace=True)  # settled at apply time
        replaces = [
            f"manifest.{key}"
            for key, old in _identity(olds.get("manifest") or {}).items()
            if _identity(news["manifest"])[key] != old
        ]
        if olds.get("cluster_id") != news.get("cluster_id"):
            replaces.append("cluster_id")
        # A new kubeconfig for the same cluster is an in-place update (recorded for later calls such as
        # delete), never a replacement.
        changed = bool(replaces) or any(olds.get(k) != news.get(k) for k in ("manifest", "kubeconfig"))
        return DiffResult(changes=changed, replaces=replaces, delete_before_replace=True)

    @serialized
    def create(self, props: dict[str, Any]) -> CreateResult:
        outs = {**props, **_apply(props)}
        return CreateResult(object_id(props["cluster_id"], props["manifest"]), outs)

    @serialized
    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult({**news, **_apply(news)})

    @serialized
    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        found = _get(props)
        if found is None:
            return ReadResult(None, {})  # gone: refresh drops it from the state
        live = _as_dict(found)
        # what the program declared, while `manifest` shows the drift (a refresh may be saved)
        declared_manifest = props.get(DECLARED_KEY) or props["manifest"]
        # the fields of our last apply (a hand edit, an Update, takes them over in managedFields);
        # else those we own today; else, owning none, the declared ones
        fields = (
            props.get("owned_fields")
            or drift.owned_fields(live["metadata"].get("managedFields"), FIELD_MANAGER)
            or drift.fields_of(declared_manifest)
        )
        view = drift.live_view(live, fields)
        digest = drift.digest_of(view)
        baseline = props.get("live_digest")
        if baseline is None and drift.in_sync(integral_numbers(declared_manifest), view):
            baseline = digest  # a state written before digests: the live object as it agrees today
        outs = {**props, "uid": live["metadata"].get("uid"), "owned_fields": fields, "live_digest": baseline}
        outs.pop(DECLARED_KEY, None)
        if digest == baseline:
            outs["manifest"] = declared_manifest
            return ReadResult(id_, outs)
        shown = drift.drifted(integral_numbers(declared_manifest), view)
        if drift.same_tree(shown, drift.comparable(integral_numbers(declared_manifest))):
            outs["manifest"] = declared_manifest  # changed where nothing can show it: no diff to offer
            return ReadResult(id_, outs)
        outs["manifest"] = shown
        outs[DECLARED_KEY] = _as_secret(declared_manifest)
        return ReadResult(id_, outs)

    @serialized
    def delete(self, _id: str, props: dict[str, Any]) -> None:
        client = client_for(props["kubeconfig"])
        ident = _identity(props["manifest"])
        cls = _resource_class(client, ident["apiVersion"], ident["kind"])
        try:
            client.delete(cls, ident["name"], namespace=ident["namespace"])
        except ApiError as err:
            if err.status.code == 404:
                return
            raise
        deadline = time.monotonic() + DELETE_TIMEOUT_SECONDS
        while _get(props) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{object_id(props['cluster_id'], props['manifest'])} still exists (finalizers?)")
            time.sleep(0.5)


_PROVIDER = KubeObjectProvider()


class KubeObject(pulumi.dynamic.Resource, module="liqo", name="KubeObject"):
    """One Kubernetes object in one cluster, owned by the stack."""

    uid: pulumi.Output[str]

    def __init__(
        self,
        resource_name: str,
        *,
        cluster_id: pulumi.Input[str],
        kubeconfig: pulumi.Input[str],
        manifest: pulumi.Input[dict[str, Any]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "cluster_id": cluster_id,
            "kubeconfig": pulumi.Output.secret(kubeconfig),
            "manifest": manifest,
            "uid": None,
        }
        super().__init__(_PROVIDER, resource_name, props, opts)
