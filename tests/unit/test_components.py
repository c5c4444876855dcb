"""Shape of the program with Pulumi's mocks: which objects go to which cluster, in what order."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from runtime.api import names


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.resources.append(args)
        outputs = dict(args.inputs)
        if args.typ == "kubernetes:core/v1:Secret" and args.inputs.get("type") == "kubernetes.io/service-account-token":
            # what the foreign cluster's token controller fills in (pulumi-kubernetes waits for it)
            outputs["data"] = {"token": base64.b64encode(b"token-of-home").decode(), "ca.crt": "Q0E="}
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None

    def objects(self) -> list[pulumi.runtime.MockResourceArgs]:
        """The Kubernetes objects: pulumi-kubernetes resources (not its providers)."""
        return [r for r in self.resources if r.typ.startswith("kubernetes:")]

    @staticmethod
    def cluster_of(resource: pulumi.runtime.MockResourceArgs) -> str:
        """The cluster id, from the resource's provider: `<provider urn>::<id>`, whose urn ends with its name."""
        return str(resource.provider).split("::")[-2]

    def in_cluster(self, cluster_id: str) -> list[dict[str, Any]]:
        return [r.inputs for r in self.objects() if self.cluster_of(r) == cluster_id]

    def by_name(self, name: str) -> pulumi.runtime.MockResourceArgs:
        return next(r for r in self.resources if r.name == name)


# how the engine is told a value is secret (pulumi's wire signature)
SECRET_SIG_KEY, SECRET_SIG = "4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270"


def stack_config(tmp_path: Path) -> dict[str, Any]:
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443', certificate-authority-data: QURNSU4=}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: admin}}]\n"
    )
    return {
        "liqo:home": json.dumps({"clusterId": "home", "kubeconfigPath": str(kubeconfig)}),
        "liqo:foreignClusters": json.dumps(
            [
                {"clusterId": "foreign-1", "kubeconfigPath": str(kubeconfig), "labels": {"region": "europe"}},
                {"clusterId": "foreign-2", "kubeconfigPath": str(kubeconfig), "sharingPercentage": 50},
            ]
        ),
        "liqo:namespaces": json.dumps([{"name": "demo", "clusterSelector": ["region in (europe)"]}]),
    }


@pytest.fixture
def mocks(tmp_path: Path) -> Iterator[RecordingMocks]:
    # Pulumi's test mode uses the thread's current event loop; asyncio.run() elsewhere leaves none.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    recorder = RecordingMocks()
    pulumi.runtime.set_mocks(recorder, project="liqo-stack", stack="unit", preview=False)
    pulumi.runtime.set_all_config(stack_config(tmp_path))
    yield recorder
    pulumi.runtime.set_all_config({})
    asyncio.set_event_loop(None)
    loop.close()


@pulumi.runtime.test  # type: ignore[untyped-decorator]
def run_program() -> None:
    """Registers the whole program; returns once every registration has reached the mocks."""
    from liqo_stack.declaring.program import main

    main()


READS_PODS = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
ROLE_REF = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}
SAMPLE_FIELDS = {
    "Secret": ("data", "data", {"a": "YQ=="}),
    "ConfigMap": ("data", "data", {"a": "b"}),
    "ClusterRole": ("rules", "rules", READS_PODS),
    "Role": ("rules", "rules", READS_PODS),
    "ClusterRoleBinding": ("roleRef", "role_ref", ROLE_REF),
    "RoleBinding": ("roleRef", "role_ref", ROLE_REF),
    "RuntimeClass": ("handler", "handler", "runc"),
    "StorageClass": ("provisioner", "provisioner", "example.com/none"),
    "MutatingWebhookConfiguration": ("webhooks", "webhooks", [{"name": "a.example.com"}]),
    "ValidatingWebhookConfiguration": ("webhooks", "webhooks", [{"name": "a.example.com"}]),
    "ServiceAccount": ("automountServiceAccountToken", "automount_service_account_token", False),
    "Namespace": ("spec", "spec", {"finalizers": ["kubernetes"]}),
}


