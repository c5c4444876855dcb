"""ServiceAccount tokens and events, end to end (docs/reflection.md).

With apiServerTokenSupport on, an offloaded pod's ServiceAccount token is one the HOME API server
issued, bound to the home pod: it authenticates at home as the pod's ServiceAccount and stops
when the pod is deleted. Off, no token leaves home. Foreign events about the objects of an
offloaded namespace come back to the home objects, once each, their counts updated in place.
"""

from __future__ import annotations

import base64
import datetime
import itertools
from collections.abc import Iterator
from typing import Any, cast
from urllib.parse import urlsplit

import pytest
import yaml
from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.core_v1 import ConfigMap, Event, Pod, Secret, ServiceAccount
from lightkube.types import PatchType

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from runtime.api import names
from runtime.api.resources import VirtualNodeResource
from tests.support.kube import VIRTUAL_NODES, get_or_none, metric_samples, queue_drained, remote_pod, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

TOLERATION = {"key": names.VIRTUAL_NODE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}


def twin_of(namespace: str) -> str:
    return f"{namespace}-home"


def pod_on(cluster_id: str, name: str, namespace: str, **spec: Any) -> Any:
    """A pod bound to a virtual node, so the test knows which cluster runs it."""
    body = {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": VIRTUAL_NODES[cluster_id],
            "tolerations": [TOLERATION],
            "containers": [{"name": "app", "image": "nginx"}],
            **spec,
        },
    }
    return Pod.from_dict(body)


def running_remotely(home: Client, foreign: Client, namespace: str, name: str) -> tuple[Any, Any]:
    """The home pod and its remote pod, once Running at home."""

    def both() -> tuple[Any, Any] | None:
        pod: Any = home.get(Pod, name, namespace=namespace)
        remote = remote_pod(foreign, twin_of(namespace), name)
        return (pod, remote) if pod.status and pod.status.phase == "Running" and remote is not None else None

    found: tuple[Any, Any] = wait_until(both, 60, f"pod {name} Running remotely")
    return found


def review(home: Client, token: str, audiences: list[str] | None = None) -> Any:
    spec: dict[str, Any] = {"token": token}
    if audiences:
        spec["audiences"] = audiences
    body: Any = TokenReview.from_dict({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})
    return cast(Any, home.create(body)).status


def home_api_server(dev_env: DevEnvironment) -> tuple[str, int]:
    config = yaml.safe_load(dev_env.kubeconfig("home").read_text())
    url = urlsplit(config["clusters"][0]["cluster"]["server"])
    return str(url.hostname), int(url.port or 443)


