"""Each custom object the stack declares, server-side applied with a setting and then without it, is as
if the setting was never made: against the real API server's merge, with our CRDs' own schemas.

The CRDs are copies of ours under a group no controller watches (the session's stack and runtime never
see these objects); their schemas are the ones the stack installs, which is what the merge reads.
The e2e tier checks the grant through `pulumi up` (tests/e2e/test_foreign_guards.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace

from liqo_stack.declaring import config, manifests
from liqo_stack.declaring.plan import virtual_node_spec
from runtime.api import names
from runtime.api._base import CustomObject
from runtime.api.crds import crd_manifest
from runtime.api.namespaceselector import NamespaceOffloadingSelector
from runtime.api.quota import Quota
from runtime.api.virtualnode import VirtualNode
from tests.support.kube import wait_until

pytestmark = pytest.mark.clusters

PROBE_GROUP = "settings-probe.liqo-stack.dev"
FIELD_MANAGER = "liqo-stack"  # the stack's (liqo_stack/declaring/components/cluster.py)
KINDS: tuple[type[CustomObject], ...] = (VirtualNode, NamespaceOffloadingSelector, Quota)


def probe_crd(kind: type[CustomObject]) -> dict[str, Any]:
    crd = crd_manifest(kind)
    crd["metadata"]["name"] = f"{kind.crd.plural}.{PROBE_GROUP}"
    crd["spec"]["group"] = PROBE_GROUP
    return crd


def probe_resource(kind: type[CustomObject]) -> Any:
    info = kind.crd
    if info.scope == "Cluster":
        return create_global_resource(PROBE_GROUP, names.VERSION, info.kind, info.plural)
    return create_namespaced_resource(PROBE_GROUP, names.VERSION, info.kind, info.plural)


@pytest.fixture(scope="module")
def probe_kinds(home: Client) -> Iterator[None]:
    bodies = [probe_crd(kind) for kind in KINDS]
    for body in bodies:  # applied: a run cut short may have left them
        home.apply(CustomResourceDefinition.from_dict(body), field_manager="tests")  # type: ignore[call-overload]

    def established(name: str) -> bool:
        found: Any = home.get(CustomResourceDefinition, name)
        return any(c.type == "Established" and c.status == "True" for c in (found.status.conditions or []))

    wait_until(lambda: all(established(b["metadata"]["name"]) for b in bodies), 30, "the probe CRDs Established")
    yield
    for body in bodies:  # with every probe object
        home.delete(CustomResourceDefinition, body["metadata"]["name"])


@pytest.fixture
def namespace(home: Client, unique_name: str) -> Iterator[str]:
    home.create(Namespace(metadata=ObjectMeta(name=unique_name)))
    yield unique_name
    home.delete(Namespace, unique_name)


def stack(**settings: Any) -> config.StackConfig:
    foreign = {"clusterId": "foreign-1", **settings.pop("foreign", {})}
    return config.parse({"home": {"clusterId": "home"}, "foreignClusters": [foreign], **settings})


def virtual_node(settings: config.StackConfig) -> dict[str, Any]:
    return manifests.virtual_node(virtual_node_spec(settings, settings.foreign_clusters[0]))


def selector(text: str) -> dict[str, Any]:
    spec = config.NamespaceSelectorConfig(name="shop", selector=text).spec()
    return manifests.namespace_offloading_selector("shop", spec)


# (what, the manifest with the setting, the manifest without it): each from the stack's own functions
CASES = [
    (
        "a grant's resources",
        manifests.quota("home", config.GrantConfig(resources={"cpu": "8"}).quota(), "peering"),
        manifests.quota("home", config.GrantConfig().quota(), "peering"),
    ),
    (
        "a foreign cluster's fixedResources",
        virtual_node(stack(foreign={"fixedResources": {"nvidia.com/gpu": "1"}})),
        virtual_node(stack()),
    ),
    (
        "reflection's skipLabels and skipAnnotations (the VirtualNode's offloadingPatch)",
        virtual_node(stack(reflection={"skipLabels": ["team"], "skipAnnotations": ["note"]})),
        virtual_node(stack()),
    ),
    ("a selector's matchLabels", selector("team=shop,tier in (web,db)"), selector("tier in (web,db)")),
]


def applied(home: Client, manifest: dict[str, Any], name: str, namespace: str) -> dict[str, Any]:
    """`manifest` server-side applied as the stack applies it, under `name` in the probe group."""
    kind = next(k for k in KINDS if k.crd.kind == manifest["kind"])
    resource = probe_resource(kind)
    metadata = {**manifest["metadata"], "name": name}
    if kind.crd.scope == "Namespaced":
        metadata["namespace"] = namespace
    body = {**manifest, "apiVersion": f"{PROBE_GROUP}/{names.VERSION}", "metadata": metadata}
    obj: Any = home.apply(resource.from_dict(body), field_manager=FIELD_MANAGER, force=True)
    return dict(obj["spec"])


@pytest.mark.parametrize(("what", "with_it", "without_it"), CASES, ids=[c[0] for c in CASES])
def test_a_setting_applied_then_taken_out_leaves_the_object_as_if_never_set(
    home: Client, probe_kinds: None, namespace: str, what: str, with_it: dict[str, Any], without_it: dict[str, Any]
) -> None:
    never_set = applied(home, without_it, f"never-{namespace}", namespace)
    assert applied(home, with_it, f"once-{namespace}", namespace) != never_set, f"{what} changes the object"
    assert applied(home, without_it, f"once-{namespace}", namespace) == never_set
