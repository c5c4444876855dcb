"""Custom resources follow their pods (issue 39), end to end: the shared stack opts in the `widgets`
of `e2e.liqo-stack.dev` (tests/e2e/conftest.py, WIDGETS, with reflectStatus); this module installs
their CRD at home and in foreign-1 with kubectl, foreign-2 getting it in the first test, and a
`gadgets` CRD of the same group that nothing opts in. Every CRD goes again when the module ends."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import Event, Secret
from lightkube.types import PatchType
from pulumi import automation as auto

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names
from runtime.api.resources import VirtualNodeResource
from tests.e2e.conftest import WIDGETS
from tests.support.cli import run_preview
from tests.support.crds import open_crd
from tests.support.kube import get_or_none, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

GROUP = str(WIDGETS["group"])
Widget = create_namespaced_resource(GROUP, "v1", "Widget", "widgets")
Gadget = create_namespaced_resource(GROUP, "v1", "Gadget", "gadgets")
ALLOWED = {names.ALLOW_REFLECTION_ANNOTATION: "true"}


WIDGET_CRD = open_crd(GROUP, "Widget", "widgets", status=True)
GADGET_CRD = open_crd(GROUP, "Gadget", "gadgets", status=False)


def kubectl(dev_env: DevEnvironment, cluster_id: str, *args: str, stdin: str | None = None) -> str:
    command = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", str(dev_env.kubeconfig(cluster_id)), *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, check=True, timeout=60).stdout


def install(dev_env: DevEnvironment, cluster_id: str, *crds: dict[str, Any]) -> None:
    """`kubectl apply` the CRDs, then wait until they are Established, as an operator's install does."""
    kubectl(
        dev_env, cluster_id, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": crds})
    )
    for found in crds:
        kubectl(dev_env, cluster_id, "wait", "--for=condition=Established", f"crd/{found['metadata']['name']}")


@pytest.fixture(scope="module")
def crds(runtime: ExternalRuntime, dev_env: DevEnvironment) -> Iterator[None]:
    """Widgets at home and in foreign-1 (foreign-2's comes in the first test), gadgets in both; all go afterwards."""
    for cluster_id in ("home", "foreign-1"):
        install(dev_env, cluster_id, WIDGET_CRD, GADGET_CRD)
    yield
    for cluster_id in ("home", "foreign-1", "foreign-2"):
        kubectl(dev_env, cluster_id, "delete", "crd", "--ignore-not-found", f"widgets.{GROUP}", f"gadgets.{GROUP}")


def twin_of(namespace: str) -> str:
    return f"{namespace}-home"


def widget(name: str, namespace: str, spec: dict[str, Any], **meta: Any) -> Any:
    return Widget.from_dict(
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Widget",
            "metadata": {"name": name, "namespace": namespace, **meta},
            "spec": spec,
        }
    )


def copy_in(client: Client, name: str, namespace: str, timeout: float = 30) -> Any:
    return wait_until(
        lambda: get_or_none(client, Widget, name, twin_of(namespace)), timeout, f"widget {name} reflected"
    )


def condition(home: Client, cluster_id: str) -> dict[str, Any]:
    node = home.get(VirtualNodeResource, names.virtual_node_name(cluster_id), namespace=names.LIQO_NAMESPACE)
    found = [
        c
        for c in (node.get("status") or {}).get("conditions") or []
        if c["type"] == names.CUSTOM_RESOURCES_REFLECTED_CONDITION
    ]
    return found[0] if found else {}


