"""`liqo-stack demo`: the main job on the embedded default.

Local home and foreign clusters, the example stack (Pulumi.dev.yaml) applied with `pulumi up`,
the runtime started as local processes (external mode) and left running, the example namespace
offloaded, and an example Deployment whose pods the vanilla scheduler places on the virtual
nodes: they run in the foreign clusters and show Running at home; `kubectl logs` and `kubectl exec`
of one of them, from the home cluster, end it.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click
import yaml
from lightkube import ApiError
from lightkube.resources.core_v1 import ConfigMap, Node, Service
from pulumi import automation as auto

import liqo_stack
from liqo_stack.dev.clusters import DevEnvironment, DevEnvironmentError
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.links import stack_config_with_links
from liqo_stack.dev.progress import Heartbeat
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from liqo_stack.dev.workloads import apply_deployment, example_config_and_service, example_deployment, wait_pods_running
from liqo_stack.operating.cli.dev import layout_options, link_options, make_layout, progress, start_links
from liqo_stack.operating.cli.params import timeout_option
from runtime.api import format_duration, names
from runtime.api.resources import NamespaceOffloadingResource

DEMO_NAMESPACE = "demo"
DEMO_APP = "hello"
EXAMPLE_STACK = "dev"


def project_dir() -> Path:
    """The checkout holding Pulumi.yaml and the example stack."""
    for candidate in (Path.cwd(), Path(liqo_stack.__file__).resolve().parent.parent):
        if (candidate / "Pulumi.yaml").exists() and (candidate / f"Pulumi.{EXAMPLE_STACK}.yaml").exists():
            return candidate
    raise click.ClickException("Pulumi.yaml and Pulumi.dev.yaml not found: run the demo from the liqo-stack checkout")


def kubectl(env: DevEnvironment, *args: str) -> None:
    environ = dict(os.environ, KUBECONFIG=str(env.merged_kubeconfig))
    subprocess.run([str(env.bin_dir / "kubectl"), *args], env=environ, check=True)


def config_file_through_links(links_folder: Path, addresses: Mapping[str, str]) -> Path:
    """A copy of the example stack's config whose foreign clusters are reached through their links
    (`apiServerAddress`), beside the links' state: the checked-in Pulumi.dev.yaml stays as it is."""
    example = project_dir() / f"Pulumi.{EXAMPLE_STACK}.yaml"
    config = yaml.safe_load(example.read_text())
    key = "liqo:foreignClusters"
    config["config"][key] = stack_config_with_links(config["config"][key], addresses)
    copy = links_folder / example.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(yaml.safe_dump(config, sort_keys=False))
    return copy


def apply_example_stack(config_file: Path | None = None) -> dict[str, object]:
    """`pulumi up` of the example stack, with its own config or `config_file`."""
    stack = PulumiEnvironment.default().stack_for_directory(project_dir(), EXAMPLE_STACK)
    progress(f"pulumi up of the example stack ({config_file or project_dir() / f'Pulumi.{EXAMPLE_STACK}.yaml'}) ...")
    started = time.monotonic()
    with Heartbeat(progress, "running pulumi up") as beat:

        def show(line: str) -> None:
            beat.touch()
            click.echo(f"    {line.rstrip()}", err=True)

        try:
            result = stack.up(on_output=show, color="never", config_file=str(config_file) if config_file else None)
        except auto.CommandError as err:
            # the engine's own output (streamed above) says what failed; no Python traceback on top
            raise click.ClickException(
                f"pulumi up of the example stack failed after {beat.elapsed()}: see its diagnostics above"
            ) from err
    changes = ", ".join(f"{count} {op}" for op, count in (result.summary.resource_changes or {}).items())
    progress(f"pulumi up: {changes} in {time.monotonic() - started:.1f}s")
    return {key: output.value for key, output in result.outputs.items()}


def wait_for(what: str, check: Callable[[], bool], timeout: float) -> None:
    started = time.monotonic()
    with Heartbeat(progress, f"waiting for {what}"):
        while not check():
            if time.monotonic() - started > timeout:
                raise click.ClickException(
                    f"{what}: not after {format_duration(timeout)}; see the runtime logs in {runtime_logs()}"
                )
            time.sleep(0.5)
    progress(f"{what} after {time.monotonic() - started:.1f}s")


def reflected(env: DevEnvironment, cluster_id: str, twin: str) -> bool:
    """The example app's ConfigMap and Service are in the twin, as copies of the home ones."""
    client = env.client(cluster_id)
    try:
        copies: list[Any] = [
            client.get(ConfigMap, f"{DEMO_APP}-settings", namespace=twin),
            client.get(Service, DEMO_APP, namespace=twin),
        ]
    except ApiError:
        return False
    return all((c.metadata.labels or {}).get(names.ORIGIN_LABEL) for c in copies)


def runtime_logs() -> Path:
    return ExternalRuntime({}, "home").folder


def node_ready(env: DevEnvironment, name: str) -> bool:
    try:
        node = env.client("home").get(Node, name)
    except ApiError:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in (node.status and node.status.conditions) or [])


def offloading_phase(env: DevEnvironment, namespace: str) -> str | None:
    try:
        found = env.client("home").get(
            NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=namespace
        )
    except ApiError:
        return None
    return (found.get("status") or {}).get("offloadingPhase")


