"""Where and how much a foreign cluster lets each home use (docs/security.md#nodes, #objects): the node
rules (runtime/api/nodeaccess.py), the agent holding pods to them, the advertisement counting only those
nodes, the twins' object limits, and the stack's config and manifests of both. The e2e test
(tests/e2e/test_foreign_guards.py) runs them against the real clusters, as the home identity."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from lightkube.resources.core_v1 import Node, Pod

from liqo_stack.declaring import config, manifests
from runtime.api import names
from runtime.api.advertisement import available_by_node
from runtime.api.nodeaccess import NodeAccess, NodeRules, covers, narrowed
from runtime.api.quota import DEFAULT_TWIN_OBJECT_LIMITS, QuotaSpec, twin_object_limits, twin_object_quota
from runtime.api.resources import QuotaResource, ShadowPodResource
from runtime.kube.packing import Packer
from tests.unit.test_grants import TENANT, TWIN, RecordingAgent

KEPT = {"key": "example.com/kept", "operator": "Equal", "value": "admins", "effect": "NoSchedule"}
GPU = {"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# what Kubernetes' DefaultTolerationSeconds gives every pod
DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]


def rules(selector: dict[str, str] | None = None, *tolerations: dict[str, Any]) -> NodeRules:
    return NodeRules.of(NodeAccess.model_validate({"selector": selector, "tolerations": list(tolerations) or None}))


# -- the rules ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("allowed", "toleration", "expected"),
    [
        (GPU, {"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, True),
        (GPU, {"key": "example.com/gpu", "value": "a100", "effect": "NoSchedule"}, True),  # a value of the key
        (GPU, {"key": "example.com/gpu", "operator": "Exists"}, False),  # every effect: more than allowed
        (GPU, {"key": "example.com/kept", "operator": "Exists", "effect": "NoSchedule"}, False),
        (GPU, {"operator": "Exists"}, False),  # every taint
        (KEPT, {"key": "example.com/kept", "value": "admins", "effect": "NoSchedule"}, True),
        (KEPT, {"key": "example.com/kept", "operator": "Exists", "effect": "NoSchedule"}, False),  # any value
        (KEPT, {"key": "example.com/kept", "value": "others", "effect": "NoSchedule"}, False),
        ({"operator": "Exists"}, KEPT, True),  # everything allowed
        (
            {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
            DEFAULT_TOLERATIONS[0],
            False,
        ),
        (
            {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
            {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
            True,  # stays less long than allowed
        ),
    ],
)
def test_a_toleration_is_allowed_when_an_allowed_one_tolerates_every_taint_it_does(
    allowed: dict[str, Any], toleration: dict[str, Any], expected: bool
) -> None:
    assert covers(allowed, toleration) is expected


def test_kubernetes_default_tolerations_always_pass_and_nothing_else_by_default() -> None:
    spec = {"containers": [{"name": "c"}], "tolerations": DEFAULT_TOLERATIONS}
    confined, problem = rules().confine(spec)
    assert problem is None and confined == spec, "nothing to change: no selector, no toleration of every taint"
    _, problem = rules().confine({**spec, "tolerations": [*DEFAULT_TOLERATIONS, GPU]})
    assert problem is not None
    assert "tolerations of taints it may not tolerate: example.com/gpu:NoSchedule" in problem
    assert "(it may tolerate node.kubernetes.io/not-ready, node.kubernetes.io/unreachable)" in problem


def test_a_pod_is_confined_to_the_selected_nodes_and_a_toleration_of_every_taint_narrowed() -> None:
    home = rules({"pool": "guests"}, GPU)
    spec = {
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"operator": "Exists"}, GPU],
        "containers": [{"name": "c"}],
    }
    confined, problem = home.confine(spec)
    assert problem is None
    assert confined["nodeSelector"] == {"disk": "ssd", "pool": "guests"}, "the home's selector added to its own"
    assert confined["tolerations"] == [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists"},
        GPU,
    ]
    assert spec["nodeSelector"] == {"disk": "ssd"}, "the input is not changed"
    # a toleration of every NoExecute taint for 30 s: the allowed ones of that effect, for 30 s
    assert narrowed([{"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}], home.tolerations) == [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    ]


def test_a_pod_naming_a_node_contradicting_the_selector_or_tolerating_a_kept_taint_is_refused() -> None:
    home = rules({"pool": "guests"}, GPU)
    plain = {"containers": [{"name": "c"}]}
    for spec, said in (
        ({**plain, "nodeName": "foreign-1-worker-0"}, "spec.nodeName is the foreign cluster's scheduler's"),
        ({**plain, "nodeSelector": {"pool": "admins"}}, "nodeSelector pool=admins (its nodes carry pool=guests)"),
        ({**plain, "tolerations": [KEPT]}, "may not tolerate: example.com/kept=admins:NoSchedule"),
        ({**plain, "tolerations": [{"key": "example.com/gpu", "operator": "Exists"}]}, "example.com/gpu ("),
    ):
        confined, problem = home.confine(spec)
        assert problem is not None and said in problem, problem
        assert confined == spec


def node(name: str, labels: dict[str, str], *taints: dict[str, str]) -> Any:
    return Node.from_dict(
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": list(taints)},
            "status": {"allocatable": {"cpu": "4", "pods": "10"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )


def test_the_advertisement_counts_only_the_nodes_the_home_may_use() -> None:
    nodes = [
        node("guest", {"pool": "guests"}),
        node("gpu", {"pool": "guests"}, {"key": "example.com/gpu", "value": "a100", "effect": "NoSchedule"}),
        node("kept", {"pool": "guests"}, {"key": "example.com/kept", "value": "admins", "effect": "NoSchedule"}),
        node("soft", {"pool": "guests"}, {"key": "example.com/busy", "effect": "PreferNoSchedule"}),  # no bar
        node("other", {"pool": "admins"}),
    ]
    assert set(available_by_node("home", nodes, [], rules({"pool": "guests"}, GPU))) == {"guest", "gpu", "soft"}
    assert set(available_by_node("home", nodes, [], rules())) == {"guest", "soft", "other"}, "no taint tolerated"
    assert len(available_by_node("home", nodes, [])) == 5, "no rules: every node (no Quota known)"


# -- the agent ------------------------------------------------------------------------------------
def shadow_with(name: str, **pod: Any) -> Any:
    return ShadowPodResource.from_dict(
        {
            "metadata": {"name": name, "namespace": TWIN, "labels": {names.ORIGIN_LABEL: "home"}},
            "spec": {"pod": {"containers": [{"name": "c", "image": "i"}], **pod}},
        }
    )


def test_the_agent_makes_pods_on_the_homes_nodes_refuses_a_kept_taint_and_retries_when_the_quota_changes() -> None:
    nodes = {"selector": {"pool": "guests"}}

    async def scenario() -> tuple[RecordingAgent, list[str]]:
        recording = RecordingAgent.with_quota({"limitsEnforcement": "None", "nodes": nodes})
        requeued: list[str] = []
        recording.grants.requeue = requeued.append
        packer = Packer(ShadowPodResource)
        for name, pod in (("plain", {}), ("kept", {"tolerations": [KEPT]})):
            recording.agent.shadows.store[f"{TWIN}/{name}"] = packer.pack(shadow_with(name, **pod))
            await recording.agent.reconcile(f"{TWIN}/{name}")
        # the foreign admin lets the home tolerate it: the refused one is tried again
        allowed = QuotaResource.from_dict(
            {
                "metadata": {"name": "home", "namespace": TENANT, "resourceVersion": "2"},
                "spec": {"limitsEnforcement": "None", "nodes": {**nodes, "tolerations": [KEPT]}},
            }
        )
        recording.grants.quotas.store[f"{TENANT}/home"] = allowed
        recording.grants._on_grant_changed(cast(Any, type("E", (), {"key": f"{TENANT}/home"})))
        await recording.agent.reconcile(f"{TWIN}/kept")
        return recording, requeued

    recording, requeued = asyncio.run(scenario())
    assert recording.created == ["plain", "kept"]
    spec = recording.specs["plain"]
    assert spec is not None and spec["nodeSelector"] == {"pool": "guests"}
    refused = next(p for p in recording.patches if p.get("reason") == "CreateFailed")
    assert (
        "the pod leaves the nodes home cluster home may use in foreign-1 (Quota liqo-tenant-home/home)"
        in (refused["message"])
    )
    assert "example.com/kept=admins:NoSchedule" in refused["message"]
    assert requeued == [f"{TWIN}/kept"]


class PatchRecorder:
    def __init__(self) -> None:
        self.patches: list[Any] = []

    async def patch(self, resource: Any, name: str, body: Any, **_: Any) -> Any:
        self.patches.append(body)


def test_a_toleration_a_live_pod_gains_is_carried_only_when_the_home_may_have_it() -> None:
    async def patches_for(toleration: dict[str, Any]) -> list[Any]:
        recording = RecordingAgent.with_quota({"nodes": {"tolerations": [GPU]}})
        agent = recording.agent
        client = PatchRecorder()
        agent.client = cast(Any, client)
        live = Pod.from_dict(
            {
                "metadata": {"name": "p", "namespace": TWIN, "labels": {names.ORIGIN_LABEL: "home"}},
                "spec": {"containers": [{"name": "c", "image": "i"}], "tolerations": DEFAULT_TOLERATIONS},
            }
        )
        wanted = shadow_with("p", tolerations=[*DEFAULT_TOLERATIONS, toleration])
        await update_live_pod(agent, wanted, live)
        return client.patches

    assert asyncio.run(patches_for(GPU)) == [{"spec": {"tolerations": [*DEFAULT_TOLERATIONS, GPU]}}]
    assert asyncio.run(patches_for(KEPT)) == [], "not carried: the home may not tolerate it"


async def update_live_pod(agent: Any, shadow: Any, pod: Any) -> bool:
    """The real `_update_pod` (RecordingAgent replaces it with a recorder)."""
    from runtime.controllers.shadowpod import ShadowPodController

    return await ShadowPodController._update_pod(agent, shadow, pod, None)


# -- the twins' object limits -------------------------------------------------------------------
def test_each_twin_gets_the_default_object_limits_with_the_quotas_over_them() -> None:
    assert twin_object_limits(None) == DEFAULT_TWIN_OBJECT_LIMITS
    raised = QuotaSpec.model_validate(
        {"objects": {"count/configmaps": "5000", "count/ingresses.networking.k8s.io": "5"}}
    )
    limits = twin_object_limits(raised)
    assert limits == {
        **DEFAULT_TWIN_OBJECT_LIMITS,
        "count/configmaps": "5000",
        "count/ingresses.networking.k8s.io": "5",
    }
    quota = twin_object_quota("demo-home", "home", "foreign-1", limits)
    assert quota["metadata"]["name"] == names.TWIN_OBJECTS_QUOTA and quota["metadata"]["namespace"] == "demo-home"
    assert quota["spec"] == {"hard": limits}
    assert not any("pods" in key or key.startswith(("requests.cpu", "limits.")) for key in DEFAULT_TWIN_OBJECT_LIMITS)


def test_the_home_identity_may_not_touch_the_object_limits_and_the_agent_keeps_them() -> None:
    def granted(rules: list[dict[str, Any]]) -> set[str]:
        return {r for rule in rules if "" in rule["apiGroups"] for r in rule["resources"]}

    assert "resourcequotas" not in granted(manifests.home_in_twin_namespace_rules())
    assert "resourcequotas" not in granted(manifests.HOME_IDENTITY_TENANT_RULES)
    agent = next(r for r in manifests.FOREIGN_AGENT_RULES if "resourcequotas" in r["resources"])
    assert set(agent["verbs"]) == {"get", "create", "update", "patch"}


# -- the stack: config and manifests ---------------------------------------------------------------
def one_stack(**foreign: Any) -> config.StackConfig:
    return config.parse(
        {
            "home": {"clusterId": "home", "kubeconfigPath": "/k/home"},
            "foreignClusters": [{"clusterId": "foreign-1", "kubeconfigPath": "/k/f1", **foreign}],
        }
    )


def refused(**foreign: Any) -> str:
    with pytest.raises(config.ConfigError) as err:
        one_stack(**foreign)
    return str(err.value)


def test_bad_node_access_and_object_limits_are_refused_naming_the_field() -> None:
    assert "liqo:foreignClusters[0].nodes.tolerations[0]: a toleration without a key tolerates every taint" in (
        refused(nodes={"tolerations": [{"value": "x"}]})
    )
    assert "operator Exists matches any value" in refused(
        nodes={"tolerations": [{"key": "a", "operator": "Exists", "value": "v"}]}
    )
    assert "tolerationSeconds goes with effect NoExecute only" in refused(
        nodes={"tolerations": [{"key": "a", "tolerationSeconds": 5}]}
    )
    assert "liqo:foreignClusters[0].nodes.selector: label key" in refused(nodes={"selector": {"bad key": "x"}})
    for limit in ("pods", "count/pods", "requests.cpu", "memory"):
        assert f"liqo:foreignClusters[0].grant.objects: {limit!r} is no object limit" in (
            refused(grant={"objects": {limit: "1"}})
        )
    assert "is not a Kubernetes quantity" in refused(grant={"objects": {"count/secrets": "many"}})
    pools = [{"name": "gpu", "nodeSelector": {"pool": "admins"}}]
    assert "virtualNodes[0].nodeSelector pool=admins: the home may use only nodes with pool=guests" in (
        refused(nodes={"selector": {"pool": "guests"}}, virtualNodes=pools)
    )
    assert "nodes: declared by the foreign cluster's own stack (liqo:foreignSide.homes[].nodes)" in refused(
        kubeconfigPath=None, identityKubeconfig="x", nodes={"selector": {"pool": "guests"}}
    )


def test_the_quota_carries_the_nodes_and_object_limits_and_nothing_when_none_are_set() -> None:
    plain = one_stack().foreign_clusters[0]
    assert set(plain.grant.quota(plain.nodes).to_wire()) == {"limitsEnforcement", "resources", "cordoned"}, (
        "an existing stack's Quota is unchanged"
    )
    declared = one_stack(
        nodes={"selector": {"pool": "guests"}, "tolerations": [{"key": "example.com/gpu", "operator": "Exists"}]},
        grant={"objects": {"count/configmaps": 100}},
    ).foreign_clusters[0]
    spec = manifests.quota("home", declared.grant.quota(declared.nodes), "peering")["spec"]
    assert spec["nodes"] == {
        "selector": {"pool": "guests"},
        "tolerations": [{"key": "example.com/gpu", "operator": "Exists"}],
    }
    assert spec["objects"] == {"count/configmaps": "100"}
    # a foreign side's own stack: the same settings per home
    side = config.parse_any(
        {
            "foreignSide": {
                "clusterId": "foreign-1",
                "kubeconfigPath": "/k/f1",
                "homes": [{"clusterId": "home", "nodes": {"selector": {"pool": "guests"}}}],
            }
        }
    )
    assert isinstance(side, config.ForeignSideStackConfig)
    home = side.foreign_side.homes[0]
    assert home.grant.quota(home.nodes).to_wire()["nodes"] == {"selector": {"pool": "guests"}}


def test_each_homes_binding_reads_its_own_quota_for_its_own_twins() -> None:
    binding = manifests.shadowpod_nodes_binding("home-2", "peering")
    assert binding["spec"]["policyName"] == manifests.shadowpod_nodes_policy()["metadata"]["name"]
    assert binding["spec"]["paramRef"] == {
        "name": "home-2",
        "namespace": "liqo-tenant-home-2",
        "parameterNotFoundAction": "Deny",
    }
    assert binding["spec"]["matchResources"] == {"namespaceSelector": {"matchLabels": {names.ORIGIN_LABEL: "home-2"}}}
    policy = manifests.shadowpod_nodes_policy()["spec"]
    assert policy["paramKind"] == {"apiVersion": names.API_VERSION, "kind": "Quota"}
    assert policy["matchConditions"] == manifests.shadowpod_policy()["spec"]["matchConditions"], "home identities only"
