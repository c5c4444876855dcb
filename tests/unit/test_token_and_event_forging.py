"""The pure parts of token and event reflection (docs/reflection.md): what the remote pod mounts, when a token
is renewed, what a home event copied from a foreign one says; and where the home API server is."""

from __future__ import annotations

import base64
import copy
import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from liqo_stack.declaring.config import StackConfig, parse_api_server_address
from liqo_stack.declaring.plan import virtual_node_spec
from runtime.api import ReflectionPolicy, VirtualNodeSpec, names
from runtime.api.virtualnode import ApiServerAddress
from runtime.forging.events import event_allowed, home_event, needs_write, occurrences
from runtime.forging.pods import HomeApiAccess, remote_pod_spec, remote_pod_spec_with
from runtime.forging.tokens import (
    TokenProjection,
    refresh_at,
    renewal_due,
    token_projections,
    token_secret,
    tokens_wanted,
)
from tests.support.kubeconfigs import one_cluster_kubeconfig

NOW = datetime.datetime(2026, 11, 23, 12, 0, 0, tzinfo=datetime.UTC)


def home_pod(**spec: Any) -> dict[str, Any]:
    """A pod as the home API server stores it: the ServiceAccount admission plugin's volume mounted."""
    access = {
        "name": "kube-api-access-x1",
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [
                            {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
                        ]
                    }
                },
            ],
        },
    }
    mount = {"name": "kube-api-access-x1", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
    return {
        "metadata": {"name": "web", "namespace": "shop", "uid": "pod-uid-1"},
        "spec": {
            "serviceAccountName": "robot",
            "containers": [{"name": "app", "image": "nginx", "volumeMounts": [mount]}],
            "volumes": [access],
            **spec,
        },
    }


HOME_API = HomeApiAccess("liqo-token-web", ApiServerAddress(host="10.0.0.1", port=6443))


def test_with_tokens_the_projected_volume_reads_token_ca_and_namespace_from_the_secret() -> None:
    pod = home_pod()
    before = copy.deepcopy(pod)
    spec = remote_pod_spec_with(pod, HOME_API)
    assert pod == before, "input unchanged"
    (volume,) = spec["volumes"]
    assert volume["name"] == "kube-api-access-x1" and volume["projected"]["defaultMode"] == 420
    assert volume["projected"]["sources"] == [
        {
            "secret": {
                "name": "liqo-token-web",
                "items": [
                    {"key": "kube-api-access-x1.token", "path": "token"},
                    {"key": "ca.crt", "path": "ca.crt"},
                    {"key": "namespace", "path": "namespace"},
                ],
            }
        }
    ]
    assert spec["containers"][0]["volumeMounts"] == pod["spec"]["containers"][0]["volumeMounts"], "mounted where it was"
    assert spec["automountServiceAccountToken"] is False and "serviceAccountName" not in spec
    assert spec["containers"][0]["env"] == [
        {"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.1"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
    ]


def test_a_custom_token_projection_keeps_its_other_sources_and_user_env_wins() -> None:
    vault: dict[str, Any] = {
        "name": "vault",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"audience": "vault", "expirationSeconds": 900, "path": "a"}},
                {"serviceAccountToken": {"audience": "db", "path": "b"}},
                {"configMap": {"name": "settings"}},
                {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            ]
        },
    }
    pod = home_pod(volumes=[vault])
    pod["spec"]["containers"][0]["env"] = [{"name": "KUBERNETES_SERVICE_HOST", "value": "mine"}]
    assert token_projections(pod) == [
        TokenProjection("vault.0.token", "vault", 900),
        TokenProjection("vault.1.token", "db", 3600),
    ]
    spec = remote_pod_spec_with(pod, HOME_API)
    sources = spec["volumes"][0]["projected"]["sources"]
    assert sources[0]["secret"]["items"] == [
        {"key": "vault.0.token", "path": "a"},
        {"key": "vault.1.token", "path": "b"},
    ]
    assert sources[1:] == vault["projected"]["sources"][2:], "a user ConfigMap and other downward fields stay"
    assert spec["containers"][0]["env"] == [
        {"name": "KUBERNETES_SERVICE_HOST", "value": "mine"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
    ]


def test_without_tokens_the_home_token_volume_goes_and_nothing_points_home() -> None:
    pod = home_pod()
    for spec in (
        remote_pod_spec_with(pod, None),
        remote_pod_spec(pod, home_cluster_id="home", foreign_cluster_id="f1"),
    ):
        assert spec.get("volumes") == []
        assert spec["containers"][0]["volumeMounts"] == []
        assert "env" not in spec["containers"][0]
        assert spec["automountServiceAccountToken"] is False


def test_a_pod_without_a_token_gets_no_home_api_env() -> None:
    pod = home_pod(volumes=[], automountServiceAccountToken=False)
    pod["spec"]["containers"][0].pop("volumeMounts")
    assert "env" not in remote_pod_spec_with(pod, HOME_API)["containers"][0]
    assert not tokens_wanted(pod, VirtualNodeSpec(clusterID="f1"))


def test_tokens_wanted_only_with_support_on_and_a_live_pod() -> None:
    pod = home_pod()
    assert tokens_wanted(pod, VirtualNodeSpec(clusterID="f1"))
    assert not tokens_wanted(pod, VirtualNodeSpec(clusterID="f1", api_server_token_support=False))
    assert not tokens_wanted(pod, None)
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-11-23T12:00:00Z"}}
    assert not tokens_wanted(deleting, VirtualNodeSpec(clusterID="f1"))


def test_renewed_at_80_percent_of_life_and_at_least_daily() -> None:
    assert refresh_at(NOW, NOW + datetime.timedelta(seconds=3600)) == NOW + datetime.timedelta(seconds=2880)
    assert refresh_at(NOW, NOW + datetime.timedelta(days=365)) == NOW + datetime.timedelta(days=1)


def secret_for(pod: dict[str, Any], renew: datetime.datetime) -> dict[str, Any]:
    return token_secret(
        pod,
        twin="shop-home",
        tokens={"kube-api-access-x1.token": "tok"},
        ca="CA",
        renew_at=renew,
        home_cluster_id="home",
        foreign_cluster_id="f1",
    )


def test_the_token_secret_carries_ownership_the_pod_and_its_renewal() -> None:
    pod = home_pod()
    secret = secret_for(pod, NOW)
    assert secret["metadata"]["name"] == "liqo-token-web" and secret["metadata"]["namespace"] == "shop-home"
    assert secret["metadata"]["labels"] == {
        names.ORIGIN_LABEL: "home",
        names.DESTINATION_LABEL: "f1",
        names.SERVICE_ACCOUNT_TOKEN_LABEL: "true",
    }
    decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert decoded == {"kube-api-access-x1.token": "tok", "ca.crt": "CA", "namespace": "shop"}
    annotations = secret["metadata"]["annotations"]
    assert annotations[names.TOKEN_POD_ANNOTATION] == "web"
    assert annotations[names.TOKEN_POD_UID_ANNOTATION] == "pod-uid-1"
    assert annotations[names.TOKEN_REFRESH_AT_ANNOTATION] == "2026-11-23T12:00:00Z"


def test_renewal_due_when_missing_stale_rebound_or_asked_differently() -> None:
    pod = home_pod()
    fresh = secret_for(pod, NOW + datetime.timedelta(seconds=100))
    assert renewal_due(pod, fresh, NOW) == 100.0, "fresh: wait until the renewal time (a restart mints nothing)"
    assert renewal_due(pod, None, NOW) == 0.0
    assert renewal_due(pod, secret_for(pod, NOW - datetime.timedelta(seconds=1)), NOW) == 0.0
    recreated = {**pod, "metadata": {**pod["metadata"], "uid": "pod-uid-2"}}
    assert renewal_due(recreated, fresh, NOW) == 0.0, "a new pod of the same name: its own bound token"
    other_account = home_pod(serviceAccountName="other")
    assert renewal_due(other_account, fresh, NOW) == 0.0
    edited = copy.deepcopy(fresh)
    del edited["data"]["kube-api-access-x1.token"]
    assert renewal_due(pod, edited, NOW) == 0.0, "a key removed by hand comes back"


def test_token_secret_names_fit_in_a_name() -> None:
    assert names.token_secret_name("web") == "liqo-token-web"
    long = names.token_secret_name("p" * 253)
    assert len(long) == 253 and long != names.token_secret_name("p" * 252 + "q")


# -- where the home API server is ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("https://10.0.0.1:6443", "10.0.0.1", 6443),
        ("api.home.example:443", "api.home.example", 443),
        ("api.home.example", "api.home.example", 443),
        ("https://[fd00::1]:6443/", "fd00::1", 6443),
    ],
)
def test_api_server_addresses(text: str, host: str, port: int) -> None:
    assert parse_api_server_address(text) == ApiServerAddress(host=host, port=port)