@click.command()
@layout_options
@link_options
@click.option("--replicas", type=click.IntRange(1, 1000), default=4, show_default=True)
@timeout_option("each step")
def demo(replicas: int, timeout: float, links: bool, link_profile: str | None, **layout: object) -> None:
    """Dev clusters, the example stack, the runtime, and an example Deployment offloaded to the virtual nodes.
    With links on (--links, or left on by `liqo-stack dev up --links`) the home reaches the foreign clusters
    through them."""
    env = DevEnvironment()
    cluster_layout = make_layout(**layout)  # type: ignore[arg-type]
    try:
        ids = env.up(cluster_layout, progress)
    except DevEnvironmentError as err:
        raise click.ClickException(str(err)) from err
    if links or link_profile is not None:
        start_links(env, cluster_layout, link_profile)
    addresses = env.links.addresses() if env.links.running() else {}
    plan = apply_example_stack(config_file_through_links(env.links.folder, addresses) if addresses else None)

    runtime = ExternalRuntime({cluster_id: env.kubeconfig(cluster_id) for cluster_id in ids}, ids[0])
    if addresses and runtime.running():
        progress("links: the runtime ran already: it reaches the foreign clusters as it did when it started")
    runtime.start_all()
    progress(f"runtime started ({', '.join(runtime.components)}); logs in {runtime.folder}")
    for cluster_id in ids[1:]:
        node = names.virtual_node_name(cluster_id)
        wait_for(f"virtual node {node} Ready", lambda node=node: node_ready(env, node), timeout)  # type: ignore[misc]
        kubelet = f"kubelet-{cluster_id}"  # ready once its kubelet API listens: the demo ends with logs and exec
        wait_for(f"{kubelet} ready", lambda kubelet=kubelet: runtime.ready(kubelet), timeout)  # type: ignore[misc]
    wait_for(f"namespace {DEMO_NAMESPACE} offloaded", lambda: offloading_phase(env, DEMO_NAMESPACE) == "Ready", timeout)

    home = env.client(ids[0])
    started = time.monotonic()
    apply_deployment(home, example_deployment(DEMO_APP, DEMO_NAMESPACE, replicas))
    for obj in example_config_and_service(DEMO_APP, DEMO_NAMESPACE):
        home.apply(obj, force=True)
    progress(f"home: Deployment {DEMO_NAMESPACE}/{DEMO_APP} applied, waiting for {replicas} pods ...")
    try:
        running = wait_pods_running(
            home, DEMO_NAMESPACE, {"app": DEMO_APP}, replicas, timeout, lambda seen: progress(f"home: pods {seen}")
        )
    except TimeoutError as err:
        raise click.ClickException(f"home: {err}; see the runtime logs in {runtime.folder}") from err
    progress(f"home: {replicas} offloaded pods Running after {time.monotonic() - started:.1f}s")
    twin = f"{DEMO_NAMESPACE}-{ids[0]}"
    for cluster_id in ids[1:]:
        wait_for(
            f"{cluster_id}: ConfigMap and Service of {DEMO_APP} reflected into {twin}",
            lambda cluster_id=cluster_id: reflected(env, cluster_id, twin),  # type: ignore[misc]
            timeout,
        )

    click.echo("\n== plan of the example stack (stack outputs)")
    click.echo(yaml.safe_dump(plan, sort_keys=False).rstrip())
    click.echo("\n== home: nodes (the virtual nodes stand for the foreign clusters)")
    kubectl(env, "--context", ids[0], "get", "nodes", "-o", "wide")
    click.echo("\n== home: liqo objects")
    kubectl(env, "--context", ids[0], "get", "virtualnodes,namespaceoffloadings", "-A")
    click.echo(f"\n== home: pods of {DEMO_NAMESPACE}/{DEMO_APP}, on the virtual nodes")
    kubectl(env, "--context", ids[0], "get", "pods", "-n", DEMO_NAMESPACE, "-o", "wide")
    for cluster_id in ids[1:]:
        twin = f"{DEMO_NAMESPACE}-{ids[0]}"
        click.echo(f"\n== {cluster_id}: the same pods, running in the twin namespace {twin}")
        kubectl(env, "--context", cluster_id, "get", "pods", "-n", twin, "-o", "wide")
        click.echo(f"\n== {cluster_id}: what the pods use, reflected from home (resource reflection)")
        kubectl(
            env,
            "--context",
            cluster_id,
            "get",
            "configmaps,services",
            "-n",
            twin,
            "-l",
            f"{names.ORIGIN_LABEL}={ids[0]}",
        )
    pod = running[0].metadata.name if running[0].metadata else ""
    click.echo(f"\n== home: kubectl logs and exec of {pod}, answered by the foreign cluster through its virtual node")
    kubectl(env, "--context", ids[0], "-n", DEMO_NAMESPACE, "logs", str(pod))
    kubectl(env, "--context", ids[0], "-n", DEMO_NAMESPACE, "exec", str(pod), "--", "sh", "-c", "echo hello from exec")
    click.echo(
        "\nThe runtime keeps running (external mode); `liqo-stack dev down` stops it with the clusters."
        '\nUse the clusters: eval "$(liqo-stack dev env)"; kubectl --context home get pods -A -o wide'
    )
