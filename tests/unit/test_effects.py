"""The effects of a stack change on running workloads (liqo_stack/foreseeing/effects.py), as a pure function of the
new stack config and a snapshot of the live clusters."""

from __future__ import annotations

from typing import Any

from liqo_stack.declaring.config import StackConfig, parse
from liqo_stack.foreseeing.effects import PodOnNode, Snapshot, TwinState, effects


def stack(namespaces: list[dict[str, Any]], sharing: int | None = None) -> StackConfig:
    foreign_2: dict[str, Any] = {"clusterId": "foreign-2", "kubeconfigPath": "/dev/null", "labels": {"region": "us"}}
    if sharing is not None:
        foreign_2["sharingPercentage"] = sharing
    return parse(
        {
            "home": {"clusterId": "home", "kubeconfigPath": "/dev/null"},
            "foreignClusters": [
                {"clusterId": "foreign-1", "kubeconfigPath": "/dev/null", "labels": {"region": "eu"}},
                foreign_2,
            ],
            "namespaces": namespaces,
        }
    )


def pods(count: int, namespace: str = "apps") -> list[PodOnNode]:
    return [PodOnNode(namespace, f"web-{i}", {"cpu": "100m", "memory": "64Mi"}) for i in range(count)]


def snapshot(**overrides: Any) -> Snapshot:
    base = Snapshot(
        offloadings={"apps": (True, ["foreign-2"], "apps-home")},
        offered={"foreign-2": {"cpu": "32", "memory": "128Gi", "pods": "220"}},
        pods_on_node={"foreign-2": pods(4)},
        twins={("foreign-2", "apps-home"): TwinState(exists=True, ours=True, pods=4, objects={"configmaps": 2})},
    )
    for key, value in overrides.items():
        setattr(base, key, value)
    return base


def test_dropping_a_cluster_reports_its_twin_with_pods_and_objects() -> None:
    found = effects(stack([{"name": "apps", "clusterSelector": ["region=eu"]}]), snapshot())
    assert found.twins_deleted == [
        {
            "namespace": "apps",
            "cluster": "foreign-2",
            "twin": "apps-home",
            "pods": 4,
            "objects": {"configmaps": 2},
            "dataAtRisk": True,
            "why": "cluster no longer selected",
        }
    ]
    assert [p["pod"] for p in found.pods_losing_node] == [f"apps/web-{i}" for i in range(4)]
    assert found.twins_created == [{"namespace": "apps", "cluster": "foreign-1", "twin": "apps-home"}]
    assert found.needs_approval()


def test_a_namespace_removed_from_the_stack_loses_every_twin() -> None:
    found = effects(stack([]), snapshot())
    assert [(t["cluster"], t["why"]) for t in found.twins_deleted] == [
        ("foreign-2", "namespace no longer offloaded by the stack")
    ]


def test_a_namespace_offloaded_by_hand_is_not_the_stacks_to_remove() -> None:
    found = effects(stack([]), snapshot(offloadings={"apps": (False, ["foreign-2"], "apps-home")}))
    assert found.twins_deleted == [] and not found.any()


def test_sharing_cut_below_requests_lists_the_pods_that_no_longer_fit() -> None:
    found = effects(stack([{"name": "apps", "clusterSelector": ["region=us"]}], sharing=1), snapshot())
    assert found.nodes_shrunk == [
        {
            "cluster": "foreign-2",
            "node": "liqo-foreign-2",
            "sharingPercentage": 1,
            "resources": {"cpu": {"requested": "0.4", "newCapacity": "320m"}},
            "podsNotFitting": ["apps/web-3"],
        }
    ]
    assert found.twins_deleted == [] and found.twins_created == []


def test_unchanged_stack_has_no_effect() -> None:
    found = effects(stack([{"name": "apps", "clusterSelector": ["region=us"]}]), snapshot())
    assert not found.any() and not found.needs_approval()


def test_a_foreign_namespace_of_the_twins_name_that_is_not_ours_is_a_conflict() -> None:
    taken = snapshot(twins={("foreign-1", "apps"): TwinState(exists=True, ours=False, pods=3)})
    found = effects(
        stack([{"name": "apps", "namespaceMappingStrategy": "EnforceSameName", "clusterSelector": ["region=eu"]}]),
        Snapshot(twins=taken.twins),
    )
    assert [(c["cluster"], c["twin"]) for c in found.naming_conflicts] == [("foreign-1", "apps")]
    assert found.twins_created == [] and found.needs_approval()


