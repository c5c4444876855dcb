"""`liqo-stack preview pod` without a cluster: a manifest's pod, where it may go, what the remote pod
looks like and why, which objects follow it, and the three outputs (liqo_stack/foreseeing/podpreview.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from liqo_stack.foreseeing.podpreview import (
    Cluster,
    PodContext,
    PreviewError,
    pod_of_manifest,
    preview_pod,
    references,
    render,
)
from liqo_stack.operating.cli import main
from runtime.api import VirtualNodeSpec, names
from runtime.api.ondemand import VIRTUAL_NODE_TOLERATION
from runtime.forging.objects import ReflectionSettings, never_reflected, settings_from, why_not_reflected
from runtime.forging.pods import pod_of_shadow, shadow_pod

NS, TWIN = "apps", "apps-home"
TOKEN_VOLUME = {
    "name": "kube-api-access-abcde",
    "projected": {
        "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
        ]
    },
}


def node(**spec: Any) -> VirtualNodeSpec:
    return VirtualNodeSpec.model_validate({"clusterID": "x", **spec})


def cluster(cluster_id: str, labels: dict[str, str] | None = None, **spec: Any) -> Cluster:
    return Cluster(cluster_id, node(**spec), {names.REMOTE_CLUSTER_ID_LABEL: cluster_id, **(labels or {})})


def home_pod(**spec: Any) -> dict[str, Any]:
    annotations = spec.pop("annotations", {})
    return {
        "metadata": {
            "name": "web-1",
            "namespace": NS,
            "labels": {"app": "web", "tier": "front"},
            "annotations": annotations,
        },
        "spec": {
            "serviceAccountName": "default",
            "containers": [
                {
                    "name": "main",
                    "image": "nginx",
                    "volumeMounts": [{"name": "kube-api-access-abcde", "mountPath": "/var/run"}],
                }
            ],
            "volumes": [TOKEN_VOLUME],
            **spec,
        },
    }


def context(
    clusters: list[Cluster] | None = None,
    selector: list[str] | None = None,
    strategy: str = "Remote",
    objects: dict[str, dict[str, dict[str, Any]]] | None = None,
) -> PodContext:
    terms = [
        {"matchExpressions": [{"key": k, "operator": "In", "values": [v]}]}
        for k, v in (s.split("=") for s in selector or [])
    ]
    offloading = {"spec": {"podOffloadingStrategy": strategy, "clusterSelector": {"nodeSelectorTerms": terms}}}
    return PodContext("home", clusters or [cluster("foreign-1")], offloading, TWIN, objects or {})


def only(preview: Any) -> Any:
    assert len(preview.clusters) == 1
    return preview.clusters[0]


# -- the pod of a manifest -----------------------------------------------------------------------------


def test_a_deployment_gives_its_pod_template_named_after_it() -> None:
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}}},
    }
    pod = pod_of_manifest(deployment)
    assert pod["metadata"] == {"labels": {"app": "web"}, "generateName": "web-", "namespace": NS}
    assert pod["spec"] == {"containers": [{"name": "c"}]}


def test_a_cronjob_gives_its_jobs_pod_template() -> None:
    cron = {
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}},
    }
    assert pod_of_manifest(cron)["spec"]["containers"] == [{"name": "c"}]


def test_a_kind_that_makes_no_pod_is_refused_naming_it() -> None:
    with pytest.raises(PreviewError, match="kind 'ConfigMap' makes no pod"):
        pod_of_manifest({"kind": "ConfigMap", "metadata": {"name": "x"}})


# -- where it may go -------------------------------------------------------------------------------------


def test_a_namespace_not_offloaded_keeps_its_pods_and_says_how_to_offload_it() -> None:
    preview = preview_pod(home_pod(), PodContext("home", [cluster("foreign-1")], None, None), "home cluster")
    assert preview.clusters == []
    assert preview.stays_home == "namespace apps is not offloaded: `liqo-stack offload namespace apps` offloads it"


def test_local_strategy_keeps_the_pod_home_unless_it_asks_for_runtime_class_liqo() -> None:
    assert preview_pod(home_pod(), context(strategy="Local"), "x").stays_home is not None
    remote = preview_pod(home_pod(runtimeClassName="liqo"), context(strategy="Local"), "x")
    assert remote.strategy == "Remote" and remote.stays_home is None and len(remote.clusters) == 1


def test_only_the_clusters_the_selector_matches_are_shown() -> None:
    clusters = [cluster("foreign-1", {"region": "europe"}), cluster("foreign-2", {"region": "us-west"})]
    preview = preview_pod(home_pod(), context(clusters, selector=["region=us-west"]), "x")
    assert [c.cluster for c in preview.clusters] == ["foreign-2"]
    nowhere = preview_pod(home_pod(), context(clusters, selector=["region=mars"]), "x")
    assert (
        nowhere.clusters == []
        and nowhere.stays_home == "the cluster selector of namespace apps matches no virtual node"
    )


def test_a_cluster_of_node_pools_shows_the_pool_a_bound_pod_is_on_and_every_pool_before() -> None:
    """As its virtual kubelet does, the remote pod takes the nodeSelector of the pool whose virtual node
    the pod is bound to; a pod not yet bound may get either pool's."""
    pools = {
        names.virtual_node_name("foreign-1", pool): node(offloadingPatch={"nodeSelector": {"pool": pool}})
        for pool in ("general", "gpu")
    }
    pooled = Cluster("foreign-1", next(iter(pools.values())), {}, pools=pools)
    gpu_node = names.virtual_node_name("foreign-1", "gpu")
    bound = preview_pod(home_pod(nodeName=gpu_node), context([pooled]), "home cluster")
    assert bound.running_in == "foreign-1"
    shown = only(bound)
    assert shown.node == gpu_node and shown.remote_pod["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert "== foreign-1 (twin namespace apps-home, virtual node liqo-foreign-1-gpu) (the pod runs" in render(
        bound, "text"
    )
    unbound = preview_pod(home_pod(), context([pooled]), "x")
    assert [(c.node, (c.remote_pod or {})["spec"]["nodeSelector"]) for c in unbound.clusters] == [
        ("liqo-foreign-1-general", {"pool": "general"}),
        ("liqo-foreign-1-gpu", {"pool": "gpu"}),
    ]
    assert "may run in foreign-1\n" in render(unbound, "text")


def live(*taints: dict[str, str], **labels: str) -> dict[str, Any]:
    """A virtual Node as the home scheduler sees it."""
    return {"labels": labels, "taints": list(taints)}


def test_an_unbound_pod_goes_only_where_its_own_constraints_let_the_home_scheduler_bind_it() -> None:
    liqo_taint = {"key": names.VIRTUAL_NODE_TAINT_KEY, "value": "true", "effect": "NoExecute"}
    gpu_taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    one, two = names.virtual_node_name("foreign-1"), names.virtual_node_name("foreign-2")
    clusters = [
        Cluster("foreign-1", node(), {}, live_nodes={one: live(liqo_taint, region="europe")}),
        Cluster("foreign-2", node(), {}, live_nodes={two: live(liqo_taint, gpu_taint, region="us-west")}),
    ]

    admitted = [VIRTUAL_NODE_TOLERATION]  # what the webhook adds to a pod that may go to a virtual node

    def unplaced(**spec: Any) -> dict[str, str | None]:
        spec["tolerations"] = [*admitted, *spec.get("tolerations", [])]
        return {c.cluster: c.unplaced for c in preview_pod(home_pod(**spec), context(clusters), "x").clusters}

    pinned = unplaced(nodeSelector={"region": "europe"})
    assert pinned["foreign-1"] is None
    assert pinned["foreign-2"] == f"its nodeSelector region=europe is not among the labels of {two}"
    west = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["us-west"]}]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": west}}
    untolerated = unplaced(affinity=affinity)
    assert untolerated["foreign-1"] == f"its required node affinity matches no label of {one}"
    assert untolerated["foreign-2"] == f"it does not tolerate the taint dedicated=gpu:NoSchedule of {two}"
    tolerated = unplaced(affinity=affinity, tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert tolerated["foreign-2"] is None
    for toleration in (
        {"key": "dedicated", "value": "cpu"},  # Equal, the default operator: another value
        {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},  # another effect
        {"key": "dedicated", "operator": "Matches"},  # an operator there is not
    ):
        assert unplaced(affinity=affinity, tolerations=[toleration])["foreign-2"] is not None, toleration
    assert unplaced(affinity=affinity, tolerations=[{"operator": "Exists"}])["foreign-2"] is None, "every taint"
    admitted = []  # admitted before its namespace was offloaded: the virtual nodes' taint keeps it off
    assert unplaced(nodeSelector={"region": "europe"})["foreign-1"] == (
        f"it does not tolerate the taint {names.VIRTUAL_NODE_TAINT_KEY}=true:NoExecute of {one}"
    )
    admitted = [VIRTUAL_NODE_TOLERATION]
    by_name = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [one]}]}]}
    named = unplaced(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": by_name}})
    assert named["foreign-1"] is None and named["foreign-2"] is not None
    bound = unplaced(nodeName=two, nodeSelector={"region": "europe"})  # bound before a label changed
    assert bound["foreign-2"] is None, "a bound pod is where it is"
    nowhere = preview_pod(home_pod(nodeSelector={"region": "mars"}), context(clusters), "x")
    text = render(nowhere, "text")
    assert "may run in no foreign cluster (its own constraints leave out every virtual node)" in text
    assert (
        f"not placed here by the home scheduler: its nodeSelector region=mars is not among the labels of {one}" in text
    )
    assert all(c.remote_pod is None for c in nowhere.clusters)


# -- the remote pod, and why it differs -------------------------------------------------------------------


def test_the_remote_pod_is_the_agents_pod_of_the_virtual_kubelets_shadow_pod() -> None:
    pod, spec = home_pod(nodeSelector={"disk": "ssd"}), node(homeAPIServer={"host": "10.0.0.1", "port": 6443})
    shown = only(preview_pod(pod, context([Cluster("foreign-1", spec, {})]), "x")).remote_pod
    shadow = shadow_pod(pod, twin=TWIN, home_cluster_id="home", foreign_cluster_id="foreign-1", node=spec)
    assert shown == pod_of_shadow(shadow)
    assert shown["metadata"]["namespace"] == TWIN and "ownerReferences" not in shown["metadata"]
    assert "nodeSelector" not in shown["spec"]
    env = shown["spec"]["containers"][0]["env"]
    assert {"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.1"} in env


def test_each_change_is_told_with_its_reason() -> None:
    pod = home_pod(
        nodeSelector={"disk": "ssd"},
        hostNetwork=True,
        runtimeClassName="liqo",
        tolerations=[{"key": names.VIRTUAL_NODE_TAINT_KEY, "operator": "Exists"}],
        annotations={names.ANTI_AFFINITY_PRESET_ANNOTATION: "hard", names.ANTI_AFFINITY_LABELS_ANNOTATION: "app"},
    )
    changes = only(preview_pod(pod, context(), "x")).changes
    assert "nodeSelector: dropped (a scheduling constraint of the home cluster)" in changes
    assert "hostNetwork: true -> false (host namespaces are disabled for offloaded pods)" in changes
    assert any(c.startswith("runtimeClassName: liqo dropped") for c in changes)
    assert any(c.startswith(f"tolerations: {names.VIRTUAL_NODE_TAINT_KEY} dropped") for c in changes)
    assert any(
        c.startswith("affinity: replaced by the anti-affinity preset hard")
        and c.endswith("required on app=web per kubernetes.io/hostname")
        for c in changes
    )
    assert any(
        c.startswith("volumes kube-api-access-abcde: the token(s), CA and namespace come from Secret liqo-token-web-1")
        for c in changes
    )
    assert any(c.startswith("serviceAccountName: default dropped") for c in changes)


def test_another_runtime_class_is_kept_and_said_to_be_needed_there() -> None:
    changes = only(preview_pod(home_pod(runtimeClassName="gvisor"), context(), "x")).changes
    assert "runtimeClassName: gvisor kept: the foreign cluster must have that RuntimeClass" in changes


def test_without_token_support_the_token_volume_goes_and_the_token_is_listed_as_skipped() -> None:
    result = only(preview_pod(home_pod(), context([cluster("foreign-1", apiServerTokenSupport=False)]), "x"))
    assert [v["name"] for v in result.remote_pod["spec"].get("volumes") or []] == []
    assert any(c.startswith("volumes kube-api-access-abcde: dropped with their mounts") for c in result.changes)
    token = [o for o in result.objects if o.kind == "ServiceAccount token"]
    assert [(o.reflected, o.why.split(":")[0]) for o in token] == [
        (False, "apiServerTokenSupport is off on the VirtualNode")
    ]


def test_a_pod_the_runtime_refuses_is_shown_as_refused() -> None:
    pod = home_pod(annotations={names.ANTI_AFFINITY_PRESET_ANNOTATION: "sideways"})
    result = only(preview_pod(pod, context(), "x"))
    assert result.remote_pod is None
    assert result.refused is not None and result.refused.startswith("stays Pending at home (reason OffloadingBackOff)")


# -- the objects that follow it ------------------------------------------------------------------------------


def obj(name: str, annotations: dict[str, str] | None = None, **rest: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS, "annotations": annotations or {}}, **rest}


