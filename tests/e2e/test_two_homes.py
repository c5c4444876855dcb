"""Two home clusters on one foreign cluster, each side declaring its own half (docs/security.md).

foreign-1's admins declare its side in a stack of their own (liqo:foreignSide), serving `home` and
`home-2` (a second home cluster this module adds to the dev clusters); each home's stack peers with
the identity that stack issued (identityKubeconfig) and holds no admin kubeconfig of foreign-1. Each
home runs its own runtime; foreign-1's agent serves both. Each home gets its own tenant, identity,
twins and grant, and neither identity reaches the other's.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from lightkube import ApiError, Client, KubeConfig
from lightkube.resources.core_v1 import Event, Namespace, Node, Pod, Secret
from pulumi import automation as auto

from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from liqo_stack.operating.cli.params import DEFAULT_POLICY_PACK
from runtime.api import names
from runtime.api.quantities import parse_quantity
from runtime.api.resources import QuotaResource, ShadowPodResource
from tests.e2e.conftest import RuntimeSlot, wait_served
from tests.support.cli import run_preview
from tests.support.kube import get_or_none, listener_port, wait_phase, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

FOREIGN = "foreign-1"
HOMES = ("home", "home-2")
NAMESPACE = "two-homes-shop"  # its own: the namespace is deleted when the module ends
GRANT_OF_HOME_2 = "1"  # cpu


@dataclass
class Home:
    cluster_id: str
    client: Client
    stack: auto.Stack
    runtime: ExternalRuntime
    identity: Path  # the kubeconfig foreign-1's stack issued to it

    @property
    def twin(self) -> str:
        return f"{NAMESPACE}-{self.cluster_id}"


@dataclass
class TwoHomes:
    foreign_side: auto.Stack
    homes: dict[str, Home]
    foreign: Client


def identity_of(side: auto.Stack, home_id: str, folder: Path) -> Path:
    """What foreign-1's admins hand to a home team: the identity in their stack's output."""
    issued = side.outputs()["homeIdentities"].value[home_id]
    path = folder / f"identity-{home_id}.yaml"
    path.write_text(issued)
    return path


@pytest.fixture(scope="module")
def two_homes(
    dev_env: DevEnvironment,
    pulumi_env: PulumiEnvironment,
    project_dir: Path,
    session_layout: ClusterLayout,
    webhook_port: int,
    runtime_slot: RuntimeSlot,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[TwoHomes]:
    runtime_slot.release()  # no other runtime serves foreign-1 meanwhile
    folder = tmp_path_factory.mktemp("two-homes")
    dev_env.up(dataclasses.replace(session_layout, homes=2), progress=lambda message: print(f"[clusters] {message}"))
    side = pulumi_env.stack_for_directory(project_dir, "foreign-1-side")
    pulumi_env.set_liqo_config(
        side,
        {
            "foreignSide": {
                "clusterId": FOREIGN,
                "kubeconfigPath": str(dev_env.kubeconfig(FOREIGN)),
                "homes": [{"clusterId": "home"}, {"clusterId": "home-2", "grant": {"resources": {"cpu": "1"}}}],
            },
            "runtime": {"mode": "external"},
        },
    )
    homes: dict[str, Home] = {}
    try:
        side.up(on_output=print)
        for index, home_id in enumerate(HOMES):
            stack = pulumi_env.stack_for_directory(project_dir, f"{home_id}-peered")
            identity = identity_of(side, home_id, folder)
            config: dict[str, Any] = {
                "home": {
                    "clusterId": home_id,
                    "kubeconfigPath": str(dev_env.kubeconfig(home_id)),
                    "podCIDR": dataclasses.replace(session_layout, homes=2).pod_cidr(home_id),
                },
                "namespaces": [{"name": NAMESPACE, "podOffloadingStrategy": "Remote"}],
            }
            webhook = webhook_port if index == 0 else listener_port()
            config["runtime"] = {"mode": "external", "webhookPort": webhook}
            pulumi_env.set_liqo_config(stack, config)
            foreign_clusters = [
                {
                    "clusterId": FOREIGN,
                    "identityKubeconfig": identity.read_text(),
                    "podCIDR": session_layout.pod_cidr(FOREIGN),
                }
            ]  # a secret: it holds the identity's token
            stack.set_config("liqo:foreignClusters", auto.ConfigValue(json.dumps(foreign_clusters), secret=True))
            runtime = ExternalRuntime(
                {home_id: dev_env.kubeconfig(home_id), FOREIGN: dev_env.kubeconfig(FOREIGN)},
                home_id,
                webhook_port=webhook,
                kubelet_ports={FOREIGN: listener_port()},
                state_dir=folder / f"runtime-{home_id}",
                agents=index == 0,  # one foreign agent serves both homes
            )
            homes[home_id] = Home(home_id, dev_env.client(home_id), stack, runtime, identity)
            stack.up(on_output=print)
            runtime.start_all()
            wait_served(homes[home_id].client, runtime)
        yield TwoHomes(side, homes, dev_env.client(FOREIGN))
    finally:
        for home in reversed(list(homes.values())):  # each destroyed while its runtime runs (finalizers)
            home.stack.destroy(on_output=print)
            if get_or_none(home.client, Namespace, NAMESPACE) is not None:
                home.client.delete(Namespace, NAMESPACE)
            home.runtime.stop_all()
            home.stack.workspace.remove_stack(home.stack.name)
        side.destroy(on_output=print)
        side.workspace.remove_stack(side.name)
        dev_env.delete("home-2", progress=print)


def can_i(dev_env: DevEnvironment, kubeconfig: Path, *args: str) -> str:
    command = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), "auth", "can-i", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.strip()


def running(client: Client, namespace: str, name: str) -> Any:
    pod = cast(Any, get_or_none(client, Pod, name, namespace))
    return pod if pod is not None and pod.status.phase == "Running" else None


def pod_manifest(name: str, namespace: str, cpu: str) -> Pod:
    body = {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]},
    }
    return cast(Pod, Pod.from_dict(body))


def test_each_home_peers_through_its_own_tenant_identity_and_grant_with_no_admin_kubeconfig(
    two_homes: TwoHomes, pulumi_env: PulumiEnvironment
) -> None:
    for home in two_homes.homes.values():
        deployment = home.stack.export_stack().deployment
        assert deployment is not None
        providers = {
            r["urn"].rpartition("::")[2] for r in deployment["resources"] if r["type"] == "pulumi:providers:kubernetes"
        }
        assert providers == {home.cluster_id}, "no provider, so no admin credentials, of foreign-1"
        kubeconfig = yaml.safe_load(home.identity.read_text())
        assert kubeconfig["users"][0]["name"] == names.home_identity_name(home.cluster_id)
        tenant = cast(Any, two_homes.foreign.get(Namespace, names.tenant_namespace(home.cluster_id)))
        assert tenant.metadata.labels[names.TENANT_HOME_LABEL] == home.cluster_id
    quota = two_homes.foreign.get(QuotaResource, "home-2", namespace=names.tenant_namespace("home-2"))
    assert quota["spec"]["resources"] == {"cpu": GRANT_OF_HOME_2}
    # the policy pack holds each identity it issues to the least privilege, as in a home's stack
    side_preview = two_homes.foreign_side.preview(policy_packs=[str(DEFAULT_POLICY_PACK)], on_output=print)
    assert "homeIdentities.home-2" in side_preview.stdout, "the foreign side says what the homes must set"
    assert "liqo-home-identity-least-privilege" not in side_preview.stdout
    # `liqo-stack preview` of a home stack reads foreign-1 as its identity: nothing to foresee, no failure
    code, output = run_preview(two_homes.homes["home"].stack, pulumi_env, "text")
    assert code in (0, 2) and "no resource changes" in output, output  # 2: an advisory policy speaks


@pytest.fixture(scope="module")
def offloaded_in_both(two_homes: TwoHomes) -> TwoHomes:
    for home in two_homes.homes.values():
        if get_or_none(home.client, Namespace, NAMESPACE) is None:
            home.client.create(cast(Namespace, Namespace.from_dict({"metadata": {"name": NAMESPACE}})))
        try:
            wait_phase(home.client, NAMESPACE, "Ready", timeout=90)
        except TimeoutError as error:
            home.runtime.check_alive()  # a part that exited says so, with its log's tail
            raise TimeoutError(f"{home.cluster_id}: {error}") from error
    return two_homes


def test_neither_identity_reaches_the_other_homes_tenant_twins_shadowpods_or_secrets(
    offloaded_in_both: TwoHomes, dev_env: DevEnvironment
) -> None:
    one, other = offloaded_in_both.homes["home"], offloaded_in_both.homes["home-2"]
    for me, them in ((one, other), (other, one)):
        tenant = names.tenant_namespace(them.cluster_id)
        for verb, kind, namespace in [
            ("get", "shadowpods.offloading.liqo.io", them.twin),
            ("create", "shadowpods.offloading.liqo.io", them.twin),
            ("list", "pods", them.twin),
            ("get", "secrets", them.twin),
            ("create", "secrets", them.twin),
            ("get", "namespacemaps.offloading.liqo.io", tenant),
            ("patch", "namespacemaps.offloading.liqo.io", tenant),
            ("get", "secrets", tenant),
            ("get", "resourceadvertisements.offloading.liqo.io", tenant),
        ]:
            assert can_i(dev_env, me.identity, verb, kind, "-n", namespace) == "no", (me.cluster_id, verb, kind)
        assert can_i(dev_env, me.identity, "create", "shadowpods.offloading.liqo.io", "-n", me.twin) == "yes"
        attacker = Client(KubeConfig.from_file(me.identity))
        shadow = {
            "metadata": {"name": "intruder", "namespace": them.twin, "labels": {names.ORIGIN_LABEL: me.cluster_id}},
            "spec": {"pod": {"containers": [{"name": "c", "image": "nginx"}]}},
        }
        with pytest.raises(ApiError) as refused:
            attacker.create(ShadowPodResource.from_dict(shadow))
        assert refused.value.status.code == 403
        with pytest.raises(ApiError) as refused:
            list(attacker.list(Secret, namespace=them.twin))  # lazy: the request goes out when read
        assert refused.value.status.code == 403


def test_each_home_runs_within_its_own_grant(offloaded_in_both: TwoHomes) -> None:
    one, other = offloaded_in_both.homes["home"], offloaded_in_both.homes["home-2"]
    for home in (one, other):
        home.client.create(pod_manifest("small", NAMESPACE, "100m"))
    for home in (one, other):
        wait_until(partial(running, home.client, NAMESPACE, "small"), 90, f"{home.cluster_id}'s pod Running")
    for home in (one, other):
        home.client.create(pod_manifest("large", NAMESPACE, "2"))
    wait_until(lambda: running(one.client, NAMESPACE, "large"), 90, "home's 2-cpu pod Running (its grant: all)")

    def refused() -> Any:
        events = other.client.list(Event, namespace=NAMESPACE, fields={"involvedObject.name": "large"})
        return next((e for e in events if e.type == "Warning" and "exceeds what foreign-1" in (e.message or "")), None)

    wait_until(refused, 60, "home-2's 2-cpu pod refused: its grant is 1 cpu")
    assert cast(Any, other.client.get(Pod, "large", namespace=NAMESPACE)).status.phase == "Pending"
    other.client.delete(Pod, "large", namespace=NAMESPACE, grace_period=0)


def test_each_virtual_node_shrinks_by_what_the_other_homes_pods_take(offloaded_in_both: TwoHomes) -> None:
    one, other = offloaded_in_both.homes["home"], offloaded_in_both.homes["home-2"]
    node = names.virtual_node_name(FOREIGN)

    def cpu_of(home: Home) -> Decimal:
        capacity = cast(Any, home.client.get(Node, node)).status.capacity
        return parse_quantity(capacity["cpu"]) or Decimal(0)

    before = cpu_of(other)
    one.client.create(pod_manifest("big", NAMESPACE, "8"))
    wait_until(lambda: running(one.client, NAMESPACE, "big"), 90, "home's 8-cpu pod Running")
    # docs/offloading.md: home-2 is offered a share of what is free, and home's pods take 8 cpu of it
    wait_until(lambda: cpu_of(other) <= before - 7, 60, f"home-2's virtual node below {before - 7} cpu")
    one.client.delete(Pod, "big", namespace=NAMESPACE, grace_period=0)


def test_unpeering_one_home_leaves_the_others_pods_and_twins_untouched(
    offloaded_in_both: TwoHomes, dev_env: DevEnvironment
) -> None:
    one, other = offloaded_in_both.homes["home"], offloaded_in_both.homes["home-2"]
    pod = running(one.client, NAMESPACE, "small")
    remote = cast(Any, offloaded_in_both.foreign.get(Pod, "small", namespace=one.twin))
    twin = cast(Any, offloaded_in_both.foreign.get(Namespace, one.twin))
    other.stack.destroy(on_output=print)  # home-2 unpeers (its runtime still runs: it lets go of its node)
    wait_until(lambda: get_or_none(offloaded_in_both.foreign, Namespace, other.twin) is None, 90, "home-2's twin gone")
    assert cast(Any, running(one.client, NAMESPACE, "small")).metadata.uid == pod.metadata.uid
    assert cast(Any, offloaded_in_both.foreign.get(Pod, "small", namespace=one.twin)).metadata.uid == (
        remote.metadata.uid
    )
    assert cast(Any, offloaded_in_both.foreign.get(Namespace, one.twin)).metadata.uid == twin.metadata.uid