@pulumi.runtime.test  # type: ignore[untyped-decorator]
def declare_each_built_in_kind_twice() -> None:
    """Each kind the stack declares, once as the stack does (`declare`) and once through pulumi-kubernetes'
    typed class of that kind, from the same manifest."""
    import pulumi_kubernetes as k8s

    from liqo_stack.declaring.components.cluster import APPLY_ANNOTATIONS, BUILT_IN_KINDS, annotated, declare

    for api_version, kind in sorted(BUILT_IN_KINDS):
        manifest: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}
        typed_fields: dict[str, Any] = {"metadata": annotated(manifest, APPLY_ANNOTATIONS)["metadata"]}
        # a field of each kind, the fields the typed classes require among them
        field, typed_field, value = SAMPLE_FIELDS.get(kind, ("spec", "spec", {"a": "b"}))
        manifest[field] = typed_fields[typed_field] = value
        if kind == "Secret":
            manifest["stringData"] = typed_fields["string_data"] = {"b": "b"}
        declare(f"ours-{kind}", manifest, pulumi.ResourceOptions())
        group, _, version = api_version.rpartition("/")
        typed = getattr(getattr(getattr(k8s, group.split(".")[0] or "core"), version), kind)
        typed(f"sdk-{kind}", **typed_fields)


def test_each_kind_reaches_the_engine_as_pulumi_kubernetes_typed_class_sends_it(mocks: RecordingMocks) -> None:
    declare_each_built_in_kind_twice()

    def sent(prefix: str) -> dict[str, tuple[str, dict[str, Any]]]:
        return {r.name.removeprefix(prefix): (r.typ, r.inputs) for r in mocks.resources if r.name.startswith(prefix)}

    ours, sdks = sent("ours-"), sent("sdk-")
    assert len(ours) == 18 and ours == sdks
    assert ours["Secret"][1]["stringData"][SECRET_SIG_KEY] == SECRET_SIG, "a Secret's data stays secret"


def test_each_cluster_gets_its_objects(mocks: RecordingMocks) -> None:
    run_program()

    home = {(m["kind"], m["metadata"]["name"]) for m in mocks.in_cluster("home")}
    assert ("Namespace", names.LIQO_NAMESPACE) in home
    assert ("RuntimeClass", names.RUNTIME_CLASS_NAME) in home
    assert ("StorageClass", names.STORAGE_CLASS_NAME) in home
    assert ("CustomResourceDefinition", "namespaceoffloadings.offloading.liqo.io") in home
    assert ("CustomResourceDefinition", "virtualnodes.offloading.liqo.io") in home
    assert ("CustomResourceDefinition", "shadowpods.offloading.liqo.io") not in home
    assert ("VirtualNode", "liqo-foreign-1") in home
    assert ("VirtualNode", "liqo-foreign-2") in home
    assert ("Secret", "liqo-credentials-foreign-1") in home
    assert ("Deployment", "liqo-virtual-kubelet-foreign-1") in home
    assert ("NamespaceOffloading", "offloading") in home
    for foreign in ("foreign-1", "foreign-2"):
        objects = {(m["kind"], m["metadata"]["name"]) for m in mocks.in_cluster(foreign)}
        assert ("Namespace", "liqo-tenant-home") in objects
        assert ("ServiceAccount", "liqo-home-home") in objects
        assert ("Role", "liqo-home-home") in objects
        assert ("CustomResourceDefinition", "shadowpods.offloading.liqo.io") in objects
        assert ("Deployment", names.FOREIGN_AGENT) in objects
        assert ("VirtualNode", "liqo-foreign-1") not in objects