def test_references_cover_volumes_env_env_from_and_pull_secrets() -> None:
    spec = {
        "volumes": [
            {"name": "a", "configMap": {"name": "cm-vol"}},
            {"name": "b", "secret": {"secretName": "s-vol"}},
            {"name": "c", "persistentVolumeClaim": {"claimName": "data"}},
            {
                "name": "d",
                "projected": {"sources": [{"configMap": {"name": "cm-proj"}}, {"secret": {"name": "s-proj"}}]},
            },
        ],
        "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "cm-from"}}]}],
        "containers": [
            {
                "name": "m",
                "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s-env", "key": "k"}}}],
                "envFrom": [{"secretRef": {"name": "s-vol"}}],
            }
        ],
        "imagePullSecrets": [{"name": "registry"}],
    }
    assert references(spec) == {
        "configmap": ["cm-vol", "cm-proj", "cm-from"],
        "secret": ["s-vol", "s-proj", "s-env", "registry"],
        "persistentvolumeclaim": ["data"],
    }


def test_each_object_is_reflected_or_skipped_with_its_reason() -> None:
    pod = home_pod(
        volumes=[
            TOKEN_VOLUME,
            {"name": "cfg", "configMap": {"name": "open"}},
            {"name": "ca", "projected": {"sources": [{"configMap": {"name": "kube-root-ca.crt"}}]}},
            {"name": "key", "secret": {"secretName": "private"}},
            {"name": "gone", "secret": {"secretName": "missing"}},
            {"name": "fast", "persistentVolumeClaim": {"claimName": "fabric"}},
            {"name": "slow", "persistentVolumeClaim": {"claimName": "local"}},
        ]
    )
    clusters = [
        cluster(
            "foreign-1",
            reflection={"secret": {"type": "AllowList"}, "service": {"workers": 0}},
            storageClasses=[{"storageClassName": "ceph", "default": True}],
        )
    ]
    objects = {
        "configmap": {"open": obj("open"), "kube-root-ca.crt": obj("kube-root-ca.crt")},
        "secret": {"private": obj("private")},
        "persistentvolumeclaim": {
            "fabric": obj("fabric", spec={"storageClassName": "liqo"}),
            "local": obj("local", spec={"storageClassName": "standard"}),
        },
        "service": {
            "web": obj("web", spec={"selector": {"app": "web"}}),
            "db": obj("db", spec={"selector": {"app": "db"}}),
        },
    }
    verdicts = {
        (o.kind, o.name): (o.reflected, o.why)
        for o in only(preview_pod(pod, context(clusters, objects=objects), "x")).objects
    }
    assert verdicts == {
        ("ServiceAccount token", "liqo-token-web-1"): (
            True,
            "written to apps-home/liqo-token-web-1 by the token reflector: tokens of ServiceAccount default from the "
            "home API server",
        ),
        ("ConfigMap", "open"): (True, "reflected to apps-home/open"),
        ("ConfigMap", "kube-root-ca.crt"): (False, "each cluster makes its own kube-root-ca.crt in every namespace"),
        ("Secret", "private"): (False, "policy AllowList and no liqo.io/allow-reflection annotation"),
        ("Secret", "missing"): (False, "not found at home: the remote pod waits for it as a local one would"),
        ("PersistentVolumeClaim", "fabric"): (
            True,
            "created in apps-home/fabric with StorageClass ceph when its first pod goes there",
        ),
        ("PersistentVolumeClaim", "local"): (
            False,
            "class standard: only claims of StorageClass liqo follow their pod to a foreign cluster",
        ),
        ("Service", "web"): (False, "the reflection of services is disabled (workers 0)"),
    }