@pytest.mark.parametrize("text", ["http://10.0.0.1:6443", "https://host:99999", "https://host:6443/path", ""])
def test_bad_api_server_addresses_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_api_server_address(text)


def stack(tmp_path: Path, **virtual_kubelet: Any) -> StackConfig:
    kubeconfig = tmp_path / "home.yaml"
    kubeconfig.write_text(json.dumps(one_cluster_kubeconfig("https://127.0.0.1:32001")))
    return StackConfig.model_validate(
        {
            "home": {"clusterId": "home", "kubeconfigPath": str(kubeconfig)},
            "foreignClusters": [{"clusterId": "foreign-1", "kubeconfigPath": str(kubeconfig)}],
            "virtualKubelet": virtual_kubelet,
        }
    )


def test_the_virtual_node_carries_the_home_api_server_from_the_kubeconfig_or_the_config(tmp_path: Path) -> None:
    config = stack(tmp_path)
    spec = virtual_node_spec(config, config.foreign_clusters[0])
    assert spec.home_api_server == ApiServerAddress(host="127.0.0.1", port=32001)
    assert spec.to_wire()["homeAPIServer"] == {"host": "127.0.0.1", "port": 32001}
    declared = stack(tmp_path, homeApiServerAddress="https://api.home:6443", apiServerTokenSupport=False)
    spec = virtual_node_spec(declared, declared.foreign_clusters[0])
    assert spec.home_api_server == ApiServerAddress(host="api.home", port=6443)
    assert spec.api_server_token_support is False


