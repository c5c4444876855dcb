"""Cluster mode on the dev clusters: `pulumi up` with `liqo:runtime.mode: cluster` creates the
runtime's Deployments, pinned to the image digest, with the `restricted` Pod Security profile, in
namespaces that enforce it, and their pods are admitted (kwok runs them as fake pods); /metrics is
served over TLS to callers that the cluster authenticates (TokenReview) and authorizes
(SubjectAccessReview), while /healthz stays open.
"""

from __future__ import annotations

import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace, Pod, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding
from pulumi import automation as auto

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names
from runtime.api.resources import VirtualNodeResource
from tests.support.kube import free_port, get_or_none, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

IMAGE = "registry.example.com/liqo-stack:0.1.0"
DIGEST = "sha256:" + "0123456789abcdef" * 4
PINNED = f"{IMAGE}@{DIGEST}"


@pytest.fixture(scope="module")
def cluster_stack(dev_env: DevEnvironment, pulumi_env: PulumiEnvironment, project_dir: Path) -> Iterator[auto.Stack]:
    stack = pulumi_env.stack_for_directory(project_dir, "cluster-mode")
    config = {
        "home": {"clusterId": "home", "kubeconfigPath": str(dev_env.kubeconfig("home"))},
        "foreignClusters": [
            {"clusterId": cluster_id, "kubeconfigPath": str(dev_env.kubeconfig(cluster_id))}
            for cluster_id in ("foreign-1", "foreign-2")
        ],
        "runtime": {"mode": "cluster", "image": IMAGE, "imageDigest": DIGEST},
    }
    PulumiEnvironment.set_liqo_config(stack, config)
    try:
        assert stack.up(on_output=print).summary.result == "succeeded"
        yield stack
    finally:
        stack.destroy(on_output=print)
        stack.workspace.remove_stack("cluster-mode")


def runtime_deployments(home: Client, foreign: dict[str, Client]) -> dict[str, tuple[Client, str]]:
    """Each Deployment of the runtime: where it is and its name."""
    found = {
        "controller-manager": (home, names.CONTROLLER_MANAGER),
        **{f"kubelet-{c}": (home, names.virtual_kubelet_name(c)) for c in foreign},
        **{f"agent-{c}": (client, names.FOREIGN_AGENT) for c, client in foreign.items()},
    }
    return found


def test_deployments_run_the_pinned_image_with_a_restricted_profile(
    cluster_stack: auto.Stack, home: Client, foreign: dict[str, Client]
) -> None:
    for what, (client, name) in runtime_deployments(home, foreign).items():
        deployment: Any = client.get(Deployment, name, namespace=names.LIQO_NAMESPACE)
        assert deployment.spec.replicas == 1, what
        pod = deployment.spec.template.spec
        (container,) = pod.containers
        assert container.image == PINNED, what
        assert pod.securityContext.runAsNonRoot is True, what
        assert pod.securityContext.runAsUser == names.RUNTIME_USER_ID, what
        assert pod.securityContext.seccompProfile.type == "RuntimeDefault", what
        security = container.securityContext
        assert security.allowPrivilegeEscalation is False, what
        assert security.readOnlyRootFilesystem is True, what
        assert security.capabilities.drop == ["ALL"], what
        assert container.livenessProbe.httpGet.path == "/healthz", what
        assert "--metrics-secure-port=8443" in container.args, what


def test_runtime_namespaces_enforce_restricted(
    cluster_stack: auto.Stack, home: Client, foreign: dict[str, Client]
) -> None:
    for client in [home, *foreign.values()]:
        namespace: Any = client.get(Namespace, names.LIQO_NAMESPACE)
        assert namespace.metadata.labels[names.POD_SECURITY_ENFORCE_LABEL] == names.POD_SECURITY_LEVEL
    # Pod Security admission is on: an unconfined pod is refused there (a server-side dry run admits
    # like the real thing)
    loose = Pod(
        metadata=ObjectMeta(name="loose", namespace=names.LIQO_NAMESPACE),
        spec=PodSpec(containers=[Container(name="c", image=PINNED)]),
    )
    with pytest.raises(ApiError) as refused:
        home.create(loose, dry_run=True)
    assert refused.value.status.code == 403
    assert 'violates PodSecurity "restricted:latest"' in (refused.value.status.message or "")