def test_the_reflection_verdict_is_the_reflectors_rules() -> None:
    allow = ReflectionSettings(
        policy=settings_from(node(reflection={"configmap": {"type": "AllowList"}}), "configmap").policy
    )
    assert why_not_reflected("configmap", obj("a", {names.ALLOW_REFLECTION_ANNOTATION: "true"}), allow) is None
    deny = ReflectionSettings()
    assert why_not_reflected("configmap", obj("a", {names.SKIP_REFLECTION_ANNOTATION: "false"}), deny) is None
    assert why_not_reflected("configmap", obj("a", {names.SKIP_REFLECTION_ANNOTATION: "true"}), deny) is not None
    assert never_reflected("secret", {"type": "kubernetes.io/service-account-token"}) is not None
    assert never_reflected("secret", {"type": "Opaque"}) is None


# -- output and flags ------------------------------------------------------------------------------------------


def test_text_yaml_and_json_carry_the_same_preview() -> None:
    preview = preview_pod(home_pod(nodeSelector={"disk": "ssd"}, nodeName="liqo-foreign-1"), context(), "home cluster")
    assert preview.running_in == "foreign-1"
    text = render(preview, "text")
    assert text.startswith("pod apps/web-1 (home cluster)\npodOffloadingStrategy Remote: may run in foreign-1\n")
    assert "== foreign-1 (twin namespace apps-home) (the pod runs here now) ==" in text
    assert "  nodeName: dropped (a scheduling constraint of the home cluster)" in text
    assert "  nodeSelector: dropped (a scheduling constraint of the home cluster)" in text
    assert "  ServiceAccount token liqo-token-web-1: reflected: written to apps-home/liqo-token-web-1" in text
    as_json = json.loads(render(preview, "json"))
    assert as_json == yaml.safe_load(render(preview, "yaml")) == preview.as_dict()
    assert as_json["clusters"][0]["remotePod"]["metadata"]["name"] == "web-1"


