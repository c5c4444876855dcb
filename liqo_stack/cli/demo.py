"""`liqo-stack demo`: the main job on the embedded default.

Local home and foreign clusters, the example stack (Pulumi.dev.yaml) applied with `pulumi up`,
its plan printed, and an example Deployment running in each foreign cluster.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import click
import yaml

import liqo_stack
from liqo_stack.cli.dev import layout_options, make_layout, progress
from liqo_stack.dev.clusters import DevEnvironment, DevEnvironmentError
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from liqo_stack.dev.workloads import apply_deployment, example_deployment, wait_pods_running

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


def apply_example_stack() -> dict[str, object]:
    stack = PulumiEnvironment.default().stack_for_directory(project_dir(), EXAMPLE_STACK)
    progress(f"pulumi up of the example stack ({project_dir() / f'Pulumi.{EXAMPLE_STACK}.yaml'}) ...")
    started = time.monotonic()
    result = stack.up(on_output=lambda line: click.echo(f"    {line.rstrip()}", err=True), color="never")
    changes = ", ".join(f"{count} {op}" for op, count in (result.summary.resource_changes or {}).items())
    progress(f"pulumi up: {changes} in {time.monotonic() - started:.1f}s")
    return {key: output.value for key, output in result.outputs.items()}


@click.command()
@layout_options
@click.option("--replicas", type=click.IntRange(1, 1000), default=3, show_default=True)
@click.option("--timeout", type=float, default=120, show_default=True, help="seconds to wait for pods")
def demo(replicas: int, timeout: float, **layout: object) -> None:
    """Bring up the dev clusters, apply the example stack, run an example Deployment in each foreign cluster."""
    env = DevEnvironment()
    try:
        ids = env.up(make_layout(**layout), progress)  # type: ignore[arg-type]
    except DevEnvironmentError as err:
        raise click.ClickException(str(err)) from err
    plan = apply_example_stack()
    for cluster_id in ids[1:]:
        client = env.client(cluster_id)
        started = time.monotonic()
        apply_deployment(client, example_deployment(DEMO_APP, DEMO_NAMESPACE, replicas))
        progress(f"{cluster_id}: Deployment {DEMO_NAMESPACE}/{DEMO_APP} applied, waiting for {replicas} pods ...")
        try:
            wait_pods_running(client, DEMO_NAMESPACE, {"app": DEMO_APP}, replicas, timeout)
        except TimeoutError as err:
            raise click.ClickException(f"{cluster_id}: {err}") from err
        progress(f"{cluster_id}: {replicas} pods Running after {time.monotonic() - started:.1f}s")

    click.echo("\n== plan of the example stack (stack outputs)")
    click.echo(yaml.safe_dump(plan, sort_keys=False).rstrip())
    for cluster_id in ids:
        click.echo(f"\n== {cluster_id}: nodes")
        kubectl(env, "--context", cluster_id, "get", "nodes", "-o", "wide")
    click.echo("\n== home: liqo objects")
    kubectl(env, "--context", "home", "get", "virtualnodes,namespaceoffloadings", "-A")
    for cluster_id in ids[1:]:
        click.echo(f"\n== {cluster_id}: pods of {DEMO_NAMESPACE}/{DEMO_APP}")
        kubectl(env, "--context", cluster_id, "get", "deployment,pods", "-n", DEMO_NAMESPACE, "-o", "wide")
    click.echo('\nUse the clusters: eval "$(liqo-stack dev env)"; kubectl --context foreign-1 get pods -A')