def test_a_crd_missing_in_one_cluster_is_a_condition_until_it_appears(
    crds: None, offloaded: str, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment
) -> None:
    wait_until(lambda: condition(home, "foreign-1").get("status") == "True", 30, "foreign-1 reflects widgets")
    missing = wait_until(
        lambda: (
            (found := condition(home, "foreign-2")).get("status") == "False"
            and "foreign-2:" in found["message"]
            and found
        ),
        30,
        "foreign-2 says its widgets CRD is missing",
    )
    assert missing["reason"] == "CustomResourceDefinitionMissing"
    assert f"widgets.{GROUP}: foreign-2: no CustomResourceDefinition" in missing["message"]
    node_name = names.virtual_node_name("foreign-2")

    def warning() -> Any:
        events: list[Any] = list(
            home.list(Event, namespace=names.LIQO_NAMESPACE, fields={"involvedObject.name": node_name})
        )
        return next(
            (e for e in events if e.reason == "CustomResourceDefinitionMissing" and "foreign-2:" in e.message), None
        )

    assert wait_until(warning, 30, "a Warning event on the VirtualNode").type == "Warning"

    home.create(widget("early", offloaded, {"size": 1}, annotations=ALLOWED))
    copy_in(foreign["foreign-1"], "early", offloaded)
    install(dev_env, "foreign-2", WIDGET_CRD)  # reflection starts by itself: no restart, no patch
    wait_until(lambda: condition(home, "foreign-2").get("status") == "True", 30, "foreign-2 reflects widgets")
    assert copy_in(foreign["foreign-2"], "early", offloaded)["spec"] == {"size": 1}


def test_widgets_are_reflected_updated_deleted_and_repaired(
    crds: None, offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    client, twin = foreign["foreign-1"], twin_of(offloaded)
    home.create(widget("plain", offloaded, {"size": 0}))  # AllowList by default: not annotated, stays home
    home.create(
        widget("blue", offloaded, {"color": "blue", "parts": ["a"]}, labels={"app": "shop"}, annotations=ALLOWED)
    )
    copy = copy_in(client, "blue", offloaded)
    assert copy["spec"] == {"color": "blue", "parts": ["a"]} and copy.metadata.labels["app"] == "shop"
    assert copy.metadata.labels[names.ORIGIN_LABEL] == "home"
    assert copy.metadata.labels[names.DESTINATION_LABEL] == "foreign-1"
    # one home watch feeds one FIFO queue: `blue`, created after `plain`, was reconciled after it
    assert get_or_none(client, Widget, "plain", twin) is None, "not annotated under AllowList"

    home.patch(Widget, "blue", {"spec": {"color": "red"}}, namespace=offloaded, patch_type=PatchType.MERGE)
    wait_until(lambda: client.get(Widget, "blue", namespace=twin)["spec"].get("color") == "red", 30, "update reflected")

    client.patch(Widget, "blue", {"spec": {"color": "green"}}, namespace=twin, patch_type=PatchType.MERGE)
    wait_until(lambda: client.get(Widget, "blue", namespace=twin)["spec"].get("color") == "red", 30, "hand edit undone")
    client.delete(Widget, "blue", namespace=twin)
    copy_in(client, "blue", offloaded)  # a copy deleted by hand comes back

    home.delete(Widget, "blue", namespace=offloaded)
    wait_until(lambda: get_or_none(client, Widget, "blue", twin) is None, 30, "deleted at home, deleted there")

    # the policy and workers on the VirtualNode apply live: DenyList reflects `plain` too
    node_name = names.virtual_node_name("foreign-1")

    def opt_in(entry: dict[str, Any]) -> None:
        patch = {"spec": {"customResources": [entry]}}
        home.patch(VirtualNodeResource, node_name, patch, namespace=names.LIQO_NAMESPACE, patch_type=PatchType.MERGE)

    opt_in({**WIDGETS, "type": "DenyList", "workers": 1})
    try:
        copy_in(client, "plain", offloaded)
    finally:
        opt_in(WIDGETS)
    wait_until(lambda: get_or_none(client, Widget, "plain", twin) is None, 30, "AllowList again: the copy goes")


def test_status_comes_back_from_the_first_cluster(
    crds: None, offloaded: str, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment
) -> None:
    """The namespace is Ready in both clusters: foreign-1, the first by id, gives the home status."""
    home.create(widget("reported", offloaded, {"size": 2}, annotations=ALLOWED))
    copy_in(foreign["foreign-1"], "reported", offloaded)
    copy_in(foreign["foreign-2"], "reported", offloaded)
    status = {"phase": "Ready", "observedSize": 2}
    # what the foreign cluster's operator would do, through the status subresource
    kubectl(
        dev_env,
        "foreign-1",
        "patch",
        "widgets.e2e.liqo-stack.dev",
        "reported",
        "-n",
        twin_of(offloaded),
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )
    wait_until(lambda: home.get(Widget, "reported", namespace=offloaded).get("status") == status, 30, "status at home")
    # the status never goes out: the copy's spec stays the home one, and foreign-2's copy has none
    assert foreign["foreign-2"].get(Widget, "reported", namespace=twin_of(offloaded)).get("status") is None


def test_a_resource_not_opted_in_stays_home(
    crds: None, offloaded: str, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment, tmp_path: Path
) -> None:
    client, twin = foreign["foreign-1"], twin_of(offloaded)
    gadget: Any = Gadget.from_dict(
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Gadget",
            "metadata": {"name": "gizmo", "namespace": offloaded, "annotations": ALLOWED},
            "spec": {"size": 1},
        }
    )
    home.create(gadget)
    home.create(widget("after-gadget", offloaded, {"size": 1}, annotations=ALLOWED))
    copy_in(client, "after-gadget", offloaded)  # the runtime is at work past the gadget
    assert get_or_none(client, Gadget, "gizmo", twin) is None
    # and the home identity could not put it there: its rights name the opted-in resource only
    secret: Any = home.get(Secret, names.credentials_secret_name("foreign-1"), namespace=names.LIQO_NAMESPACE)
    kubeconfig = tmp_path / "identity.yaml"
    kubeconfig.write_bytes(base64.b64decode(secret.data["kubeconfig"]))

    def can_i(*args: str) -> str:
        command = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), "auth", "can-i", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.strip()

    assert can_i("create", f"widgets.{GROUP}", "-n", twin) == "yes"
    assert can_i("create", f"gadgets.{GROUP}", "-n", twin) == "no"
    assert can_i("create", f"widgets.{GROUP}", "-n", "default") == "no"
    assert can_i("get", f"customresourcedefinitions/widgets.{GROUP}") == "yes"
    assert can_i("get", f"customresourcedefinitions/gadgets.{GROUP}") == "no"
    assert can_i("list", "customresourcedefinitions") == "no"