def test_runtime_pods_are_admitted_and_run(cluster_stack: auto.Stack, home: Client, foreign: dict[str, Client]) -> None:
    def running() -> bool:
        for client, name in runtime_deployments(home, foreign).values():
            pods = list(client.list(Pod, namespace=names.LIQO_NAMESPACE, labels={"app.kubernetes.io/name": name}))
            if not any(p.status and p.status.phase == "Running" for p in pods):
                return False
        return True

    wait_until(running, 90, "one Running pod per runtime Deployment")
    for client, name in runtime_deployments(home, foreign).values():
        (pod,) = client.list(Pod, namespace=names.LIQO_NAMESPACE, labels={"app.kubernetes.io/name": name})
        assert pod.spec is not None and pod.spec.containers[0].image == PINNED


# -- /metrics over TLS, /healthz open -----------------------------------------------------------
def token_of(client: Client, account: str) -> str:
    request = ServiceAccount.Token(
        metadata=ObjectMeta(name=account, namespace=names.LIQO_NAMESPACE),
        spec=TokenRequestSpec(audiences=[], expirationSeconds=600),
    )
    answer: Any = client.create(request, name=account, namespace=names.LIQO_NAMESPACE)
    return str(answer.status.token)


def fetch(url: str, token: str | None = None) -> tuple[int, str]:
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # self-signed, as controller-runtime's secure metrics
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=insecure) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture(scope="module")
def agent_process(
    cluster_stack: auto.Stack, dev_env: DevEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, int]]:
    """foreign-1's agent as a process with the Deployment's serving flags: (probe port, metrics port)."""
    probe_port, metrics_port = free_port(), free_port()
    log = tmp_path_factory.mktemp("agent") / "agent.log"
    command = [
        *(sys.executable, "-m", "runtime", f"--probe-port={probe_port}"),
        *(f"--metrics-secure-port={metrics_port}", "--metrics-address=127.0.0.1"),
        *("foreign-agent", "--kubeconfig", str(dev_env.kubeconfig("foreign-1")), "--cluster-id", "foreign-1"),
    ]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _serves(f"http://127.0.0.1:{probe_port}/healthz"), 30, "the agent's probes")
        wait_until(lambda: _serves(f"https://127.0.0.1:{metrics_port}/metrics"), 30, "the agent's metrics")
        yield probe_port, metrics_port
    finally:
        process.terminate()
        process.wait(20)
        print(log.read_text())


def _serves(url: str) -> bool:
    try:
        fetch(url)
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def scrapers(cluster_stack: auto.Stack, foreign: dict[str, Client]) -> Iterator[dict[str, str]]:
    """Tokens of two ServiceAccounts of foreign-1: `scraper` bound to the metrics reader role, `nobody`."""
    client = foreign["foreign-1"]
    for account in ("scraper", "nobody"):
        client.create(ServiceAccount(metadata=ObjectMeta(name=account, namespace=names.LIQO_NAMESPACE)))
    client.create(
        ClusterRoleBinding(
            metadata=ObjectMeta(name="e2e-scraper"),
            roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name=names.METRICS_READER_ROLE),
            subjects=[Subject(kind="ServiceAccount", name="scraper", namespace=names.LIQO_NAMESPACE)],
        )
    )
    try:
        yield {account: token_of(client, account) for account in ("scraper", "nobody")}
    finally:
        client.delete(ClusterRoleBinding, "e2e-scraper")
        for account in ("scraper", "nobody"):
            client.delete(ServiceAccount, account, namespace=names.LIQO_NAMESPACE)


def test_metrics_need_an_identity_with_the_right(agent_process: tuple[int, int], scrapers: dict[str, str]) -> None:
    metrics = f"https://127.0.0.1:{agent_process[1]}/metrics"
    assert fetch(metrics)[0] == 401
    assert fetch(metrics, "not-a-token")[0] == 401
    status, body = fetch(metrics, scrapers["nobody"])
    assert status == 403, body
    assert "system:serviceaccount:liqo:nobody" in body
    status, body = fetch(metrics, scrapers["scraper"])
    assert status == 200, body
    assert "# TYPE liqo_api_calls_total counter" in body