def test_a_bad_home_api_server_address_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as err:
        stack(tmp_path, homeApiServerAddress="ftp://x")
    assert "homeApiServerAddress" in str(err.value)


# -- events -----------------------------------------------------------------------------------------
HOME_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop", "uid": "home-uid"}}


def core_event(**fields: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "web.1", "namespace": "shop-home", "uid": "foreign-event-uid"},
        "involvedObject": {
            "kind": "Pod",
            "name": "web",
            "namespace": "shop-home",
            "uid": "remote-uid",
            "fieldPath": "spec.containers{app}",
        },
        "reason": "BackOff",
        "message": "Back-off restarting failed container",
        "type": "Warning",
        "source": {"component": "kubelet", "host": "kwok-node-0"},
        "count": 3,
        "firstTimestamp": "2026-11-23T11:00:00Z",
        "lastTimestamp": "2026-11-23T11:05:00Z",
        **fields,
    }


def test_a_home_event_points_at_the_home_object_under_a_name_stable_per_foreign_event() -> None:
    event = home_event(core_event(), HOME_POD, foreign_cluster_id="f1", node_name="liqo-f1")
    assert event["metadata"]["name"] == names.reflected_event_name("web", "foreign-event-uid")
    assert event["metadata"]["name"].startswith("web.")
    assert event["metadata"]["namespace"] == "shop"
    assert event["metadata"]["labels"] == {names.EVENT_REFLECTED_FROM_LABEL: "f1"}
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web",
        "namespace": "shop",
        "uid": "home-uid",
        "fieldPath": "spec.containers{app}",
    }
    assert (event["count"], event["firstTimestamp"], event["lastTimestamp"]) == (
        3,
        "2026-11-23T11:00:00Z",
        "2026-11-23T11:05:00Z",
    )
    assert event["source"] == {"component": "kubelet", "host": "liqo-f1"}
    again = home_event(core_event(count=9), HOME_POD, foreign_cluster_id="f1", node_name="liqo-f1")
    assert again["metadata"]["name"] == event["metadata"]["name"], "a repeat updates the same home event"


def test_events_k8s_io_series_count_as_occurrences() -> None:
    series = core_event(
        count=None,
        firstTimestamp=None,
        lastTimestamp=None,
        eventTime="2026-11-23T11:00:00.123456Z",
        series={"count": 4, "lastObservedTime": "2026-11-23T11:09:00.654321Z"},
        source={},
        reportingComponent="default-scheduler",
    )
    assert occurrences(series) == (4, "2026-11-23T11:00:00Z", "2026-11-23T11:09:00Z")
    event = home_event(series, HOME_POD, foreign_cluster_id="f1", node_name="liqo-f1")
    assert event["source"]["component"] == "default-scheduler"
    single = core_event(count=None, firstTimestamp=None, lastTimestamp=None, eventTime="2026-11-23T11:00:00.1Z")
    assert occurrences(single) == (1, "2026-11-23T11:00:00Z", "2026-11-23T11:00:00Z")


