"""`liqo-stack offload|unoffload namespace NAME`: the seeds' liqoctl commands, against the home cluster."""

from __future__ import annotations

import json
import time
from typing import Any

import click
import yaml
from lightkube import ApiError, Client, KubeConfig
from lightkube.resources.core_v1 import Namespace

from liqo_stack.cli.params import timeout_option
from runtime.api import (
    NamespaceMappingStrategy,
    NamespaceOffloading,
    NamespaceOffloadingSpec,
    OffloadingPhase,
    PodOffloadingStrategy,
    SelectorSyntaxError,
    format_duration,
    names,
    parse_selector,
)
from runtime.kube.resources import NamespaceOffloadingResource

FIELD_MANAGER = "liqo-stack-cli"
SETTLED = {OffloadingPhase.READY.value, OffloadingPhase.NO_CLUSTER_SELECTED.value}
FAILED = {OffloadingPhase.SOME_FAILED.value, OffloadingPhase.ALL_FAILED.value}


def home_client(kubeconfig: str | None, context: str | None) -> Client:
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
    return Client(config.get(context_name=context) if context else config, field_manager=FIELD_MANAGER)


cluster_options = [
    click.option(
        "--kubeconfig",
        envvar="KUBECONFIG_HOME",
        help="kubeconfig of the home cluster [env KUBECONFIG_HOME, else KUBECONFIG]",
    ),
    click.option("--context", help="context in that kubeconfig (default: its current context)"),
]


def with_cluster(func: Any) -> Any:
    for option in reversed(cluster_options):
        func = option(func)
    return func


def offloading_manifest(namespace: str, spec: NamespaceOffloadingSpec) -> dict[str, Any]:
    obj = NamespaceOffloading(spec=spec)
    obj.metadata.name = names.NAMESPACE_OFFLOADING_NAME
    obj.metadata.namespace = namespace
    return obj.to_wire()


def selected_clusters(status: dict[str, Any]) -> list[str]:
    """Clusters the status says are selected (it lists every peer, selected or not: seed 003)."""
    return sorted(
        cluster_id
        for cluster_id, conditions in (status.get("remoteNamespacesConditions") or {}).items()
        if any(c.get("type") == "OffloadingRequired" and c.get("status") == "True" for c in conditions)
    )


def still_pending(status: dict[str, Any]) -> list[str]:
    """Selected clusters with no outcome yet (Ready neither True nor False): a failure phase is the
    controller's word so far, not its last, until none is left (SomeFailed comes with the first
    cluster that failed, while the others may still be creating their twins)."""
    conditions = status.get("remoteNamespacesConditions") or {}
    return [
        cluster_id
        for cluster_id in selected_clusters(status)
        if not any(c.get("type") == "Ready" and c.get("status") in ("True", "False") for c in conditions[cluster_id])
    ]


def describe_failures(status: dict[str, Any]) -> str:
    lines = []
    for cluster_id, conditions in sorted((status.get("remoteNamespacesConditions") or {}).items()):
        for condition in conditions:
            if condition.get("type") == "Ready" and condition.get("status") == "False":
                lines.append(f"  {cluster_id}: {condition.get('message') or condition.get('reason')}")
    return "\n".join(lines)


@click.group()
def offload() -> None:
    """Offload a namespace to the foreign clusters."""