def test_external_mode_scales_runtime_deployments_to_zero(mocks: RecordingMocks) -> None:
    run_program()

    deployments = [m for r in mocks.objects() if (m := r.inputs)["kind"] == "Deployment"]
    assert len(deployments) == 1 + 2 + 2  # controller-manager, two virtual kubelets, two foreign agents
    assert {d["spec"]["replicas"] for d in deployments} == {0}
    # nothing to roll out, nothing for pulumi-kubernetes to wait for (nor to warn about)
    assert {d["metadata"]["annotations"].get("pulumi.com/skipAwait") for d in deployments} == {"true"}


def test_the_virtual_kubelet_announces_its_pod_ip_as_node_address(mocks: RecordingMocks) -> None:
    """docs/reflection.md: the offloaded pods' hostIP is the virtual kubelet pod's IP (downward API)."""
    run_program()

    [deployment] = [
        m
        for m in mocks.in_cluster("home")
        if m["kind"] == "Deployment" and m["metadata"]["name"] == "liqo-virtual-kubelet-foreign-1"
    ]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert "--node-address=$(POD_IP)" in container["args"]
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in container["env"]


def test_virtual_node_carries_the_resolved_config(mocks: RecordingMocks) -> None:
    run_program()

    node = next(
        m for m in mocks.in_cluster("home") if m["kind"] == "VirtualNode" and "foreign-2" in m["metadata"]["name"]
    )
    spec = node["spec"]
    assert spec["clusterID"] == "foreign-2"
    assert spec["sharingPercentage"] == 50
    assert spec["labels"] == {names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE, names.REMOTE_CLUSTER_ID_LABEL: "foreign-2"}
    assert spec["kubeconfigSecretRef"] == {"name": "liqo-credentials-foreign-2"}
    assert spec["reflection"]["secret"] == {"type": "DenyList", "workers": 3}


def test_plan_shows_twin_namespaces_and_virtual_nodes(tmp_path: Path) -> None:
    from liqo_stack.declaring.config import from_pulumi_config
    from liqo_stack.declaring.plan import stack_plan

    plan = stack_plan(from_pulumi_config(stack_config(tmp_path)))
    assert plan["namespaces"]["demo"]["clusters"] == {"foreign-1": {"twinNamespace": "demo-home"}}
    assert plan["foreignClusters"]["foreign-2"]["virtualNode"] == "liqo-foreign-2"
    assert plan["foreignClusters"]["foreign-2"]["capacity"]["sharingPercentage"] == 50
    assert plan["foreignClusters"]["foreign-1"]["labels"]["region"] == "europe"
    assert plan["foreignClusters"]["foreign-1"]["taints"] == [
        {"key": names.VIRTUAL_NODE_TAINT_KEY, "value": "true", "effect": "NoExecute"}
    ]


def test_bad_config_fails_before_any_resource(mocks: RecordingMocks, tmp_path: Path) -> None:
    config = stack_config(tmp_path)
    foreign = json.loads(config["liqo:foreignClusters"])
    foreign[1]["sharingPercentage"] = 150
    config["liqo:foreignClusters"] = json.dumps(foreign)
    pulumi.runtime.set_all_config(config)
    with pytest.raises(Exception, match=r"liqo:foreignClusters\[1\]\.sharingPercentage: .*less than or equal to 100"):
        run_program()
    assert mocks.resources == []


def deployment_named(mocks: RecordingMocks, cluster_id: str, name: str) -> dict[str, Any]:
    [found] = [m for m in mocks.in_cluster(cluster_id) if m["kind"] == "Deployment" and m["metadata"]["name"] == name]
    return found


def test_every_component_runs_with_the_configured_leader_election(mocks: RecordingMocks, tmp_path: Path) -> None:
    config = stack_config(tmp_path)
    config["liqo:runtime"] = json.dumps({"leaderElection": {"leaseDurationSeconds": 30, "renewDeadlineSeconds": 20}})
    pulumi.runtime.set_all_config(config)
    run_program()

    deployments = [m for r in mocks.objects() if (m := r.inputs)["kind"] == "Deployment"]
    assert len(deployments) == 5
    for deployment in deployments:
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert container["args"][-3:] == [
            "--leader-elect-lease-duration=30",
            "--leader-elect-renew-deadline=20",
            "--leader-elect-retry-period=2",
        ]