def test_a_reflected_token_authenticates_at_home_as_the_pods_service_account_until_the_pod_goes(
    offloaded: str, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment, runtime: ExternalRuntime
) -> None:
    client, twin = foreign["foreign-1"], twin_of(offloaded)
    home.create(ServiceAccount(metadata=ObjectMeta(name="robot", namespace=offloaded)))
    vault = {
        "name": "vault-token",
        "projected": {
            "sources": [{"serviceAccountToken": {"path": "vault", "audience": "vault", "expirationSeconds": 900}}]
        },
    }
    mounts = [{"name": "vault-token", "mountPath": "/var/run/secrets/vault"}]
    home.create(
        pod_on(
            "foreign-1",
            "token-user",
            offloaded,
            serviceAccountName="robot",
            volumes=[vault],
            containers=[{"name": "app", "image": "nginx", "volumeMounts": mounts}],
        )
    )
    pod, remote = running_remotely(home, client, offloaded, "token-user")
    home_volume = next(v for v in pod.spec.volumes if v.name.startswith("kube-api-access-"))

    secret_name = names.token_secret_name("token-user")
    secret: Any = wait_until(lambda: get_or_none(client, Secret, secret_name, twin), 30, "token Secret reflected")
    data = {key: base64.b64decode(value).decode() for key, value in secret.data.items()}
    labels = secret.metadata.labels
    assert labels[names.ORIGIN_LABEL] == "home" and labels[names.DESTINATION_LABEL] == "foreign-1"
    assert data["namespace"] == offloaded, "the home namespace, not the twin"
    home_ca = cast(Any, home.get(ConfigMap, "kube-root-ca.crt", namespace=offloaded)).data["ca.crt"]
    assert data["ca.crt"] == home_ca, "the home root CA verifies the home API server"

    # the remote pod reads the token, CA and namespace from the Secret where the projection put them
    volumes = {v.name: v for v in remote.spec.volumes}
    sources = volumes[home_volume.name].projected.sources
    items = {item.key: item.path for item in sources[0].secret.items}
    assert sources[0].secret.name == secret_name
    assert items == {f"{home_volume.name}.token": "token", "ca.crt": "ca.crt", "namespace": "namespace"}
    assert {i.key: i.path for i in volumes["vault-token"].projected.sources[0].secret.items} == {
        "vault-token.token": "vault"
    }
    assert not any(s.serviceAccountToken for v in remote.spec.volumes if v.projected for s in v.projected.sources)
    host, port = home_api_server(dev_env)
    env = {e.name: e.value for e in remote.spec.containers[0].env}
    assert env["KUBERNETES_SERVICE_HOST"] == host and env["KUBERNETES_SERVICE_PORT"] == str(port)

    # issued by the home API server for the pod's ServiceAccount, bound to the home pod
    status = review(home, data[f"{home_volume.name}.token"])
    assert status.authenticated, status.error
    assert status.user.username == f"system:serviceaccount:{offloaded}:robot"
    assert status.user.extra["authentication.kubernetes.io/pod-uid"] == [pod.metadata.uid]
    vault_status = review(home, data["vault-token.token"], ["vault"])
    assert vault_status.authenticated and vault_status.audiences == ["vault"]
    assert not review(home, data["vault-token.token"]).authenticated, "the audience the pod asked for, only"

    # a restarted virtual kubelet renews nothing still fresh
    runtime.kill("kubelet-foreign-1")
    runtime.start("kubelet-foreign-1")
    home.create(pod_on("foreign-1", "token-user-2", offloaded))
    wait_until(
        lambda: get_or_none(client, Secret, names.token_secret_name("token-user-2"), twin),
        60,
        "the restarted virtual kubelet reflecting tokens",
    )
    again: Any = client.get(Secret, secret_name, namespace=twin)
    assert again.metadata.resourceVersion == secret.metadata.resourceVersion, "not rewritten by the restart"
    assert again.metadata.uid == secret.metadata.uid

    home.delete(Pod, "token-user", namespace=offloaded)
    wait_until(lambda: get_or_none(client, Secret, secret_name, twin) is None, 60, "token Secret deleted with the pod")
    wait_until(
        lambda: not review(home, data[f"{home_volume.name}.token"]).authenticated,
        60,
        "the token no longer authenticates once the home pod is gone",
    )
    home.delete(Pod, "token-user-2", namespace=offloaded)


@pytest.fixture
def foreign_2_tokens_off(offloaded: str, home: Client, foreign: dict[str, Client]) -> Iterator[None]:
    name = names.virtual_node_name("foreign-2")
    client, twin = foreign["foreign-2"], twin_of(offloaded)
    probes = itertools.count()

    def set_support(on: bool) -> None:
        home.patch(
            VirtualNodeResource,
            name,
            {"spec": {"apiServerTokenSupport": on}},
            namespace=names.LIQO_NAMESPACE,
            patch_type=PatchType.MERGE,
        )

    def seen_off() -> bool:
        """Whether a new pod's remote pod goes without a token: the virtual kubelet reads the
        setting from a watch of its own, so its first pods may still get one."""
        probe = f"probe-{next(probes)}"
        home.create(pod_on("foreign-2", probe, offloaded))
        _, remote = running_remotely(home, client, offloaded, probe)
        home.delete(Pod, probe, namespace=offloaded)
        secret = names.token_secret_name(probe)
        wait_until(lambda: get_or_none(client, Secret, secret, twin) is None, 60, f"{probe}'s token Secret gone")
        return remote.spec.automountServiceAccountToken is False

    set_support(False)
    wait_until(seen_off, 120, "the virtual kubelet of foreign-2 sees apiServerTokenSupport off")
    try:
        yield
    finally:
        set_support(True)


