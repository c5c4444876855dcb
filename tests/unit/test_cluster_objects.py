"""How a manifest becomes a pulumi-kubernetes resource, and the home identity's kubeconfig."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from liqo_stack.declaring.components.cluster import APPLY_ANNOTATIONS, annotated, camel_case, type_token
from liqo_stack.declaring.components.credentials import compose_kubeconfig, server_of
from liqo_stack.declaring.config import ConfigError


def test_python_arguments_become_the_manifests_top_level_fields() -> None:
    assert [camel_case(f) for f in ("metadata", "role_ref", "string_data", "volume_binding_mode")] == [
        "metadata",
        "roleRef",
        "stringData",
        "volumeBindingMode",
    ]


def test_each_kind_has_pulumi_kubernetes_type_the_core_group_named_core() -> None:
    assert type_token("v1", "Secret") == "kubernetes:core/v1:Secret"
    assert type_token("apps/v1", "Deployment") == "kubernetes:apps/v1:Deployment"
    custom = type_token("offloading.liqo.io/v1beta1", "VirtualNode")
    assert custom == "kubernetes:offloading.liqo.io/v1beta1:VirtualNode"


def test_every_object_is_applied_by_one_field_manager_forced_and_keeps_its_annotations() -> None:
    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "a", "annotations": {"team": "x"}},
    }
    applied = annotated(manifest, APPLY_ANNOTATIONS)
    metadata: Any = applied["metadata"]
    assert metadata["annotations"] == {"team": "x", **APPLY_ANNOTATIONS}
    assert APPLY_ANNOTATIONS == {"pulumi.com/patchFieldManager": "liqo-stack", "pulumi.com/patchForce": "true"}
    assert manifest["metadata"]["annotations"] == {"team": "x"}  # the manifest itself is not changed


ADMIN = """
apiVersion: v1
kind: Config
current-context: b
clusters:
- {name: a, cluster: {server: 'https://10.0.0.1:6443'}}
- {name: b, cluster: {server: 'https://127.0.0.1:7443', certificate-authority-data: QURNSU4=}}
contexts:
- {name: a, context: {cluster: a, user: admin}}
- {name: b, context: {cluster: b, user: admin}}
users: [{name: admin, user: {token: secret}}]
"""


def test_the_identity_kubeconfig_reaches_the_current_contexts_server_with_the_token_secrets_ca() -> None:
    cluster = server_of(ADMIN, "foreign-1")
    composed = yaml.safe_load(compose_kubeconfig(cluster, "foreign-1", "liqo-home-home", "tok", "VE9LRU5DQQ=="))
    assert composed["clusters"] == [
        {
            "name": "foreign-1",
            "cluster": {"server": "https://127.0.0.1:7443", "certificate-authority-data": "VE9LRU5DQQ=="},
        }
    ]
    assert composed["users"] == [{"name": "liqo-home-home", "user": {"token": "tok"}}]
    assert "secret" not in str(composed)  # nothing of the admin's credentials
    # without a CA in the token Secret, the kubeconfig's own
    fallback = yaml.safe_load(compose_kubeconfig(cluster, "foreign-1", "u", "tok", None))
    assert fallback["clusters"][0]["cluster"]["certificate-authority-data"] == base64.b64encode(b"ADMIN").decode()


def test_a_kubeconfig_without_a_server_is_named() -> None:
    with pytest.raises(ConfigError, match="cluster foreign-2: its kubeconfig names no server"):
        server_of("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n", "foreign-2")