def test_a_crd_deleted_in_one_cluster_stops_reflection_there_only(
    crds: None, offloaded: str, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment
) -> None:
    kubectl(dev_env, "foreign-2", "delete", "crd", f"widgets.{GROUP}")  # its copies go with it
    # False at once ("is being deleted", while kubectl waits for the copies to go), then "no
    # CustomResourceDefinition" once the deletion is seen whole
    wait_until(
        lambda: (
            (found := condition(home, "foreign-2")).get("status") == "False"
            and "foreign-2: no CustomResourceDefinition" in found.get("message", "")
        ),
        30,
        "foreign-2 says its CRD is missing again",
    )
    home.create(widget("later", offloaded, {"size": 5}, annotations=ALLOWED))
    assert copy_in(foreign["foreign-1"], "later", offloaded)["spec"] == {"size": 5}
    assert condition(home, "foreign-1")["status"] == "True"


def test_the_stack_preview_tells_which_widgets_a_policy_change_reflects(
    crds: None,
    offloaded: str,
    home: Client,
    installed: auto.Stack,
    pulumi_env: PulumiEnvironment,
    dev_env: DevEnvironment,
) -> None:
    """`liqo-stack preview` reads the custom objects of the offloaded namespaces: DenyList instead of
    AllowList reflects the widgets with no annotation, into each cluster of their namespace whose
    widgets CRD can take them (foreign-2 has none: it says so instead)."""
    kubectl(dev_env, "foreign-2", "delete", "crd", "--ignore-not-found", f"widgets.{GROUP}")
    home.create(widget("unannotated", offloaded, {"size": 1}))
    home.create(widget("kept-home", offloaded, {"size": 1}, annotations={names.SKIP_REFLECTION_ANNOTATION: "true"}))
    config = PulumiEnvironment.liqo_config(installed)
    original = json.loads(json.dumps(config))
    for custom in config["reflection"]["customResources"]:
        custom["type"] = "DenyList"
    PulumiEnvironment.set_liqo_config(installed, config)
    try:
        code, output = run_preview(installed, pulumi_env, "text")
    finally:
        PulumiEnvironment.set_liqo_config(installed, original)
    assert code == 2, "an effect to look at"
    assert f"widgets.{GROUP} {offloaded}/unannotated in foreign-1: now reflected\n" in output
    waiting = "not reflected until its CRD can take it (no CustomResourceDefinition)"
    assert f"widgets.{GROUP} {offloaded}/unannotated in foreign-2: {waiting}" in output
    assert "kept-home" not in output