def test_bad_flags_name_the_flag_before_anything_is_read(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(main, ["preview", "pod"])
    assert missing.exit_code == 2 and "give the pod's NAME (with -n NAMESPACE), or --file MANIFEST" in missing.output
    no_namespace = runner.invoke(main, ["preview", "pod", "web-1"])
    assert no_namespace.exit_code == 2 and "Invalid value for --namespace" in no_namespace.output
    bad_output = runner.invoke(main, ["preview", "pod", "-n", NS, "web-1", "-o", "xml"])
    assert bad_output.exit_code == 2 and "'--output'" in bad_output.output
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump({"kind": "ConfigMap", "metadata": {"name": "x"}}))
    not_a_pod = runner.invoke(main, ["preview", "pod", "--file", str(manifest)])
    assert (
        not_a_pod.exit_code == 2
        and "Invalid value for --file" in not_a_pod.output
        and "0 documents that make pods" in not_a_pod.output
    )
    both = runner.invoke(main, ["preview", "--stack", "dev", "pod", "-n", NS, "web-1"])
    assert both.exit_code == 2 and "--stack previews a stack; `preview pod` does not take it" in both.output
    no_stack = runner.invoke(main, ["preview"])
    assert no_stack.exit_code == 2 and "--stack" in no_stack.output


def test_the_docs_example_deployment_previews_as_the_docs_say() -> None:
    example = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples/preview/web.yaml").read_text())
    pod = pod_of_manifest(example)
    pod["metadata"] |= {"name": "web-abcde", "namespace": NS}  # as the API server names it
    result = only(preview_pod(pod, context(objects={"configmap": {"web-settings": obj("web-settings")}}), "x"))
    assert "nodeSelector: dropped (a scheduling constraint of the home cluster)" in result.changes
    assert any(c.endswith("pod anti-affinity preferred on app=web per kubernetes.io/hostname") for c in result.changes)
    assert [(o.kind, o.name, o.reflected) for o in result.objects] == [("ConfigMap", "web-settings", True)]