def test_a_label_an_administrator_added_to_a_virtual_node_still_selects() -> None:
    config = stack([{"name": "apps", "clusterSelector": ["team=ml"]}])
    found = effects(config, snapshot(extra_node_labels={"foreign-2": {"team": "ml"}}))
    assert not found.any()


# -- issue 39: running pods under new reflection settings --------------------------------------------------


def with_reflection(reflection: dict[str, Any] | None = None) -> StackConfig:
    """The namespace on foreign-2, with these reflection settings (the home API server given: the
    VirtualNode's spec would read it from a kubeconfig otherwise)."""
    base = stack([{"name": "apps", "clusterSelector": ["region=us"]}])
    raw = base.model_dump(by_alias=True, exclude_none=True, mode="json")
    raw["virtualKubelet"] = {"homeApiServerAddress": "10.0.0.1:6443"}
    return parse({**raw, "reflection": reflection or {}})


def running_with_objects() -> Snapshot:
    """Two pods of apps on foreign-2 using ConfigMap cfg (one also Secret creds), selected by Service web;
    the VirtualNodes as the current config (default reflection) made them."""
    from liqo_stack.declaring.plan import virtual_node_spec

    current = with_reflection()

    def pod(name: str, **spec: Any) -> PodOnNode:
        manifest = {
            "metadata": {"name": name, "namespace": "apps", "labels": {"app": "web", "team": "blue"}},
            "spec": {"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "cfg"}}]}], **spec},
        }
        return PodOnNode("apps", name, {}, manifest)

    objects = {
        "configmap": {"cfg": {"metadata": {"name": "cfg", "annotations": {}}}},
        "secret": {"creds": {"metadata": {"name": "creds", "annotations": {}}, "type": "Opaque"}},
        "service": {"web": {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}}}},
    }
    return snapshot(
        pods_on_node={
            "foreign-2": [pod("web-0"), pod("web-1", volumes=[{"name": "s", "secret": {"secretName": "creds"}}])]
        },
        node_specs={f.cluster_id: virtual_node_spec(current, f) for f in current.foreign_clusters},
        home_objects={"apps": objects},
    )


def test_unchanged_reflection_settings_touch_no_running_pod() -> None:
    found = effects(with_reflection(), running_with_objects())
    assert found.running_pods_reflection == [] and not found.any()


def test_an_allow_list_reports_the_copies_running_pods_lose() -> None:
    config = with_reflection({"resources": {"configmap": {"type": "AllowList"}, "service": {"workers": 0}}})
    found = effects(config, running_with_objects())
    assert found.running_pods_reflection == [
        {
            "namespace": "apps",
            "cluster": "foreign-2",
            "pods": 2,
            "relabelled": [],
            "objects": [
                {
                    "kind": "configmap",
                    "name": "cfg",
                    "after": "copy deleted",
                    "why": "policy AllowList and no liqo.io/allow-reflection annotation",
                    "usedBy": ["web-0", "web-1"],
                },
                {
                    "kind": "service",
                    "name": "web",
                    "after": "copy kept, no longer updated",
                    "why": "the reflection of services is disabled (workers 0)",
                    "usedBy": ["web-0", "web-1"],
                },
            ],
        }
    ]
    assert found.any() and found.needs_approval()


def test_labels_no_longer_reflected_change_the_remote_pods_and_need_no_approval() -> None:
    found = effects(with_reflection({"skipLabels": ["team"]}), running_with_objects())
    assert [(e["namespace"], e["relabelled"], e["objects"]) for e in found.running_pods_reflection] == [
        ("apps", ["web-0", "web-1"], [])
    ]
    assert found.any() and not found.needs_approval()