def test_every_deployment_runs_a_command_line_the_runtime_accepts(mocks: RecordingMocks, tmp_path: Path) -> None:
    """The containers' args are parsed by the runtime's own parser: a flag in the wrong place (a
    top-level one after the component's command) would crash-loop every pod in cluster mode."""
    from runtime.__main__ import build_parser

    config = stack_config(tmp_path)
    config["liqo:runtime"] = json.dumps({"mode": "cluster", "replicas": 2})
    pulumi.runtime.set_all_config(config)
    run_program()
    deployments = [m for r in mocks.objects() if (m := r.inputs)["kind"] == "Deployment"]
    assert deployments
    for deployment in deployments:
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"] for e in container.get("env") or []}
        # the kubelet expands $(VAR) from the container's env (the downward API's pod IP)
        expanded = [a.replace("$(POD_IP)", "10.0.0.7") if "POD_IP" in env else a for a in container["args"]]
        args = build_parser().parse_args(expanded)
        assert (args.probe_address, args.metrics_secure_port) == ("0.0.0.0", 8443)
        assert args.leader_elect


def test_one_replica_has_no_disruption_budget_nor_anti_affinity(mocks: RecordingMocks, tmp_path: Path) -> None:
    config = stack_config(tmp_path)
    config["liqo:runtime"] = json.dumps({"mode": "cluster"})
    pulumi.runtime.set_all_config(config)
    run_program()

    assert [m for r in mocks.objects() if (m := r.inputs)["kind"] == "PodDisruptionBudget"] == []
    deployment = deployment_named(mocks, "home", names.CONTROLLER_MANAGER)
    assert deployment["spec"]["replicas"] == 1
    assert "pulumi.com/skipAwait" not in deployment["metadata"]["annotations"]  # up waits for the rollout
    assert "affinity" not in deployment["spec"]["template"]["spec"]


