"""The admission webhooks through the real API server (TLS, the CA the controller-manager wrote).

docs/offloading.md: pods of an offloaded namespace get their strategy's constraints (the same table the unit
tests check, now read back from the pods the API server stored); pod creation is rejected until the
offloading is ready; the namespace mapping strategy can't change once set.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from liqo_stack.dev.external_runtime import ExternalRuntime
from runtime.api import names, parse_selector
from runtime.api.resources import NamespaceOffloadingResource
from tests.support.kube import create_namespace, metric_samples, offload, status_of, wait_phase, wait_until
from tests.support.placement import EXPECTED, SELECTORS, schedulable

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]


def pod(namespace: str, name: str, runtime_class: bool = False) -> Pod:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "nginx"}]}
    if runtime_class:
        spec["runtimeClassName"] = names.RUNTIME_CLASS_NAME
    return cast(Pod, Pod.from_dict({"metadata": {"name": name, "namespace": namespace}, "spec": spec}))


def create_pod(home: Client, namespace: str, name: str, runtime_class: bool = False) -> dict[str, Any]:
    return dict(home.create(pod(namespace, name, runtime_class)).to_dict())


def offloaded(home: Client, namespace: str) -> bool:
    return status_of(home, namespace).get("offloadingPhase") in ("Ready", "NoClusterSelected")


def rejection(error: ApiError) -> str:
    return str(error.status.message)


def admissions_timed(metrics_url: str) -> float:
    """How many pod admissions the controller-manager's webhook histogram has counted."""
    counts = metric_samples(metrics_url, "liqo_webhook_admission_seconds_count")
    return sum(value for labels, value in counts.items() if dict(labels)["path"] == names.POD_MUTATION_PATH)


def test_pods_get_their_strategys_constraints(runtime: ExternalRuntime, home: Client) -> None:
    for strategy in ("LocalAndRemote", "Local", "Remote"):
        for selector, expressions in SELECTORS.items():
            namespace = f"wh-{strategy.lower()}-{selector}"
            cluster_selector = parse_selector(expressions).to_wire()
            offload(home, namespace, {"podOffloadingStrategy": strategy, "clusterSelector": cluster_selector})
            wait_until(lambda: offloaded(home, namespace), 40, f"{namespace} offloaded")  # noqa: B023
            for runtime_class in (False, True):
                pod = create_pod(home, namespace, f"runtime-class-{str(runtime_class).lower()}", runtime_class)
                where = (strategy, runtime_class, selector)
                assert schedulable(pod) == EXPECTED[where], where


def test_every_pod_of_a_burst_is_admitted_with_its_constraints(runtime: ExternalRuntime, home: Client) -> None:
    """Under load (20 creates at once, as the offloading bench sends them) the webhook still mutates
    every pod: none is stored without the constraints its namespace's strategy requires."""
    namespace = "wh-burst"
    offload(home, namespace, {"podOffloadingStrategy": "Remote"})
    wait_until(lambda: offloaded(home, namespace), 40, f"{namespace} offloaded")
    metrics = cast(str, runtime.probes_url("controller-manager"))
    before = admissions_timed(metrics)
    # built before the threads start: two threads decoding a lightkube model for the first time together can
    # crash the process (see liqo_stack/resources/destroy_guard.py)
    burst = [pod(namespace, f"burst-{index}") for index in range(40)]
    with ThreadPoolExecutor(max_workers=20) as creators:
        pods = [dict(created.to_dict()) for created in creators.map(home.create, burst)]
    wrong = {pod["metadata"]["name"]: schedulable(pod) for pod in pods}
    assert {name: nodes for name, nodes in wrong.items() if nodes != EXPECTED[("Remote", False, "empty")]} == {}
    # the webhook's own latency histogram saw these admissions (at least: a controller elsewhere may
    # make a pod in an offloaded namespace meanwhile; the unit tests count exactly one per request)
    assert admissions_timed(metrics) - before >= 40


def test_pods_are_rejected_until_the_offloading_is_ready(runtime: ExternalRuntime, home: Client) -> None:
    labels = {names.SCHEDULING_ENABLED_LABEL: "true"}
    create_namespace(home, "early", labels)
    with pytest.raises(ApiError) as rejected:
        create_pod(home, "early", "too-soon")
    assert "has no NamespaceOffloading yet" in rejection(rejected.value)
    home.create(
        NamespaceOffloadingResource.from_dict(
            {"metadata": {"name": names.NAMESPACE_OFFLOADING_NAME, "namespace": "early"}, "spec": {}}
        )
    )
    wait_phase(home, "early", "Ready")
    assert schedulable(create_pod(home, "early", "in-time")) == {"physical", "foreign-1", "foreign-2"}


def test_the_mapping_strategy_is_immutable(runtime: ExternalRuntime, home: Client) -> None:
    offload(home, "settled", {"namespaceMappingStrategy": "DefaultName"})
    wait_phase(home, "settled", "Ready")
    change = {"spec": {"namespaceMappingStrategy": "EnforceSameName"}}
    with pytest.raises(ApiError) as rejected:
        home.patch(
            NamespaceOffloadingResource,
            names.NAMESPACE_OFFLOADING_NAME,
            change,
            namespace="settled",
            patch_type=PatchType.MERGE,
        )
    assert "spec.namespaceMappingStrategy is immutable (DefaultName)" in rejection(rejected.value)
    stored = home.get(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace="settled")
    assert stored["spec"]["namespaceMappingStrategy"] == "DefaultName"


def test_selected_name_needs_a_remote_name(runtime: ExternalRuntime, home: Client) -> None:
    with pytest.raises(ApiError) as rejected:
        offload(home, "unnamed", {"namespaceMappingStrategy": "SelectedName"})
    assert "spec.remoteNamespaceName is required with namespaceMappingStrategy SelectedName" in (
        rejection(rejected.value)
    )