def test_the_text_report_lists_the_namespace_its_pods_and_each_object() -> None:
    from liqo_stack.operating.cli.preview import PreviewReport, render

    config = with_reflection({"skipLabels": ["team"], "resources": {"configmap": {"type": "AllowList"}}})
    report = PreviewReport(
        stack="dev", effects=effects(config, running_with_objects()), preview_failed=None, changes={}
    )
    assert render(report, "text").splitlines()[1:] == [
        "Running pods under new reflection settings:",
        "  apps in foreign-2 (2 pods running): remote labels/annotations change on 2 pods (web-0, web-1); configmap "
        "cfg copy deleted (policy AllowList and no liqo.io/allow-reflection annotation), used by web-0, web-1",
    ]


def test_a_pod_that_fits_the_sum_but_no_single_foreign_node_is_reported() -> None:
    """foreign-2: two nodes with 4 cpu free each, offered at 90 %: 7.2 cpu in sum, 3.6 on one node."""
    from liqo_stack.operating.cli.preview import PreviewReport, render

    nodes = [{"name": f"n{i}", "labels": {}, "resources": {"cpu": "4", "memory": "16Gi"}} for i in range(2)]
    advertisement = {"resources": {"cpu": "8", "memory": "32Gi", "pods": "220"}, "nodes": nodes}
    too_big = PodOnNode("apps", "big", {"cpu": "6"}, node="liqo-foreign-2")
    small = PodOnNode("apps", "small", {"cpu": "1", "memory": "1Gi"}, node="liqo-foreign-2")
    config = stack([{"name": "apps", "clusterSelector": ["region=us"]}], sharing=90)
    found = effects(
        config,
        snapshot(
            offered={"foreign-2": advertisement["resources"]},
            advertisements={"foreign-2": advertisement},
            pods_on_node={"foreign-2": [too_big, small]},
        ),
    )
    assert found.pods_no_foreign_node_fits == [
        {
            "pod": "apps/big",
            "node": "liqo-foreign-2",
            "resources": {"cpu": {"requested": "6", "largestOnOneNode": "3600m"}},
        }
    ]
    assert found.nodes_shrunk == [], "the sum still holds them"
    assert found.any() and not found.needs_approval(), "told, nothing destroyed"
    report = PreviewReport(stack="dev", effects=found, preview_failed=None, changes={})
    assert render(report, "text").splitlines()[1:] == [
        "Pods that fit a virtual node in sum but no single foreign node behind it:",
        "  apps/big on liqo-foreign-2: cpu requested 6 > 3600m free on its largest foreign node",
    ]
    without_per_node_figures = {"resources": advertisement["resources"]}
    older = snapshot(advertisements={"foreign-2": without_per_node_figures}, pods_on_node={"foreign-2": [too_big]})
    assert effects(config, older).pods_no_foreign_node_fits == [], "an older agent: nothing known per node"


WIDGETS = {"group": "example.com", "version": "v1", "resource": "widgets"}


def with_widgets(current: dict[str, Any] | None, change: dict[str, Any] | None) -> tuple[StackConfig, Snapshot]:
    """Widgets reflected now as `current` (None: not at all) and by the config as `change`; three of
    them in apps at home: one annotated to be reflected, one to be skipped, one neither."""
    from liqo_stack.declaring.plan import virtual_node_spec

    def reflection(custom: dict[str, Any] | None) -> dict[str, Any]:
        return {"customResources": [{**WIDGETS, **custom}]} if custom is not None else {}

    now = with_reflection(reflection(current))

    def widget(name: str, **annotations: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "apps", "annotations": annotations}, "spec": {}}

    widgets = [
        widget("allowed", **{"liqo.io/allow-reflection": "true"}),
        widget("skipped", **{"liqo.io/skip-reflection": "true"}),
        widget("plain"),
    ]
    state = running_with_objects()
    state.node_specs = {f.cluster_id: virtual_node_spec(now, f) for f in now.foreign_clusters}
    state.custom_objects = {"widgets.example.com": {"apps": widgets}}
    return with_reflection(reflection(change)), state


def custom_outcomes(found: Any) -> list[tuple[str, str]]:
    return [(o["name"], o["after"]) for o in found.custom_objects_reflection]