def test_two_replicas_get_a_disruption_budget_and_land_on_different_nodes(
    mocks: RecordingMocks, tmp_path: Path
) -> None:
    config = stack_config(tmp_path)
    config["liqo:runtime"] = json.dumps({"mode": "cluster", "replicas": {"virtualKubelet": 2, "foreignAgent": 2}})
    pulumi.runtime.set_all_config(config)
    run_program()

    budgets = {
        (mocks.cluster_of(r), m["metadata"]["name"]): m
        for r in mocks.objects()
        if (m := r.inputs)["kind"] == "PodDisruptionBudget"
    }
    assert set(budgets) == {
        ("home", "liqo-virtual-kubelet-foreign-1"),
        ("home", "liqo-virtual-kubelet-foreign-2"),
        ("foreign-1", names.FOREIGN_AGENT),
        ("foreign-2", names.FOREIGN_AGENT),
    }
    budget = budgets[("home", "liqo-virtual-kubelet-foreign-1")]
    assert budget["apiVersion"] == "policy/v1"
    assert budget["spec"] == {
        "minAvailable": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": "liqo-virtual-kubelet-foreign-1"}},
    }
    kubelet = deployment_named(mocks, "home", "liqo-virtual-kubelet-foreign-1")
    assert kubelet["spec"]["replicas"] == 2
    [term] = kubelet["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term == {
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "liqo-virtual-kubelet-foreign-1"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    # one per node: a rollout must free a node before the new pod can land
    assert kubelet["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert deployment_named(mocks, "home", names.CONTROLLER_MANAGER)["spec"]["replicas"] == 1


def test_replicas_in_external_mode_still_run_no_pod(mocks: RecordingMocks, tmp_path: Path) -> None:
    config = stack_config(tmp_path)
    config["liqo:runtime"] = json.dumps({"replicas": {"controllerManager": 2}})
    pulumi.runtime.set_all_config(config)
    run_program()

    assert deployment_named(mocks, "home", names.CONTROLLER_MANAGER)["spec"]["replicas"] == 0


def test_the_controller_manager_may_create_secrets_in_the_liqo_namespace_only(mocks: RecordingMocks) -> None:
    """Its replicas share the webhook CA through a Secret the first one creates."""
    run_program()

    [role] = [
        m for m in mocks.in_cluster("home") if m["kind"] == "Role" and m["metadata"]["name"] == names.CONTROLLER_MANAGER
    ]
    assert role["metadata"]["namespace"] == names.LIQO_NAMESPACE
    assert {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]} in role["rules"]
    [binding] = [
        m
        for m in mocks.in_cluster("home")
        if m["kind"] == "RoleBinding" and m["metadata"]["name"] == names.CONTROLLER_MANAGER
    ]
    assert binding["metadata"]["namespace"] == names.LIQO_NAMESPACE
    assert binding["roleRef"]["name"] == names.CONTROLLER_MANAGER
    cluster_wide = [
        m
        for m in mocks.in_cluster("home")
        if m["kind"] == "ClusterRole" and m["metadata"]["name"] == names.CONTROLLER_MANAGER
    ]
    assert not any("create" in r["verbs"] and "secrets" in r["resources"] for r in cluster_wide[0]["rules"])


def test_each_cluster_gets_one_provider_keyed_by_its_id(mocks: RecordingMocks) -> None:
    run_program()

    providers = {r.name: r.inputs for r in mocks.resources if r.typ == "pulumi:providers:kubernetes"}
    assert set(providers) == {"home", "foreign-1", "foreign-2"}
    for cluster_id, inputs in providers.items():
        assert inputs["clusterIdentifier"] == cluster_id  # a new kubeconfig never replaces an object
        assert inputs["enableServerSideApply"] == "true"
        assert inputs["enableSecretMutable"] == "true" and inputs["enableConfigMapMutable"] == "true"
    assert {mocks.cluster_of(r) for r in mocks.objects()} == {"home", "foreign-1", "foreign-2"}


@pulumi.runtime.test  # type: ignore[untyped-decorator]
def run_program_with_own_providers() -> None:
    import pulumi_kubernetes as k8s

    from liqo_stack.declaring.program import main

    main({cid: k8s.Provider(f"own-{cid}", kubeconfig="{}") for cid in ("home", "foreign-1", "foreign-2")})


def test_a_programs_own_providers_replace_the_kubeconfigs(mocks: RecordingMocks, tmp_path: Path) -> None:
    config = stack_config(tmp_path)
    config["liqo:home"] = json.dumps({"clusterId": "home"})
    config["liqo:foreignClusters"] = json.dumps(
        [{"clusterId": f"foreign-{i}", "apiServerAddress": f"10.0.0.{i}:6443"} for i in (1, 2)]
    )
    config["liqo:virtualKubelet"] = json.dumps({"homeApiServerAddress": "10.0.0.9:6443"})
    pulumi.runtime.set_all_config(config)
    run_program_with_own_providers()

    providers = {r.name for r in mocks.resources if r.typ == "pulumi:providers:kubernetes"}
    assert providers == {"own-home", "own-foreign-1", "own-foreign-2"}
    [credentials] = [m for m in mocks.in_cluster("own-home") if m["metadata"]["name"] == "liqo-credentials-foreign-2"]
    secret = credentials["stringData"]
    assert secret[SECRET_SIG_KEY] == SECRET_SIG, "the kubeconfig goes to the engine as a secret"
    kubeconfig = yaml.safe_load(secret["value"]["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://10.0.0.2:6443"
    assert kubeconfig["users"][0]["user"]["token"] == "token-of-home"


def test_a_cluster_with_neither_kubeconfig_nor_provider_is_named(mocks: RecordingMocks, tmp_path: Path) -> None:
    config = stack_config(tmp_path)
    foreign = json.loads(config["liqo:foreignClusters"])
    del foreign[1]["kubeconfigPath"]
    config["liqo:foreignClusters"] = json.dumps(foreign)
    pulumi.runtime.set_all_config(config)
    with pytest.raises(Exception, match=r"liqo:foreignClusters\[1\]: cluster foreign-2 has no kubeconfig"):
        run_program()
    assert mocks.resources == []


@pytest.mark.parametrize(
    ("drop", "named"),
    [
        ("apiServerAddress", r"liqo:foreignClusters\[1\]\.apiServerAddress: cluster foreign-2 has no kubeconfig"),
        ("homeApiServerAddress", r"liqo:virtualKubelet\.homeApiServerAddress: liqo:home has no kubeconfig"),
    ],
)
def test_without_kubeconfigs_the_addresses_are_required_before_any_resource(
    mocks: RecordingMocks, tmp_path: Path, drop: str, named: str
) -> None:
    config = stack_config(tmp_path)
    config["liqo:home"] = json.dumps({"clusterId": "home"})
    foreign = [{"clusterId": f"foreign-{i}", "apiServerAddress": f"10.0.0.{i}:6443"} for i in (1, 2)]
    if drop == "apiServerAddress":
        del foreign[1]["apiServerAddress"]
    config["liqo:foreignClusters"] = json.dumps(foreign)
    if drop != "homeApiServerAddress":
        config["liqo:virtualKubelet"] = json.dumps({"homeApiServerAddress": "10.0.0.9:6443"})
    pulumi.runtime.set_all_config(config)
    with pytest.raises(Exception, match=named):
        run_program_with_own_providers()
    assert [r for r in mocks.resources if r.typ != "pulumi:providers:kubernetes"] == []


def test_the_identity_token_is_waited_for_up_to_a_minute(mocks: RecordingMocks) -> None:
    """pulumi-kubernetes' own wait for a token Secret gives up after 5 s."""
    run_program()

    tokens = [m for m in mocks.in_cluster("foreign-1") if m.get("type") == "kubernetes.io/service-account-token"]
    assert [t["metadata"]["annotations"]["pulumi.com/waitFor"] for t in tokens] == ["jsonpath={.data.token}"]
    assert tokens[0]["metadata"]["annotations"]["pulumi.com/timeoutSeconds"] == "60"


def test_each_identity_token_secret_issued_has_a_name_of_its_own(mocks: RecordingMocks) -> None:
    """A token is signed over its Secret's name: a Secret issued again (deleted, then `pulumi up --refresh`)
    gets another name, so another token (docs/security.md); the name it has is kept (ignore_changes)."""

    def token_names() -> list[str]:
        tokens = [m for m in mocks.in_cluster("foreign-1") if m.get("type") == "kubernetes.io/service-account-token"]
        for token in tokens:
            assert token["metadata"]["labels"][names.HOME_IDENTITY_TOKEN_LABEL] == "home", "what revoking selects"
        return [t["metadata"]["name"] for t in tokens]

    run_program()
    [first] = token_names()
    mocks.resources.clear()
    run_program()
    [second] = token_names()
    for name in (first, second):
        assert re.fullmatch(rf"{names.home_identity_token_prefix('home')}-[0-9a-f]{{8}}", name), name
    assert first != second


def shards_config(tmp_path: Path, per_process: object, count: int = 3) -> dict[str, Any]:
    config = stack_config(tmp_path)
    kubeconfig = json.loads(config["liqo:foreignClusters"])[0]["kubeconfigPath"]
    config["liqo:foreignClusters"] = json.dumps(
        [{"clusterId": f"foreign-{n}", "kubeconfigPath": kubeconfig} for n in range(1, count + 1)]
    )
    config["liqo:namespaces"] = json.dumps([])
    config["liqo:runtime"] = json.dumps({"mode": "cluster", "peeringsPerProcess": per_process})
    pulumi.runtime.set_all_config(config)
    return config


def test_shards_of_two_serve_the_peerings_by_label_each_peering_bringing_its_rights(
    mocks: RecordingMocks, tmp_path: Path
) -> None:
    """peeringsPerProcess 2 with three clusters: two virtual-kubelet Deployments, each selecting its
    VirtualNodes by label (adding or removing a peering rolls none); each peering's ClusterRole is
    bound to its shard's identity by a binding of its own."""
    from runtime.__main__ import build_parser

    shards_config(tmp_path, 2)
    run_program()
    home = mocks.in_cluster("home")
    deployments = sorted(m["metadata"]["name"] for m in home if m["kind"] == "Deployment")
    assert deployments == ["liqo-controller-manager", "liqo-virtual-kubelets-0", "liqo-virtual-kubelets-1"]
    [container] = deployment_named(mocks, "home", "liqo-virtual-kubelets-1")["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args([a.replace("$(POD_IP)", "10.0.0.7") for a in container["args"]])
    assert (args.shard, args.foreign_cluster_id, args.pool) == ("1", [], [])
    shard_of = {
        m["metadata"]["name"]: m["metadata"]["labels"][names.VIRTUAL_KUBELET_SHARD_LABEL]
        for m in home
        if m["kind"] == "VirtualNode"
    }
    assert shard_of == {"liqo-foreign-1": "0", "liqo-foreign-2": "0", "liqo-foreign-3": "1"}
    bindings = {m["metadata"]["name"]: m for m in home if m["kind"] == "ClusterRoleBinding"}
    binding = bindings[names.virtual_kubelet_name("foreign-3")]
    assert binding["subjects"][0]["name"] == "liqo-virtual-kubelets-1"
    assert binding["roleRef"]["name"] == names.virtual_kubelet_name("foreign-3")


def test_all_peerings_in_one_deployment_and_one_per_cluster_by_default(mocks: RecordingMocks, tmp_path: Path) -> None:
    shards_config(tmp_path, "all")
    run_program()
    deployments = sorted(m["metadata"]["name"] for m in mocks.in_cluster("home") if m["kind"] == "Deployment")
    assert deployments == ["liqo-controller-manager", "liqo-virtual-kubelets-0"]


def test_peerings_per_process_must_be_a_count_or_all(tmp_path: Path) -> None:
    from liqo_stack.declaring.config import ConfigError, StackConfig

    for bad in (0, "some", 1.5):
        with pytest.raises((ConfigError, ValueError), match="peeringsPerProcess"):
            StackConfig.model_validate(
                {
                    "home": {"clusterId": "home"},
                    "foreignClusters": [],
                    "runtime": {"peeringsPerProcess": bad},
                }
            )


def test_a_cluster_the_stack_may_abandon_gets_a_provider_that_drops_unreachable_deletes(
    mocks: RecordingMocks, tmp_path: Path
) -> None:
    """abandonUnreachableAfter: its VirtualNode carries the seconds (the removal reads them) and its
    provider drops from the state what an unreachable API server cannot delete; the others unchanged."""
    config = stack_config(tmp_path)
    foreign = json.loads(config["liqo:foreignClusters"])
    foreign[1]["abandonUnreachableAfter"] = "10m"
    config["liqo:foreignClusters"] = json.dumps(foreign)
    pulumi.runtime.set_all_config(config)
    run_program()
    providers = {r.name: r.inputs for r in mocks.resources if r.typ == "pulumi:providers:kubernetes"}
    assert providers["foreign-2"]["deleteUnreachable"] == "true"
    assert "deleteUnreachable" not in providers["foreign-1"] and "deleteUnreachable" not in providers["home"]
    virtual_nodes = {m["metadata"]["name"]: m for m in mocks.in_cluster("home") if m["kind"] == "VirtualNode"}
    annotations = virtual_nodes["liqo-foreign-2"]["metadata"]["annotations"]
    assert annotations[names.ABANDON_UNREACHABLE_AFTER_ANNOTATION] == "600"
    assert names.ABANDON_UNREACHABLE_AFTER_ANNOTATION not in (
        virtual_nodes["liqo-foreign-1"]["metadata"].get("annotations") or {}
    )
