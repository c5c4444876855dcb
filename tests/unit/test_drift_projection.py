"""The field-ownership projection behind `KubeObject.read`: managedFields (FieldsV1) -> the owned part
of a live object, and what a refresh reports from it. Shapes as the API server writes them."""

from __future__ import annotations

import base64
from typing import Any

from liqo_stack.resources import drift

MANAGER = "liqo-stack"

# A MutatingWebhookConfiguration as applied by liqo-stack, then given a caBundle by the runtime's
# JSON patch (an Update by another manager) and defaults by the API server.
WEBHOOK_FIELDS: dict[str, Any] = {
    "f:metadata": {"f:labels": {"f:app.kubernetes.io/managed-by": {}}},
    "f:webhooks": {
        'k:{"name":"pods.liqo.io"}': {
            ".": {},
            "f:admissionReviewVersions": {},
            "f:clientConfig": {"f:url": {}},
            "f:name": {},
            "f:rules": {},
            "f:sideEffects": {},
        }
    },
}
LIVE_WEBHOOK: dict[str, Any] = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "MutatingWebhookConfiguration",
    "metadata": {
        "name": "liqo-pods",
        "uid": "u-1",
        "resourceVersion": "42",
        "labels": {"app.kubernetes.io/managed-by": "liqo-stack", "added-by-hand": "x"},
        "finalizers": ["someone.else/keep"],
        "managedFields": [
            {"manager": MANAGER, "operation": "Apply", "fieldsV1": WEBHOOK_FIELDS},
            {
                "manager": "liqo-controller-manager",
                "operation": "Update",
                "fieldsV1": {"f:webhooks": {'k:{"name":"pods.liqo.io"}': {"f:clientConfig": {"f:caBundle": {}}}}},
            },
        ],
    },
    "webhooks": [
        {
            "name": "pods.liqo.io",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:9443/mutate", "caBundle": "LS0tLS1CRUdJTi"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
        },
        {"name": "someone-elses.example.com", "sideEffects": "None"},
    ],
}
DECLARED_WEBHOOK: dict[str, Any] = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "MutatingWebhookConfiguration",
    "metadata": {"name": "liqo-pods", "labels": {"app.kubernetes.io/managed-by": "liqo-stack"}},
    "webhooks": [
        {
            "name": "pods.liqo.io",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:9443/mutate"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "sideEffects": "None",
        }
    ],
}


