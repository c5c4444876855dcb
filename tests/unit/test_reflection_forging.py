"""docs/reflection.md's reflected copies, as pure functions: policies, what each kind leaves out, change detection."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.api import ReflectionPolicy, names
from runtime.forging.kinds import (
    CONFIGMAPS,
    ENDPOINT_SLICES,
    INGRESSES,
    LEGACY_INGRESS_CLASS_ANNOTATION,
    MANAGED_BY_LABEL,
    SECRETS,
    SERVICE_NAME_LABEL,
    ingress_content,
    service_content,
)
from runtime.forging.objects import (
    APPLIED_HASH_ANNOTATION,
    ReflectionSettings,
    covers,
    is_owned,
    policy_allows,
    reflected_object,
    up_to_date,
)

SKIP, ALLOW = names.SKIP_REFLECTION_ANNOTATION, names.ALLOW_REFLECTION_ANNOTATION


@pytest.mark.parametrize(
    ("policy", "annotations", "reflected"),
    [
        (ReflectionPolicy.DENY_LIST, {}, True),
        (ReflectionPolicy.DENY_LIST, {SKIP: "true"}, False),
        (ReflectionPolicy.DENY_LIST, {SKIP: ""}, False),
        (ReflectionPolicy.DENY_LIST, {SKIP: "false"}, True),
        (ReflectionPolicy.ALLOW_LIST, {}, False),
        (ReflectionPolicy.ALLOW_LIST, {ALLOW: "true"}, True),
        (ReflectionPolicy.ALLOW_LIST, {ALLOW: "False"}, False),
    ],
)
def test_policies(policy: ReflectionPolicy, annotations: dict[str, str], reflected: bool) -> None:
    assert policy_allows(policy, annotations) is reflected


def home_config_map(**meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "shop", "uid": "u1", "resourceVersion": "7", **meta},
        "data": {"level": "debug"},
    }


def forge(home: dict[str, Any], settings: ReflectionSettings | None = None) -> dict[str, Any]:
    return reflected_object(
        home,
        CONFIGMAPS.content(home, "foreign-1"),
        twin="shop-home",
        home_cluster_id="home",
        foreign_cluster_id="foreign-1",
        settings=settings or ReflectionSettings(),
    )


def test_a_copy_is_verbatim_in_the_twin_with_ownership_and_without_skipped_keys() -> None:
    home = home_config_map(labels={"app": "shop", "cloud/zone": "a"}, annotations={"note": "x", "cloud/id": "1"})
    settings = ReflectionSettings(
        labels_not_reflected=frozenset({"cloud/zone"}), annotations_not_reflected=frozenset({"cloud/id"})
    )
    copy = forge(home, settings)
    assert copy["metadata"]["namespace"] == "shop-home" and copy["data"] == {"level": "debug"}
    assert copy["metadata"]["labels"] == {
        "app": "shop",
        names.ORIGIN_LABEL: "home",
        names.DESTINATION_LABEL: "foreign-1",
    }
    assert set(copy["metadata"]["annotations"]) == {"note", APPLIED_HASH_ANNOTATION}
    assert "uid" not in copy["metadata"] and "resourceVersion" not in copy["metadata"]
    assert is_owned(copy, "home", "foreign-1") and not is_owned(copy, "home", "foreign-2")


def test_up_to_date_ignores_server_defaults_but_sees_changes_at_home_and_by_hand() -> None:
    copy = forge(home_config_map())
    in_cluster = {**copy, "metadata": {**copy["metadata"], "uid": "f1", "resourceVersion": "3", "managedFields": []}}
    assert up_to_date(copy, in_cluster)
    assert not up_to_date(forge({**home_config_map(), "data": {"level": "info"}}), in_cluster)  # changed at home
    assert not up_to_date(copy, {**in_cluster, "data": {"level": "edited"}})  # changed by hand there
    relabelled = forge(home_config_map(labels={"gone": "soon"}))
    assert not up_to_date(copy, {**in_cluster, "metadata": {**relabelled["metadata"]}})  # a label removed at home


def test_covers_lists_item_by_item() -> None:
    assert covers({"ports": [{"port": 80}]}, {"ports": [{"port": 80, "protocol": "TCP"}]})
    assert not covers({"ports": [{"port": 80}]}, {"ports": [{"port": 80}, {"port": 81}]})


def test_kind_exclusions() -> None:
    assert not CONFIGMAPS.reflectable({"metadata": {"name": "kube-root-ca.crt"}})
    assert CONFIGMAPS.reflectable({"metadata": {"name": "app"}})
    assert not SECRETS.reflectable({"type": "kubernetes.io/service-account-token"})
    assert SECRETS.reflectable({"type": "Opaque"})


def service(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "web", "annotations": annotations or {}}, "spec": spec}


def test_services_leave_allocated_fields_out() -> None:
    ports = [{"port": 80, "nodePort": 30080}]
    allocated = service(type="LoadBalancer", clusterIP="10.0.0.7", clusterIPs=["10.0.0.7"], loadBalancerIP="1.2.3.4",
                        healthCheckNodePort=31000, ports=ports)  # fmt: skip
    spec = service_content(allocated)["spec"]
    assert spec == {"type": "LoadBalancer", "ports": [{"port": 80}]}
    assert ports == [{"port": 80, "nodePort": 30080}], "the home object is never changed"
    forced = service({names.FORCE_REMOTE_NODE_PORT_ANNOTATION: "true"}, type="NodePort", ports=ports)
    assert service_content(forced)["spec"]["ports"] == [{"port": 80, "nodePort": 30080}]
    headless = service(clusterIP="None", clusterIPs=["None"], ports=[{"port": 5432}])
    assert service_content(headless)["spec"] == {"clusterIP": "None", "ports": [{"port": 5432}]}


def test_ingresses_leave_the_class_out() -> None:
    spec = ingress_content({"spec": {"ingressClassName": "nginx", "rules": [{"host": "a"}]}})["spec"]
    assert spec == {"rules": [{"host": "a"}]}


def test_ingresses_leave_the_legacy_class_annotation_out_too() -> None:
    """ingressClassName is cleared, so the class annotated the pre-1.18 way goes as well: the foreign
    cluster's default class applies either way."""
    home: dict[str, Any] = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "front", "annotations": {LEGACY_INGRESS_CLASS_ANNOTATION: "nginx", "note": "kept"}},
        "spec": {"rules": [{"host": "a"}]},
    }
    copy = reflected_object(
        home,
        INGRESSES.content(home, "foreign-1"),
        twin="shop-home",
        home_cluster_id="home",
        foreign_cluster_id="foreign-1",
        settings=ReflectionSettings(),
        relabel=INGRESSES.labels,
        reannotate=INGRESSES.annotations,
    )
    assert set(copy["metadata"]["annotations"]) == {"note", APPLIED_HASH_ANNOTATION}
    assert home["metadata"]["annotations"][LEGACY_INGRESS_CLASS_ANNOTATION] == "nginx", "the home object is unchanged"