def test_a_home_event_is_written_only_when_the_foreign_one_says_more() -> None:
    desired = home_event(core_event(), HOME_POD, foreign_cluster_id="f1", node_name="liqo-f1")
    stored = {**copy.deepcopy(desired), "metadata": {**desired["metadata"], "resourceVersion": "7"}}
    assert needs_write(desired, None)
    assert not needs_write(desired, stored)
    assert needs_write(home_event(core_event(count=4), HOME_POD, foreign_cluster_id="f1", node_name="liqo-f1"), stored)
    later = core_event(lastTimestamp="2026-11-23T11:06:00Z")
    assert needs_write(home_event(later, HOME_POD, foreign_cluster_id="f1", node_name="liqo-f1"), stored)


def annotated(obj: dict[str, Any], **annotations: str) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "annotations": annotations}}


def test_the_event_policy_follows_the_annotation_of_the_event_or_of_its_home_object() -> None:
    """docs/reflection.md's reflection.event.type: DenyList reflects all but what is annotated skip-reflection,
    AllowList only what is annotated allow-reflection (the home object, as users annotate it)."""
    deny, allow = ReflectionPolicy.DENY_LIST, ReflectionPolicy.ALLOW_LIST
    event = core_event()
    assert event_allowed(deny, event, HOME_POD)
    assert not event_allowed(deny, event, annotated(HOME_POD, **{names.SKIP_REFLECTION_ANNOTATION: "true"}))
    assert not event_allowed(deny, annotated(event, **{names.SKIP_REFLECTION_ANNOTATION: ""}), HOME_POD)
    assert event_allowed(deny, event, annotated(HOME_POD, **{names.SKIP_REFLECTION_ANNOTATION: "false"}))
    assert not event_allowed(allow, event, HOME_POD)
    assert event_allowed(allow, event, annotated(HOME_POD, **{names.ALLOW_REFLECTION_ANNOTATION: "true"}))
    assert event_allowed(allow, annotated(event, **{names.ALLOW_REFLECTION_ANNOTATION: "true"}), HOME_POD)
    assert not event_allowed(allow, event, annotated(HOME_POD, **{names.ALLOW_REFLECTION_ANNOTATION: "false"}))


def test_a_home_event_carries_no_label_or_annotation_of_the_foreign_one() -> None:
    """docs/reflection.md's skip lists (labelsNotReflected / annotationsNotReflected) hold for events: the home
    copy carries only its own reflected-from label, nothing of the foreign event's metadata."""
    foreign = core_event(
        metadata={
            "name": "web.1",
            "namespace": "shop-home",
            "uid": "u",
            "labels": {"cloud.example/zone": "z"},
            "annotations": {"cloud.example/managed": "yes"},
        }
    )
    event = home_event(foreign, HOME_POD, foreign_cluster_id="f1", node_name="liqo-f1")
    assert event["metadata"]["labels"] == {names.EVENT_REFLECTED_FROM_LABEL: "f1"}
    assert "annotations" not in event["metadata"]


def test_the_token_reflector_decides_again_on_a_pod_s_arrival_and_deletion_not_its_status_updates() -> None:
    """A pod's token Secret depends on nothing a live pod can change: its status updates (most of a
    burst's pod events) queue no token work, its arrival and the start of its deletion do."""
    from typing import cast

    from lightkube.resources.core_v1 import Pod

    from runtime.kube import Event, Informer
    from runtime.reflection import Peering
    from runtime.reflection.tokens import TokenReflector

    none = cast(Any, None)
    pods = Informer(none, Pod)
    reflector = TokenReflector(Peering(none, none, "home", "foreign-1"), pods)

    def pod(name: str, deleting: bool = False) -> Any:
        meta: dict[str, Any] = {"name": name, "namespace": "apps", "uid": name}
        if deleting:
            meta["deletionTimestamp"] = "2026-11-26T12:00:00Z"
        return Pod.from_dict({"metadata": meta, "spec": {"containers": [{"name": "app"}]}})

    for event in (
        Event("ADDED", "apps/new", pod("new")),
        Event("MODIFIED", "apps/running", pod("running")),
        Event("MODIFIED", "apps/leaving", pod("leaving", deleting=True)),
        Event("DELETED", "apps/gone", pod("gone")),
    ):
        for handler in pods._handlers:
            handler(event)
    assert reflector.queue._queued == {"apps/new", "apps/leaving", "apps/gone"}