def test_a_custom_type_whose_policy_turns_to_allow_list_deletes_the_copies_it_no_longer_allows() -> None:
    found = effects(*with_widgets({"type": "DenyList"}, {"type": "AllowList"}))
    assert found.custom_objects_reflection == [
        {
            "namespace": "apps",
            "cluster": "foreign-2",
            "kind": "widgets.example.com",
            "name": "plain",
            "after": "copy deleted",
            "why": "policy AllowList and no liqo.io/allow-reflection annotation",
        }
    ]
    assert found.needs_approval()


def test_a_custom_type_opted_in_is_reflected_and_one_opted_out_or_off_keeps_its_copies() -> None:
    opted_in = effects(*with_widgets(None, {"type": "DenyList"}))
    assert custom_outcomes(opted_in) == [("allowed", "now reflected"), ("plain", "now reflected")]
    assert opted_in.any() and not opted_in.needs_approval()
    opted_out = effects(*with_widgets({"type": "DenyList"}, None))
    assert custom_outcomes(opted_out) == [
        ("allowed", "copy kept, no longer updated"),
        ("plain", "copy kept, no longer updated"),
    ]
    assert not opted_out.needs_approval()
    turned_off = effects(*with_widgets({}, {"workers": 0}))
    assert custom_outcomes(turned_off) == [("allowed", "copy kept, no longer updated")]
    assert effects(*with_widgets({"type": "DenyList"}, {"type": "DenyList"})).custom_objects_reflection == []


def test_a_custom_type_opted_in_where_its_crd_cannot_take_copies_is_not_said_to_be_reflected() -> None:
    config, state = with_widgets(None, {"type": "DenyList"})
    state.foreign_crd_problems = {"foreign-2": {"widgets.example.com": "no CustomResourceDefinition"}}
    found = effects(config, state)
    assert [(o["name"], o["cluster"], o["after"], o["why"]) for o in found.custom_objects_reflection] == [
        ("allowed", "foreign-2", "not reflected until its CRD can take it", "no CustomResourceDefinition"),
        ("plain", "foreign-2", "not reflected until its CRD can take it", "no CustomResourceDefinition"),
    ]
    assert not found.needs_approval()
    # a problem of another type, or in another cluster, changes nothing here
    state.foreign_crd_problems = {"foreign-1": {"widgets.example.com": "x"}, "foreign-2": {"gadgets.example.com": "y"}}
    assert custom_outcomes(effects(config, state)) == [("allowed", "now reflected"), ("plain", "now reflected")]
    # nor is a copy said to be deleted (and approval asked) where the runtime deletes none
    config, state = with_widgets({"type": "DenyList"}, {"type": "AllowList"})
    state.foreign_crd_problems = {"foreign-2": {"widgets.example.com": "no CustomResourceDefinition"}}
    found = effects(config, state)
    assert found.custom_objects_reflection == [] and not found.needs_approval()


def test_the_text_report_lists_each_custom_object_whose_copy_changes() -> None:
    from liqo_stack.operating.cli.preview import PreviewReport, render

    report = PreviewReport(
        stack="dev", effects=effects(*with_widgets({"type": "DenyList"}, {})), preview_failed=None, changes={}
    )
    assert render(report, "text").splitlines()[1:] == [
        "Custom objects under new reflection settings:",
        "  widgets.example.com apps/plain in foreign-2: copy deleted (policy AllowList and no "
        "liqo.io/allow-reflection annotation)",
    ]


def test_a_custom_type_turned_on_again_under_a_narrower_policy_deletes_the_copies_it_left() -> None:
    found = effects(*with_widgets({"type": "DenyList", "workers": 0}, {"type": "AllowList"}))
    assert custom_outcomes(found) == [("allowed", "now reflected"), ("plain", "copy deleted")]
    assert found.needs_approval()


def test_a_kind_turned_on_again_under_a_narrower_policy_deletes_the_copy_running_pods_use() -> None:
    from liqo_stack.declaring.plan import virtual_node_spec

    state = running_with_objects()
    off = with_reflection({"resources": {"configmap": {"workers": 0}}})
    state.node_specs = {f.cluster_id: virtual_node_spec(off, f) for f in off.foreign_clusters}
    found = effects(with_reflection({"resources": {"configmap": {"type": "AllowList"}}}), state)
    assert [(o["name"], o["after"]) for e in found.running_pods_reflection for o in e["objects"]] == [
        ("cfg", "copy deleted")
    ]