def test_endpoint_slices_carry_what_the_foreign_cluster_cannot_see() -> None:
    home_labels = {SERVICE_NAME_LABEL: "web", MANAGED_BY_LABEL: "endpointslice-controller.k8s.io"}
    home_slice: dict[str, Any] = {
        "addressType": "IPv4",
        "metadata": {"name": "web-abc", "labels": home_labels},
        "endpoints": [
            {"addresses": ["10.100.0.5"], "nodeName": "home-worker-0", "conditions": {"ready": True},
             "targetRef": {"kind": "Pod", "name": "web-1"}, "zone": "home-zone-0"},
            {"addresses": ["10.101.0.7"], "nodeName": "liqo-foreign-1", "conditions": {"ready": True}},
            {"addresses": ["100.64.0.9"], "nodeName": "liqo-foreign-2", "conditions": {"ready": True}},
        ],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }  # fmt: skip
    content = ENDPOINT_SLICES.content(home_slice, "foreign-1")
    assert [e["addresses"] for e in content["endpoints"]] == [["10.100.0.5"], ["100.64.0.9"]]
    assert content["endpoints"][0] == {"addresses": ["10.100.0.5"], "conditions": {"ready": True}}
    assert content["ports"] == home_slice["ports"] and content["addressType"] == "IPv4"
    labels = ENDPOINT_SLICES.labels(home_labels)
    assert labels == {SERVICE_NAME_LABEL: "web", MANAGED_BY_LABEL: names.REFLECTED_ENDPOINT_SLICE_MANAGER}


def test_the_foreign_control_planes_slices_of_a_reflected_service_are_not_ours() -> None:
    """They inherit the reflected Service's labels, ownership labels included: deleting them as
    copies nobody wants made the foreign controller recreate them, forever."""
    from runtime.forging.kinds import ENDPOINT_SLICES, MANAGED_BY_LABEL

    inherited = {
        names.ORIGIN_LABEL: "home",
        names.DESTINATION_LABEL: "foreign-1",
        "kubernetes.io/service-name": "web",
    }
    theirs = {"metadata": {"labels": {**inherited, MANAGED_BY_LABEL: "endpointslice-controller.k8s.io"}}}
    ours = {"metadata": {"labels": {**inherited, MANAGED_BY_LABEL: names.REFLECTED_ENDPOINT_SLICE_MANAGER}}}
    assert ENDPOINT_SLICES.foreign_excluded(theirs)
    assert not ENDPOINT_SLICES.foreign_excluded(ours)


def test_an_empty_list_the_api_server_returns_as_null_is_up_to_date() -> None:
    """A Service with no ready pod has an EndpointSlice with no endpoints: applied as [], read back
    as null. Taken for a difference, the copy was re-applied on every event."""
    from runtime.forging.objects import covers

    assert covers({"endpoints": [], "ports": [{"port": 80}]}, {"ports": [{"port": 80}]})
    assert covers({"data": {}}, {})
    assert not covers({"endpoints": [{"addresses": ["10.0.0.1"]}]}, {})
    assert not covers({"endpoints": []}, {"endpoints": [{"addresses": ["10.0.0.1"]}]})