def test_owned_fields_are_the_managers_applies_only() -> None:
    entries = [
        {"manager": MANAGER, "operation": "Apply", "fieldsV1": {"f:spec": {"f:a": {}}}},
        {"manager": MANAGER, "operation": "Apply", "fieldsV1": {"f:spec": {"f:b": {}}}},
        {"manager": MANAGER, "operation": "Update", "fieldsV1": {"f:spec": {"f:edited": {}}}},
        {"manager": MANAGER, "operation": "Apply", "subresource": "status", "fieldsV1": {"f:status": {}}},
        {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:spec": {"f:c": {}}}},
    ]
    assert drift.owned_fields(entries, MANAGER) == {"f:spec": {"f:a": {}, "f:b": {}}}
    assert drift.owned_fields(None, MANAGER) == {}


def test_projection_keeps_owned_fields_and_drops_other_writers() -> None:
    view = drift.project(LIVE_WEBHOOK, WEBHOOK_FIELDS)
    assert view == {
        "metadata": {"labels": {"app.kubernetes.io/managed-by": "liqo-stack"}},
        "webhooks": [
            {
                "name": "pods.liqo.io",
                "admissionReviewVersions": ["v1"],
                "clientConfig": {"url": "https://127.0.0.1:9443/mutate"},  # no caBundle: the runtime's
                "rules": LIVE_WEBHOOK["webhooks"][0]["rules"],  # atomic: whole
                "sideEffects": "None",
            }
        ],  # the item someone else added is not ours
    }


def test_projection_of_set_and_index_list_keys() -> None:
    live = {"finalizers": ["a", "b", "c"], "args": ["--x", "--y"]}
    fields: dict[str, Any] = {"f:finalizers": {'v:"b"': {}}, "f:args": {"i:1": {}}}
    assert drift.project(live, fields) == {"finalizers": ["b"], "args": ["--y"]}


def test_an_object_as_applied_is_in_sync_and_reports_the_declared_manifest() -> None:
    view = drift.live_view(LIVE_WEBHOOK, WEBHOOK_FIELDS)
    assert drift.in_sync(DECLARED_WEBHOOK, view)
    assert drift.drifted(DECLARED_WEBHOOK, view) == DECLARED_WEBHOOK


def test_a_hand_edit_of_a_declared_field_shows_its_live_value() -> None:
    live = {**LIVE_WEBHOOK, "webhooks": [dict(LIVE_WEBHOOK["webhooks"][0], sideEffects="Some")]}
    view = drift.live_view(live, WEBHOOK_FIELDS)
    assert not drift.in_sync(DECLARED_WEBHOOK, view)
    shown = drift.drifted(DECLARED_WEBHOOK, view)
    assert shown["webhooks"][0]["sideEffects"] == "Some"
    assert shown["webhooks"][0]["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate"}
    assert shown["metadata"] == DECLARED_WEBHOOK["metadata"]


def test_a_hand_removed_field_is_missing_from_the_report() -> None:
    labels_removed = {**LIVE_WEBHOOK, "metadata": {**LIVE_WEBHOOK["metadata"], "labels": {}}}
    view = drift.live_view(labels_removed, WEBHOOK_FIELDS)
    assert drift.drifted(DECLARED_WEBHOOK, view)["metadata"] == {"name": "liqo-pods", "labels": {}}


def test_a_key_added_inside_an_atomic_list_item_shows_though_never_declared() -> None:
    """A Role rule given resourceNames by hand: the declared paths agree, the owned value does not."""
    fields: dict[str, Any] = {"f:rules": {}}
    declared = {"kind": "Role", "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["x"]}
    live = {"kind": "Role", "rules": [rule]}
    view = drift.live_view(live, fields)
    assert drift.digest_of(view) != drift.digest_of(drift.live_view(declared, fields))
    assert drift.drifted(declared, view)["rules"][0]["resourceNames"] == ["x"]


def test_a_list_that_grew_shows_whole() -> None:
    taint = {"key": "virtual-node.liqo.io/not-allowed", "value": "true", "effect": "NoExecute"}
    declared = {"spec": {"taints": [taint]}}
    live = {"spec": {"taints": [taint, {"key": "by-hand", "effect": "NoSchedule"}]}}
    assert drift.drifted(declared, drift.live_view(live, {"f:spec": {"f:taints": {}}})) == live


def test_numbers_pulumi_carries_as_floats_are_equal_to_integers() -> None:
    declared = {"spec": {"replicas": 0.0, "sharingPercentage": 50.0, "enabled": True}}
    view = {"spec": {"replicas": 0, "sharingPercentage": 50, "enabled": True}}
    assert drift.in_sync(declared, view)
    assert not drift.in_sync({"spec": {"enabled": 1.0}}, {"spec": {"enabled": True}})


def test_secret_values_are_compared_by_digest_and_string_data_read_from_data() -> None:
    kubeconfig = "apiVersion: v1\nkind: Config\n"
    declared = {"apiVersion": "v1", "kind": "Secret", "stringData": {"kubeconfig": kubeconfig}}
    live = {
        "apiVersion": "v1",
        "kind": "Secret",
        "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode(), "token": "dG9rZW4="},
    }
    fields: dict[str, Any] = {"f:stringData": {"f:kubeconfig": {}}}
    view = drift.live_view(live, fields)
    assert kubeconfig not in str(view)
    assert drift.in_sync(declared, view)
    edited = {**live, "data": {"kubeconfig": base64.b64encode(b"stolen").decode()}}
    shown = drift.drifted(declared, drift.live_view(edited, fields))
    assert shown["stringData"]["kubeconfig"].startswith("sha256:")
    assert "stolen" not in str(shown) and kubeconfig not in str(shown)


def test_fields_of_a_manifest_own_its_lists_whole() -> None:
    manifest = {"metadata": {"name": "x"}, "rules": [{"verbs": ["get"]}]}
    assert drift.fields_of(manifest) == {"f:metadata": {"f:name": {}}, "f:rules": {}}
    assert drift.project({**manifest, "status": {"phase": "Ready"}}, drift.fields_of(manifest)) == manifest


def test_an_object_our_manager_owns_nothing_of_is_compared_on_its_declared_paths() -> None:
    """A Namespace declared by name only: no managedFields entry is ours; the server's later writes
    (resourceVersion, a label the runtime adds) are no drift."""
    from liqo_stack.resources.kube_object import _baseline

    declared = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}
    applied = {**declared, "metadata": {"name": "apps", "resourceVersion": "1", "uid": "u"}}
    baseline = _baseline(applied, declared)
    later = {**declared, "metadata": {"name": "apps", "resourceVersion": "9", "labels": {"x": "y"}}, "status": {}}
    assert drift.digest_of(drift.live_view(later, baseline["owned_fields"])) == baseline["live_digest"]