def test_with_token_support_off_no_token_leaves_home(
    offloaded: str, home: Client, foreign: dict[str, Client], foreign_2_tokens_off: None, runtime: ExternalRuntime
) -> None:
    client, twin = foreign["foreign-2"], twin_of(offloaded)
    url = runtime.probes_url("kubelet-foreign-2")
    assert url is not None
    minted = token_requests(url)
    home.create(pod_on("foreign-2", "no-token", offloaded))
    pod, remote = running_remotely(home, client, offloaded, "no-token")
    assert any(v.name.startswith("kube-api-access-") for v in pod.spec.volumes), "the home pod mounts a token"
    # the pod's ADDED event fed the token queue as it fed the offloading; once that queue is drained
    # the pod's token reconcile has begun, and its first await would be the TokenRequest (tokens.py)
    wait_until(lambda: queue_drained(url, "reflection-token"), 60, "the token queue of foreign-2 drained")
    assert token_requests(url) == minted, "no token requested at home"
    secrets = list(client.list(Secret, namespace=twin))
    assert not [s for s in secrets if names.SERVICE_ACCOUNT_TOKEN_LABEL in (cast(Any, s).metadata.labels or {})]
    assert get_or_none(client, Secret, names.token_secret_name("no-token"), twin) is None
    assert not any(v.name.startswith("kube-api-access-") for v in remote.spec.volumes or [])
    assert remote.spec.automountServiceAccountToken is False
    env = {e.name for c in remote.spec.containers for e in c.env or []}
    assert "KUBERNETES_SERVICE_HOST" not in env
    home.delete(Pod, "no-token", namespace=offloaded)


def token_requests(url: str) -> float:
    """The TokenRequests a virtual kubelet has sent to the home API server."""
    samples = metric_samples(url, "liqo_api_requests_total")
    return samples.get((("cluster", "home"), ("method", "POST"), ("resource", "serviceaccounts/token")), 0)


def stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def foreign_event(name: str, twin: str, involved: dict[str, Any], count: int, reason: str = "BackOff") -> Any:
    now = datetime.datetime.now(datetime.UTC)
    return Event.from_dict(
        {
            "metadata": {"name": name, "namespace": twin},
            "involvedObject": {"namespace": twin, **involved},
            "reason": reason,
            "message": f"{reason} happened in the foreign cluster",
            "type": "Warning",
            "source": {"component": "kubelet", "host": "fake-node"},
            "count": count,
            "firstTimestamp": stamp(now - datetime.timedelta(minutes=1)),
            "lastTimestamp": stamp(now),
        }
    )


def events_of(home: Client, namespace: str, uid: str) -> list[Any]:
    found: list[Any] = list(home.list(Event, namespace=namespace, fields={"involvedObject.uid": uid}))
    return [e for e in found if (e.metadata.labels or {}).get(names.EVENT_REFLECTED_FROM_LABEL) == "foreign-1"]


