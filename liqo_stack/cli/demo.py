"""`liqo-stack demo`: the main job on the embedded default."""

from __future__ import annotations

import os
import subprocess
import time

import click

from liqo_stack.cli.dev import layout_options, make_layout, progress
from liqo_stack.dev.clusters import DevEnvironment, DevEnvironmentError
from liqo_stack.dev.workloads import apply_deployment, example_deployment, wait_pods_running

DEMO_NAMESPACE = "demo"
DEMO_APP = "hello"


def kubectl(env: DevEnvironment, *args: str) -> None:
    environ = dict(os.environ, KUBECONFIG=str(env.merged_kubeconfig))
    subprocess.run([str(env.bin_dir / "kubectl"), *args], env=environ, check=True)


@click.command()
@layout_options
@click.option("--replicas", type=click.IntRange(1, 1000), default=3, show_default=True)
@click.option("--timeout", type=float, default=120, show_default=True, help="seconds to wait for pods")
def demo(replicas: int, timeout: float, **layout: object) -> None:
    """Bring up the dev clusters and run an example Deployment in each foreign cluster."""
    env = DevEnvironment()
    try:
        ids = env.up(make_layout(**layout), progress)  # type: ignore[arg-type]
    except DevEnvironmentError as err:
        raise click.ClickException(str(err)) from err
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
    for cluster_id in ids:
        click.echo(f"\n== {cluster_id}: nodes")
        kubectl(env, "--context", cluster_id, "get", "nodes", "-o", "wide")
    for cluster_id in ids[1:]:
        click.echo(f"\n== {cluster_id}: pods of {DEMO_NAMESPACE}/{DEMO_APP}")
        kubectl(env, "--context", cluster_id, "get", "deployment,pods", "-n", DEMO_NAMESPACE, "-o", "wide")
    click.echo('\nUse the clusters: eval "$(liqo-stack dev env)"; kubectl --context foreign-1 get pods -A')