def test_probes_stay_open_and_metrics_are_not_in_the_clear(agent_process: tuple[int, int]) -> None:
    probes = f"http://127.0.0.1:{agent_process[0]}"
    assert fetch(f"{probes}/healthz") == (200, "ok\n")
    status, body = fetch(f"{probes}/metrics")
    assert status == 404
    assert "liqo_" not in body
    # the metrics port speaks TLS only
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://127.0.0.1:{agent_process[1]}/metrics", timeout=5)


# -- shards: many peerings in one virtual-kubelet Deployment ---------------------------------------
def allowed(home: Client, account: str, verb: str, resource: str, name: str, group: str = "") -> bool:
    """What the API server answers for this ServiceAccount (as `kubectl auth can-i --as` asks)."""
    from lightkube.models.authorization_v1 import ResourceAttributes, SubjectAccessReviewSpec
    from lightkube.resources.authorization_v1 import SubjectAccessReview

    attributes = ResourceAttributes(
        verb=verb, resource=resource, name=name, group=group, namespace=names.LIQO_NAMESPACE
    )
    review = SubjectAccessReview(
        spec=SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{names.LIQO_NAMESPACE}:{account}", resourceAttributes=attributes
        )
    )
    answer: Any = home.create(review)
    return bool(answer.status.allowed)


def test_the_foreign_agent_may_empty_a_twin_it_deletes(cluster_stack: auto.Stack, foreign: dict[str, Client]) -> None:
    """The agent's ServiceAccount in each foreign cluster may delete a namespace's ShadowPods and pods
    at once, as it does in a twin it deletes (runtime/controllers/namespacemap.py), and no other kind so."""
    for client in foreign.values():
        assert allowed(client, names.FOREIGN_AGENT, "deletecollection", "shadowpods", "", names.GROUP)
        assert allowed(client, names.FOREIGN_AGENT, "deletecollection", "pods", "")
        assert not allowed(client, names.FOREIGN_AGENT, "deletecollection", "secrets", "")


def test_peerings_per_process_all_runs_one_virtual_kubelet_deployment_holding_each_peerings_rights(
    cluster_stack: auto.Stack, home: Client, foreign: dict[str, Client]
) -> None:
    """`peeringsPerProcess: all`: one Deployment serves both peerings, by the label on their
    VirtualNodes; its identity holds each peering's own rights (its VirtualNode), and nothing of a
    cluster it does not serve. Back to the default, each peering has its Deployment again."""
    config = PulumiEnvironment.liqo_config(cluster_stack)
    shard = names.virtual_kubelet_shard_name("0")
    try:
        PulumiEnvironment.set_liqo_config(
            cluster_stack, {**config, "runtime": {**config["runtime"], "peeringsPerProcess": "all"}}
        )
        assert cluster_stack.up(on_output=print).summary.result == "succeeded"
        deployment: Any = home.get(Deployment, shard, namespace=names.LIQO_NAMESPACE)
        assert "--shard=0" in deployment.spec.template.spec.containers[0].args
        for cluster_id in foreign:
            assert get_or_none(home, Deployment, names.virtual_kubelet_name(cluster_id), names.LIQO_NAMESPACE) is None
            node = names.virtual_node_name(cluster_id)
            vn: Any = home.get(VirtualNodeResource, node, namespace=names.LIQO_NAMESPACE)
            assert vn.metadata.labels[names.VIRTUAL_KUBELET_SHARD_LABEL] == "0"
            assert allowed(home, shard, "patch", "virtualnodes", node, names.GROUP)
        assert not allowed(home, shard, "patch", "virtualnodes", names.virtual_node_name("elsewhere"), names.GROUP)
        wait_until(
            lambda: any(
                p.status and p.status.phase == "Running"
                for p in home.list(Pod, namespace=names.LIQO_NAMESPACE, labels={"app.kubernetes.io/name": shard})
            ),
            90,
            "the shard's pod admitted and Running",
        )
    finally:
        PulumiEnvironment.set_liqo_config(cluster_stack, config)
        assert cluster_stack.up(on_output=print).summary.result == "succeeded"
    assert get_or_none(home, Deployment, shard, names.LIQO_NAMESPACE) is None
    for cluster_id in foreign:
        home.get(Deployment, names.virtual_kubelet_name(cluster_id), namespace=names.LIQO_NAMESPACE)