@offload.command("namespace")
@click.argument("name")
@click.option(
    "--namespace-mapping-strategy",
    type=click.Choice([s.value for s in NamespaceMappingStrategy]),
    default=NamespaceMappingStrategy.DEFAULT_NAME.value,
    show_default=True,
)
@click.option("--remote-namespace-name", help="twin namespace name (used with SelectedName, ignored otherwise)")
@click.option(
    "--pod-offloading-strategy",
    type=click.Choice([s.value for s in PodOffloadingStrategy]),
    default=PodOffloadingStrategy.LOCAL_AND_REMOTE.value,
    show_default=True,
)
@click.option(
    "--selector",
    "selectors",
    multiple=True,
    help="cluster selector, e.g. 'region in (europe,us-west), !staging'; repeat to OR",
)
@click.option(
    "--output", "-o", type=click.Choice(["yaml", "json"]), help="print the NamespaceOffloading and apply nothing"
)
@timeout_option("Ready")
@with_cluster
def offload_namespace(
    name: str,
    namespace_mapping_strategy: str,
    remote_namespace_name: str | None,
    pod_offloading_strategy: str,
    selectors: tuple[str, ...],
    output: str | None,
    timeout: float,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Offload namespace NAME: twin namespaces in the selected foreign clusters, pods may go there."""
    strategy = NamespaceMappingStrategy(namespace_mapping_strategy)
    if strategy is NamespaceMappingStrategy.SELECTED_NAME and not remote_namespace_name:
        raise click.BadParameter(
            "SelectedName needs --remote-namespace-name", param_hint="--namespace-mapping-strategy"
        )
    if strategy is not NamespaceMappingStrategy.SELECTED_NAME and remote_namespace_name:
        # seed 003: the remote name is ignored with the other strategies
        click.echo(
            f"warning: --remote-namespace-name is ignored with --namespace-mapping-strategy {strategy.value} "
            "(only SelectedName uses it)",
            err=True,
        )
        remote_namespace_name = None
    if remote_namespace_name and not names.is_dns_label(remote_namespace_name):
        raise click.BadParameter(
            f"{remote_namespace_name!r} {names.DNS_LABEL_RULE}", param_hint="--remote-namespace-name"
        )
    try:
        selector = parse_selector(list(selectors))
    except SelectorSyntaxError as err:
        raise click.BadParameter(str(err), param_hint="--selector") from err
    spec = NamespaceOffloadingSpec(
        namespace_mapping_strategy=strategy,
        remote_namespace_name=remote_namespace_name,
        pod_offloading_strategy=PodOffloadingStrategy(pod_offloading_strategy),
        cluster_selector=selector,
    )
    manifest = offloading_manifest(name, spec)
    if output:
        click.echo(yaml.safe_dump(manifest, sort_keys=False) if output == "yaml" else json.dumps(manifest, indent=2))
        return

    client = home_client(kubeconfig, context)
    try:
        client.get(Namespace, name)
    except ApiError as err:
        if err.status.code == 404:
            raise click.ClickException(
                f"namespace {name} does not exist: create it first (kubectl create namespace {name})"
            ) from err
        raise
    try:
        client.apply(NamespaceOffloadingResource.from_dict(manifest), force=True)
    except ApiError as err:  # e.g. refused by the validating webhook: its message says what to change
        raise click.ClickException(f"offloading of {name} refused: {err.status.message}") from err
    click.echo(
        f"NamespaceOffloading {name}/{names.NAMESPACE_OFFLOADING_NAME} applied; "
        f"waiting up to {format_duration(timeout)} ...",
        err=True,
    )
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        found = client.get(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=name)
        status = dict(found.get("status") or {})
        generation = found.metadata.generation if found.metadata else None
        phase = status.get("offloadingPhase") if status.get("observedGeneration") == generation else None
        if phase != last:
            click.echo(f"  phase: {phase or 'waiting for the controller'}", err=True)
            last = phase
        if phase in SETTLED:
            twin = status.get("remoteNamespaceName")
            clusters = selected_clusters(status)
            click.echo(
                f"namespace {name} offloaded: {phase}" + (f", twin {twin} in {', '.join(clusters)}" if clusters else "")
            )
            return
        if phase in FAILED and not still_pending(status):
            raise click.ClickException(f"offloading of {name} is {phase}:\n{describe_failures(status)}")
        time.sleep(0.5)
    raise click.ClickException(
        f"offloading of {name} not Ready after {format_duration(timeout)} (phase: {last}); "
        "is the controller-manager running? "
        f"See `kubectl get namespaceoffloading -n {name} -o yaml`."
    )


@click.group()
def unoffload() -> None:
    """Stop offloading a namespace (destructive for its twins)."""


@unoffload.command("namespace")
@click.argument("name")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@timeout_option("the twins to be deleted")
@with_cluster
def unoffload_namespace(name: str, yes: bool, timeout: float, kubeconfig: str | None, context: str | None) -> None:
    """Unoffload NAME: its twin namespaces, and everything in them, are deleted in every foreign cluster."""
    if not yes:
        click.confirm(
            f"This deletes the twin namespaces of {name} and all they contain in every foreign cluster. Continue?",
            abort=True,
        )
    client = home_client(kubeconfig, context)
    try:
        client.delete(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=name)
    except ApiError as err:
        if err.status.code == 404:
            raise click.ClickException(f"namespace {name} is not offloaded") from err
        raise
    click.echo(f"unoffloading {name}: waiting for the twins to be deleted ...", err=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            client.get(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=name)
        except ApiError as err:
            if err.status.code == 404:
                click.echo(f"namespace {name} unoffloaded")
                return
            raise
        time.sleep(0.5)
    raise click.ClickException(
        f"{name} still unoffloading after {format_duration(timeout)}: is the controller-manager running?"
    )
