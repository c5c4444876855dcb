"""`liqo-stack dev ...`: the local home and foreign clusters."""

from __future__ import annotations

import ipaddress
import shlex
import shutil
import sys
from pathlib import Path

import click

from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment, DevEnvironmentError, NodeShape
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.links import PROFILES, LinkError
from liqo_stack.dev.pulumi_offline import PulumiEnvironment


def progress(message: str) -> None:
    click.echo(f"  {message}", err=True)


def _cidrs_by_cluster(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    """Repeated `ID=CIDR` -> {ID: CIDR}; a bad entry names the flag and shows an example."""
    result: dict[str, str] = {}
    for value in values:
        cluster_id, sep, cidr = value.partition("=")
        try:
            if not sep or not cluster_id:
                raise ValueError("expected CLUSTER_ID=CIDR")
            result[cluster_id] = str(ipaddress.ip_network(cidr, strict=True))
        except ValueError as err:
            raise click.BadParameter(f"{value!r}: {err} (e.g. foreign-1=10.101.0.0/16)", ctx, param) from None
    return result


def layout_options(func: click.decorators.FC) -> click.decorators.FC:
    options = [
        click.option("--foreign", type=click.IntRange(0, 8), default=2, show_default=True,
                     help="number of foreign clusters (foreign-1 ... foreign-N)"),
        click.option("--homes", type=click.IntRange(1, 4), default=1, show_default=True,
                     help="number of home clusters (home, home-2 ...): several homes on one foreign cluster"),
        click.option("--nodes", type=click.IntRange(1, 50), default=2, show_default=True,
                     help="fake nodes per cluster"),
        click.option("--node-cpu", default="16", show_default=True, help="cpu capacity of each fake node"),
        click.option("--node-memory", default="64Gi", show_default=True, help="memory capacity of each fake node"),
        click.option("--node-pods", type=click.IntRange(1, 10_000), default=110, show_default=True,
                     help="pod capacity of each fake node"),
        click.option("--node-gpus", type=click.IntRange(0, 64), default=0, show_default=True,
                     help="nvidia.com/gpu capacity of each fake node"),
        click.option("--pod-cidr", "pod_cidrs", multiple=True, metavar="ID=CIDR", callback=_cidrs_by_cluster,
                     help="a cluster's pod range (default: home 10.100.0.0/16, foreign-N 10.(100+N).0.0/16)"),
        click.option("--service-cidr", "service_cidrs", multiple=True, metavar="ID=CIDR", callback=_cidrs_by_cluster,
                     help="a cluster's service range (default: home 10.200.0.0/16, foreign-N 10.(200+N).0.0/16)"),
    ]  # fmt: skip
    for option in reversed(options):
        func = option(func)
    return func


def link_options(func: click.decorators.FC) -> click.decorators.FC:
    profiles = "; ".join(f"{p.name}: {p.description}" for p in PROFILES.values())
    options = [
        click.option("--links", is_flag=True, default=False,
                     help="put a fault-injecting proxy (toxiproxy-server) on each link from the home to a foreign "
                          "API server; stays on until `dev down`"),
        click.option("--link-profile", type=click.Choice(list(PROFILES)), default=None,
                     help=f"the links' conditions (implies --links; default: the last one set, else none): {profiles}"),
    ]  # fmt: skip
    for option in reversed(options):
        func = option(func)
    return func


def start_links(env: DevEnvironment, layout: ClusterLayout, profile: str | None) -> dict[str, str]:
    """The links of the layout's foreign clusters, reported; cluster id -> address of its proxy."""
    foreign_ids = [c for c in layout.cluster_ids() if c not in layout.home_ids()]
    try:
        addresses = env.start_links(profile, foreign_ids)
    except LinkError as err:
        raise click.ClickException(str(err)) from err
    links = env.links
    progress(f"links: toxiproxy-server on {links.url}, profile {links.profile}")
    for cluster_id, address in addresses.items():
        progress(f"links: {cluster_id} through {address} (its API server: {env.api_server_address(cluster_id)})")
    return addresses


def make_layout(
    foreign: int,
    homes: int,
    nodes: int,
    node_cpu: str,
    node_memory: str,
    node_pods: int,
    node_gpus: int,
    pod_cidrs: dict[str, str],
    service_cidrs: dict[str, str],
) -> ClusterLayout:
    shape = NodeShape(cpu=node_cpu, memory=node_memory, pods=node_pods, gpus=node_gpus)
    layout = ClusterLayout(
        foreign=foreign,
        homes=homes,
        nodes_per_cluster=nodes,
        node=shape,
        pod_cidrs=pod_cidrs,
        service_cidrs=service_cidrs,
    )
    unknown = sorted(set(pod_cidrs) - set(layout.cluster_ids())) + sorted(
        set(service_cidrs) - set(layout.cluster_ids())
    )
    if unknown:
        raise click.BadParameter(f"no cluster {unknown} in this layout ({', '.join(layout.cluster_ids())})")
    return layout


@click.group()
def dev() -> None:
    """Local clusters on loopback for development and tests."""


@dev.command()
@layout_options
@link_options
def up(links: bool, link_profile: str | None, **layout: object) -> None:
    """Start a home (or several, --homes) and N foreign clusters (idempotent); with --links, a proxy
    on each link from the home to a foreign API server."""
    env = DevEnvironment()
    cluster_layout = make_layout(**layout)  # type: ignore[arg-type]
    try:
        ids = env.up(cluster_layout, progress)
    except DevEnvironmentError as err:
        raise click.ClickException(str(err)) from err
    if links or link_profile is not None:
        start_links(env, cluster_layout, link_profile)
        progress(
            "links: a stack goes through them where liqo:foreignClusters[].apiServerAddress names them "
            "(`liqo-stack demo` sets it); a runtime started before reaches the clusters as it did"
        )
    click.echo(f'clusters running: {", ".join(ids)}; use them with: eval "$(liqo-stack dev env)"')


@dev.command()
def down() -> None:
    """Delete every dev cluster and the links' proxy (no process is left behind) and the dev Pulumi stacks
    that described them."""
    runtime = ExternalRuntime({}, "home")
    for component in runtime.running():
        runtime.stop(component)
        progress(f"stopped the runtime's {component}")
    try:
        DevEnvironment().down(progress)
    except DevEnvironmentError as err:
        raise click.ClickException(str(err)) from err
    pulumi_state = PulumiEnvironment.default().state_dir
    if pulumi_state.exists():
        shutil.rmtree(pulumi_state)
        progress(f"removed the dev Pulumi state ({pulumi_state}): its clusters are gone")


@dev.command()
def env() -> None:
    """Print shell export lines: KUBECONFIG_<ID>, KUBECONFIG (one context per cluster id), PATH, the
    offline Pulumi settings, so that `pulumi preview --diff` works in the checkout, and with links on
    TOXIPROXY_URL (for toxiproxy-cli)."""
    try:
        lines = DevEnvironment().env_exports()
    except DevEnvironmentError as err:
        raise click.ClickException(str(err)) from err
    pulumi_vars = PulumiEnvironment.default().env_vars()
    lines += [f"export {key}={shlex.quote(value)}" for key, value in pulumi_vars.items() if key != "PATH"]
    # the language host runs `python3` from PATH: this environment's, where liqo_stack is installed
    lines.append(f'export PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"')
    click.echo("\n".join(lines))
