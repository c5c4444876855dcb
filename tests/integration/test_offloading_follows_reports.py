"""The home's NamespaceOffloading controller follows what a foreign cluster reports in its NamespaceMap
through a watch, not by asking again and again (runtime/controllers/namespaceoffloading.py, MapWatches).

The controller runs in the test's event loop against the session's real API servers, with its periodic
recheck an hour away: whatever it learns within the test came through the watch. The test plays the
foreign agent (foreign-1's admin writes the map's status), so each report comes when the test says.
The CRDs are ours, installed for the module (the integration tier runs before any stack in a session)
and removed after it with what it made.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from lightkube import ApiError, AsyncClient, Client, KubeConfig
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace, Secret, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import RoleBinding
from lightkube.types import PatchType

from liqo_stack.dev.clusters import DevEnvironment
from runtime.api import names
from runtime.api.crds import crd_manifest
from runtime.api.namespacemap import NamespaceMap
from runtime.api.namespaceoffloading import NamespaceOffloading
from runtime.api.resources import NamespaceMapResource, NamespaceOffloadingResource, VirtualNodeResource
from runtime.api.virtualnode import VirtualNode
from runtime.controllers.namespaceoffloading import NamespaceOffloadingController
from tests.support.kube import create_namespace, get_or_none, wait_until, wait_until_async
from tests.support.peering import set_kubeconfig

pytestmark = pytest.mark.clusters

HOME_ID = "home"
FOREIGN_ID = "foreign-1"
NAMESPACE = "follows-reports"
TWIN = f"{NAMESPACE}-{HOME_ID}"
TENANT = names.tenant_namespace(HOME_ID)
MAP = names.namespace_map_name(HOME_ID)
ROTATED = "rotated-home"  # the identity of the credentials written while the offloading is Ready
NEVER = 3600.0  # the controller's recheck: not within this test


def established(client: Client, name: str) -> bool:
    found: Any = get_or_none(client, CustomResourceDefinition, name)
    return found is not None and any(
        c.type == "Established" and c.status == "True" for c in found.status.conditions or []
    )


@pytest.fixture(scope="module")
def peered(dev_env: DevEnvironment, home: Client, foreign: dict[str, Client]) -> Iterator[None]:
    """Home with our CRDs, a VirtualNode for foreign-1 and its credentials Secret (foreign-1's admin
    kubeconfig); foreign-1 with the NamespaceMap CRD and the home's tenant namespace. Only what was not
    there is made, and only that is removed."""
    there = foreign[FOREIGN_ID]
    crds = [
        (home, crd_manifest(NamespaceOffloading)),
        (home, crd_manifest(VirtualNode)),
        (there, crd_manifest(NamespaceMap)),
    ]
    made: list[tuple[Client, Any, str, str | None]] = []  # client, kind, name, namespace: removed in reverse
    try:
        for client, body in crds:
            name = body["metadata"]["name"]
            if get_or_none(client, CustomResourceDefinition, name) is None:
                client.create(CustomResourceDefinition.from_dict(body))  # type: ignore[call-overload]
                made.append((client, CustomResourceDefinition, name, None))
        for client, body in crds:
            name = body["metadata"]["name"]
            wait_until(lambda c=client, n=name: established(c, n), 30, f"CRD {name} Established")  # type: ignore[misc]
        for client, namespace in ((home, names.LIQO_NAMESPACE), (there, TENANT)):
            if get_or_none(client, Namespace, namespace) is None:
                client.create(Namespace(metadata=ObjectMeta(name=namespace)))
                made.append((client, Namespace, namespace, None))
        secret = names.credentials_secret_name(FOREIGN_ID)
        kubeconfig = base64.b64encode(dev_env.kubeconfig(FOREIGN_ID).read_bytes()).decode()
        home.create(
            Secret(metadata=ObjectMeta(name=secret, namespace=names.LIQO_NAMESPACE), data={"kubeconfig": kubeconfig})
        )
        made.append((home, Secret, secret, names.LIQO_NAMESPACE))
        node = names.virtual_node_name(FOREIGN_ID)
        home.create(
            VirtualNodeResource.from_dict(
                {"metadata": {"name": node, "namespace": names.LIQO_NAMESPACE}, "spec": {"clusterID": FOREIGN_ID}}
            )
        )
        made.append((home, VirtualNodeResource, node, names.LIQO_NAMESPACE))
        create_namespace(home, NAMESPACE)
        made.append((home, Namespace, NAMESPACE, None))
        yield
    finally:
        remove(home, made)


def remove(home: Client, made: list[tuple[Client, Any, str, str | None]]) -> None:
    """What the fixture made, each whatever became of the others; then waits until the CRDs and namespaces
    are gone: the next module's stack declares them (a namespace still terminating refuses it)."""
    with contextlib.suppress(ApiError):  # a failed test left it: its finalizer has no controller any more
        home.patch(
            NamespaceOffloadingResource,
            names.NAMESPACE_OFFLOADING_NAME,
            {"metadata": {"finalizers": None}},
            namespace=NAMESPACE,
            patch_type=PatchType.MERGE,
        )
    for client, kind, name, namespace in reversed(made):
        with contextlib.suppress(ApiError):
            client.delete(kind, name, namespace=namespace) if namespace else client.delete(kind, name)
    for client, kind, name, _ in made:
        if kind in (CustomResourceDefinition, Namespace):
            gone = lambda c=client, k=kind, n=name: get_or_none(c, k, n) is None  # noqa: E731
            wait_until(gone, 90, f"{kind.__name__} {name} removed")