def test_foreign_events_come_back_to_the_home_object_once_and_count_in_place(
    offloaded: str, home: Client, foreign: dict[str, Client], runtime: ExternalRuntime
) -> None:
    client, twin = foreign["foreign-1"], twin_of(offloaded)
    home.create(pod_on("foreign-1", "eventful", offloaded))
    pod, remote = running_remotely(home, client, offloaded, "eventful")
    remote_ref = {"apiVersion": "v1", "kind": "Pod", "name": "eventful", "uid": remote.metadata.uid}
    client.create(foreign_event("eventful.backoff", twin, remote_ref, 1))

    def reflected(count: int) -> Any:
        found = [e for e in events_of(home, offloaded, pod.metadata.uid) if e.reason == "BackOff"]
        return found[0] if len(found) == 1 and found[0].count == count else None

    event: Any = wait_until(lambda: reflected(1), 30, "the foreign event on the home pod")
    assert event.involvedObject.kind == "Pod" and event.involvedObject.name == "eventful"
    assert event.type == "Warning" and event.message == "BackOff happened in the foreign cluster"
    assert event.source.component == "kubelet" and event.source.host == VIRTUAL_NODES["foreign-1"]
    # the foreign scheduler's own event about the remote pod comes back too
    wait_until(
        lambda: any(e.reason == "Scheduled" for e in events_of(home, offloaded, pod.metadata.uid)),
        30,
        "the foreign Scheduled event at home",
    )

    client.patch(
        Event,
        "eventful.backoff",
        {"count": 5, "lastTimestamp": stamp(datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=5))},
        namespace=twin,
        patch_type=PatchType.MERGE,
    )
    updated: Any = wait_until(lambda: reflected(5), 30, "the home event's count updated in place")
    assert updated.metadata.name == event.metadata.name and updated.metadata.uid == event.metadata.uid

    # no home counterpart: dropped
    orphan = {"apiVersion": "v1", "kind": "ConfigMap", "name": "only-there", "uid": "0000"}
    client.create(ConfigMap(metadata=ObjectMeta(name="only-there", namespace=twin), data={"a": "b"}))
    client.create(foreign_event("only-there.updated", twin, orphan, 1, reason="Orphan"))

    before = {e.metadata.name: e.metadata.resourceVersion for e in events_of(home, offloaded, pod.metadata.uid)}
    runtime.kill("kubelet-foreign-1")
    runtime.start("kubelet-foreign-1")
    client.create(foreign_event("eventful.after", twin, remote_ref, 1, reason="AfterRestart"))
    wait_until(
        lambda: any(e.reason == "AfterRestart" for e in events_of(home, offloaded, pod.metadata.uid)),
        60,
        "the restarted virtual kubelet reflecting events",
    )
    after = {e.metadata.name: e.metadata.resourceVersion for e in events_of(home, offloaded, pod.metadata.uid)}
    assert {k: v for k, v in after.items() if k in before} == before, "no home event rewritten after a restart"
    assert len(after) == len(before) + 1, "one new home event: the new foreign one"
    everywhere = list(home.list(Event, namespace=offloaded))
    assert not [e for e in everywhere if e.reason == "Orphan"], "an event about a foreign-only object stays there"
    home.delete(Pod, "eventful", namespace=offloaded)


def test_a_foreign_secret_of_the_token_secrets_name_that_is_not_ours_is_left_alone_and_reported(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    client, twin = foreign["foreign-1"], twin_of(offloaded)
    theirs = names.token_secret_name("squatted")
    client.create(Secret(metadata=ObjectMeta(name=theirs, namespace=twin), stringData={"token": "theirs"}))
    home.create(pod_on("foreign-1", "squatted", offloaded))
    pod, _ = running_remotely(home, client, offloaded, "squatted")

    def warning() -> Any:
        events = home.list(Event, namespace=offloaded, fields={"involvedObject.uid": pod.metadata.uid})
        return next((e for e in events if e.reason == "ReflectionConflict"), None)

    event: Any = wait_until(warning, 30, "a ReflectionConflict event on the home pod")
    assert event.type == "Warning" and f"Secret {twin}/{theirs}" in event.message
    untouched: Any = client.get(Secret, theirs, namespace=twin)
    assert base64.b64decode(untouched.data["token"]).decode() == "theirs"
    assert names.ORIGIN_LABEL not in (untouched.metadata.labels or {})
    home.delete(Pod, "squatted", namespace=offloaded)
    wait_until(lambda: get_or_none(home, Pod, "squatted", offloaded) is None, 60, "home pod gone")
    assert get_or_none(client, Secret, theirs, twin) is not None, "never deleted: not ours"