def token_kubeconfig(dev_env: DevEnvironment, there: Client) -> bytes:
    """foreign-1's kubeconfig with the token of a ServiceAccount allowed everything in the tenant namespace,
    in place of the admin's certificate."""
    there.create(ServiceAccount(metadata=ObjectMeta(name=ROTATED, namespace=TENANT)))
    there.create(
        RoleBinding(
            metadata=ObjectMeta(name=ROTATED, namespace=TENANT),
            roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"),
            subjects=[Subject(kind="ServiceAccount", name=ROTATED, namespace=TENANT)],
        )
    )
    request = ServiceAccount.Token(metadata=ObjectMeta(name=ROTATED), spec=TokenRequestSpec(audiences=[]))
    issued: Any = there.create(request, name=ROTATED, namespace=TENANT)
    kubeconfig = yaml.safe_load(dev_env.kubeconfig(FOREIGN_ID).read_text())
    for user in kubeconfig["users"]:
        user["user"] = {"token": issued.status.token}
    return yaml.safe_dump(kubeconfig).encode()


def offloading(home: Client) -> Any:
    return get_or_none(home, NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, NAMESPACE)


def phase(home: Client) -> str | None:
    found = offloading(home)
    return None if found is None else (found.get("status") or {}).get("offloadingPhase")


def said(home: Client) -> str:
    """What the offloading's conditions for foreign-1 say."""
    found = offloading(home)
    conditions = ((found.get("status") or {}).get("remoteNamespacesConditions") or {}) if found is not None else {}
    return "; ".join(f"{c['type']}={c['status']} {c['message']}" for c in conditions.get(FOREIGN_ID, []))


def requested(there: Client) -> dict[str, str]:
    found: Any = get_or_none(there, NamespaceMapResource, MAP, TENANT)
    return dict(((found or {}).get("spec") or {}).get("desiredMapping") or {}) if found is not None else {}


def report(there: Client, entry: dict[str, str] | None) -> None:
    """As the foreign agent does: the twin's entry in the map's status (None: the twin is gone)."""
    there.patch(
        NamespaceMapResource.Status,
        MAP,
        {"status": {"currentMapping": {NAMESPACE: entry}}},
        namespace=TENANT,
        patch_type=PatchType.MERGE,
    )


def test_what_the_foreign_cluster_reports_reaches_the_offloading_through_the_watch(
    peered: None, dev_env: DevEnvironment, home: Client, foreign: dict[str, Client]
) -> None:
    there = foreign[FOREIGN_ID]

    async def scenario() -> None:
        client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("home")))
        # no timer of its own stands in for the watch: what it learns, it learns from the map's events
        controller = NamespaceOffloadingController(
            client, HOME_ID, recheck_seconds=NEVER, unreachable_retry_seconds=NEVER, refused_retry_seconds=NEVER
        )
        running = asyncio.create_task(controller.run())
        try:
            home.create(
                NamespaceOffloadingResource.from_dict(
                    {"metadata": {"name": names.NAMESPACE_OFFLOADING_NAME, "namespace": NAMESPACE}, "spec": {}}
                )
            )
            await wait_until_async(lambda: requested(there) == {NAMESPACE: TWIN}, 30, f"the twin {TWIN} requested")
            await wait_until_async(lambda: phase(home) == "InProgress", 30, "the offloading InProgress")
            # its own writes have come back to it (the status, written last, in its informer) and every
            # reconcile they caused is done: the next one can only come from a report
            key = f"{NAMESPACE}/{names.NAMESPACE_OFFLOADING_NAME}"
            await wait_until_async(
                lambda: (
                    ((controller.offloadings.store.get(key) or {}).get("status") or {}).get("offloadingPhase")
                    == "InProgress"
                    and not controller.queue.working()
                ),
                30,
                "the controller done for now",
            )

            report(there, {"remoteNamespace": TWIN, "phase": "Accepted"})
            await wait_until_async(lambda: phase(home) == "Ready", 15, "the offloading Ready once the twin is reported")

            # new credentials for foreign-1 (a token of an identity of its own, as a reissue writes them):
            # nothing at home changed, yet the watch of what foreign-1 reports moves to the new client
            first = controller.maps.client_of(FOREIGN_ID)
            set_kubeconfig(home, FOREIGN_ID, token_kubeconfig(dev_env, there))
            await wait_until_async(
                lambda: controller.maps.client_of(FOREIGN_ID) not in (None, first),
                15,
                "the map watched through the new credentials",
            )
            report(there, {"remoteNamespace": TWIN, "phase": "CreationFailed", "message": "refused after all"})
            await wait_until_async(
                lambda: "refused after all" in said(home), 15, lambda: f"the refusal reported: {said(home)}"
            )

            home.delete(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=NAMESPACE)
            await wait_until_async(lambda: NAMESPACE not in requested(there), 30, "the twin's request withdrawn")
            report(there, {"remoteNamespace": TWIN, "phase": "Terminating"})
            await wait_until_async(
                lambda: "being deleted" in said(home), 15, lambda: f"the twin reported being deleted: {said(home)}"
            )
            assert phase(home) == "Terminating", "kept while the foreign cluster says its twin is still there"

            report(there, None)
            await wait_until_async(
                lambda: (
                    get_or_none(home, NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, NAMESPACE) is None
                ),
                15,
                "the offloading gone once the twin is reported gone",
            )
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            await client.close()
            for kind in (RoleBinding, ServiceAccount):
                with contextlib.suppress(ApiError):
                    there.delete(kind, ROTATED, namespace=TENANT)

    asyncio.run(scenario())
