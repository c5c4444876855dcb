"""`liqo-stack offload|unoffload namespace NAME`: the seeds' liqoctl commands, against the home cluster.

`offload` on a namespace already offloaded changes only what its flags give, prints each change, and
asks before a change that drops a cluster (its twin is deleted there: shown as `liqo-stack preview`
counts it); a selector that matches no virtual node is refused, listing the virtual nodes' labels.
`unoffload` asks first, then waits until the twins are gone, with progress.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

import click
import yaml
from lightkube import ApiError, Client, KubeConfig
from lightkube.core.exceptions import ConfigError
from lightkube.resources.core_v1 import Namespace, Node, Pod, Secret

from liqo_stack import kube
from liqo_stack.foreseeing.effects import NOT_SELECTED, PodOnNode, TwinState, count_twin, pods_losing_node, twin_deleted
from liqo_stack.kube import delete_if_present, get_or_none
from liqo_stack.operating.cli.params import timeout_option
from liqo_stack.operating.cli.preview import pod_losing_node_line, twin_deleted_line
from runtime.api import (
    NamespaceMappingStrategy,
    NamespaceOffloading,
    NamespaceOffloadingSpec,
    NodeSelector,
    OffloadingPhase,
    PodOffloadingStrategy,
    SelectorSyntaxError,
    format_duration,
    names,
    parse_selector,
)
from runtime.api.plan import selected_clusters as clusters_matching
from runtime.api.plan import selection_labels
from runtime.api.resources import NamespaceOffloadingResource, VirtualNodeResource
from runtime.api.selectors import format_selector

FIELD_MANAGER = "liqo-stack-cli"
SETTLED = {OffloadingPhase.READY.value, OffloadingPhase.NO_CLUSTER_SELECTED.value}
FAILED = {OffloadingPhase.SOME_FAILED.value, OffloadingPhase.ALL_FAILED.value}


def home_client(kubeconfig: str | None, context: str | None) -> Client:
    """The home cluster's client (--kubeconfig, --context)."""
    return cluster_client(kubeconfig, context)


def cluster_client(kubeconfig: str | None, context: str | None) -> Client:
    """A cluster's client from --kubeconfig (else $KUBECONFIG) and --context; a bad one is a usage error."""
    try:
        config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
        return kube.client(config.get(context_name=context) if context else config, field_manager=FIELD_MANAGER)
    except (ConfigError, ValueError) as err:
        source = kubeconfig or "the kubeconfig ($KUBECONFIG or ~/.kube/config)"
        raise click.ClickException(
            f"--kubeconfig/--context: {source}: {err} (kubectl config get-contexts lists what it has)"
        ) from err


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
    return obj.to_apply()


def selected_clusters(status: dict[str, Any]) -> list[str]:
    """Clusters the status says are selected (it lists every peer, selected or not: docs/offloading.md)."""
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


PROGRESS_EVERY = 10.0  # seconds between "still waiting" lines


def ask(question: str, yes: bool) -> None:
    """`--yes` goes ahead; else the question on the terminal; with no terminal (a script, a pipe,
    CI) nothing is asked and nothing done: the error says to pass --yes."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.ClickException(
            f"{question}\n"
            "Nothing was changed: stdin is not a terminal to ask on; pass --yes to go ahead without asking."
        )
    click.confirm(question, abort=True)


# -- what is there -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    """A foreign cluster as the home cluster sees it: its virtual node's labels (what a cluster
    selector is matched against, as the controller matches it) and its credentials Secret."""

    cluster_id: str
    labels: dict[str, str]
    secret: str

    @property
    def node(self) -> str:
        return names.virtual_node_name(self.cluster_id)


def read_peers(client: Client, virtual_nodes: list[Node] | None = None) -> list[Peer]:
    """The peered clusters; `virtual_nodes`: the virtual Nodes at home when the caller listed them already."""
    specs = [vn.get("spec") or {} for vn in client.list(VirtualNodeResource, namespace=names.LIQO_NAMESPACE)]
    node_labels: dict[str, dict[str, str]] = {}
    if virtual_nodes is None:
        virtual_nodes = list(client.list(Node, labels={names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE}))
    for node in virtual_nodes:
        labels = dict((node.metadata.labels if node.metadata else None) or {})
        if names.REMOTE_CLUSTER_ID_LABEL in labels:
            node_labels[labels[names.REMOTE_CLUSTER_ID_LABEL]] = labels
    labels = selection_labels({str(s["clusterID"]): s.get("labels") or {} for s in specs}, node_labels)
    return sorted(
        (
            Peer(
                cluster_id=str(s["clusterID"]),
                labels=labels[str(s["clusterID"])],
                secret=(s.get("kubeconfigSecretRef") or {}).get("name", names.credentials_secret_name(s["clusterID"])),
            )
            for s in {str(s["clusterID"]): s for s in specs}.values()  # a cluster offered as pools has several
        ),
        key=lambda p: p.cluster_id,
    )


def describe_peers(peers: list[Peer]) -> str:
    if not peers:
        return "  (no virtual node: peer a foreign cluster first, `pulumi up` with liqo:foreignClusters)"
    return "\n".join(f"  {p.node} ({p.cluster_id}): {shown_labels(p.labels)}" for p in peers)


def shown_labels(labels: dict[str, str]) -> str:
    """A virtual node's labels, without the kubernetes.io ones every node has (hostname, os, arch) and
    the largest-pod figures, which follow the foreign load and are for pods' affinity, not cluster selectors."""
    return ", ".join(
        f"{k}={v}" for k, v in sorted(labels.items()) if not k.startswith(KUBERNETES_LABELS) and k not in FIGURE_LABELS
    )


KUBERNETES_LABELS = ("kubernetes.io/", "node.kubernetes.io/", "beta.kubernetes.io/")  # every node has them
FIGURE_LABELS = (names.LARGEST_POD_CPU_LABEL, names.LARGEST_POD_MEMORY_LABEL)


def no_cluster_selected(selector: NodeSelector, peers: list[Peer], given: bool) -> str:
    """The refusal of a selector that matches no virtual node, with what it could have meant."""
    suggestion = next(
        (
            f"{k}={v}"
            for p in peers
            for k, v in sorted(p.labels.items())
            if k not in (names.TYPE_LABEL, names.REMOTE_CLUSTER_ID_LABEL, *FIGURE_LABELS)
            and not k.startswith(KUBERNETES_LABELS)
        ),
        None,
    )
    what = "" if given else "the namespace's current cluster selector "
    text = f"{what}{format_selector(selector)} matches no virtual node. The virtual nodes and their labels:\n"
    text += describe_peers(peers)
    text += "\nNothing was changed."
    if suggestion:
        text += f" Select by those labels, e.g. --selector '{suggestion}'"
    text += "; to stop offloading the namespace, use `liqo-stack unoffload namespace`."
    return text


def foreign_client(home: Client, peer: Peer) -> Client:
    """A client of the foreign cluster with the home identity's credentials (the Secret the stack made)."""
    secret = home.get(Secret, peer.secret, namespace=names.LIQO_NAMESPACE)
    kubeconfig = base64.b64decode((secret.data or {})["kubeconfig"]).decode()
    return kube.client(KubeConfig.from_dict(yaml.safe_load(kubeconfig)), field_manager=FIELD_MANAGER)


def twins_going(
    home: Client,
    namespace: str,
    twin: str,
    clusters: list[str],
    peers: list[Peer],
    why: str,
    foreign: dict[str, Client] | None = None,
) -> list[tuple[str, list[str]]]:
    """What deleting the twin of `namespace` in `clusters` takes with it, as `liqo-stack preview` reports
    it (the same counts and lines): (section title, lines). `foreign`: clients kept across calls."""
    by_id = {p.cluster_id: p for p in peers}
    foreign = {} if foreign is None else foreign
    at_home = [
        pod
        for pod in home.list(Pod, namespace=namespace)
        if pod.spec and pod.spec.nodeName and (pod.status.phase if pod.status else None) not in ("Succeeded", "Failed")
    ]
    deleted, losing = [], []
    for cluster_id in clusters:
        peer = by_id.get(cluster_id)
        try:
            if peer is None:
                raise LookupError(f"no VirtualNode for {cluster_id}")
            if cluster_id not in foreign:
                foreign[cluster_id] = foreign_client(home, peer)
            pods, objects = count_twin(foreign[cluster_id], twin)
            deleted.append(
                twin_deleted_line(twin_deleted(namespace, cluster_id, twin, TwinState(True, True, pods, objects), why))
            )
        except Exception as err:  # unreachable, no credentials: say so rather than claim it is empty
            deleted.append(f"{cluster_id}: {twin} (namespace {namespace}, {why}): contents not known ({err})")
        nodes = {  # the cluster's virtual node, or one per node pool
            n.metadata.name for n in home.list(Node, labels={names.REMOTE_CLUSTER_ID_LABEL: cluster_id}) if n.metadata
        }
        on_node = [
            PodOnNode(namespace, p.metadata.name or "", {})
            for p in at_home
            if p.spec and p.spec.nodeName in nodes and p.metadata
        ]
        losing += [pod_losing_node_line(p) for p in pods_losing_node(namespace, cluster_id, on_node)]
    sections = [("Twin namespaces to be deleted", deleted)]
    if losing:
        sections.append(("Pods losing their virtual node", losing))
    return sections


def render_sections(sections: list[tuple[str, list[str]]]) -> str:
    return "\n".join(f"{title}:\n" + "\n".join(f"  {line}" for line in lines) for title, lines in sections)


# -- what changes ----------------------------------------------------------------------------------


def merged_spec(
    current: NamespaceOffloadingSpec | None,
    *,
    namespace_mapping_strategy: str | None,
    remote_namespace_name: str | None,
    pod_offloading_strategy: str | None,
    selector: NodeSelector | None,
) -> tuple[NamespaceOffloadingSpec, list[str]]:
    """The spec to apply: each option given, else its current value (else the seeds' default); and
    warnings to print. Raises click.BadParameter naming the flag."""
    base = current or NamespaceOffloadingSpec()
    strategy = NamespaceMappingStrategy(namespace_mapping_strategy or base.namespace_mapping_strategy)
    warnings = []
    if remote_namespace_name and strategy is not NamespaceMappingStrategy.SELECTED_NAME:
        # docs/offloading.md: the remote name is ignored with the other strategies
        warnings.append(
            f"warning: --remote-namespace-name is ignored with --namespace-mapping-strategy {strategy.value} "
            "(only SelectedName uses it)"
        )
        remote_namespace_name = None
    if strategy is NamespaceMappingStrategy.SELECTED_NAME and not remote_namespace_name:
        remote_namespace_name = base.remote_namespace_name if base.namespace_mapping_strategy is strategy else None
        if not remote_namespace_name:
            raise click.BadParameter(
                "SelectedName needs --remote-namespace-name", param_hint="--namespace-mapping-strategy"
            )
    if remote_namespace_name and not names.is_dns_label(remote_namespace_name):
        raise click.BadParameter(
            f"{remote_namespace_name!r} {names.DNS_LABEL_RULE}", param_hint="--remote-namespace-name"
        )
    spec = NamespaceOffloadingSpec(
        namespace_mapping_strategy=strategy,
        remote_namespace_name=remote_namespace_name if strategy is NamespaceMappingStrategy.SELECTED_NAME else None,
        pod_offloading_strategy=PodOffloadingStrategy(pod_offloading_strategy or base.pod_offloading_strategy),
        cluster_selector=selector if selector is not None else base.cluster_selector,
    )
    if current is not None and (
        spec.namespace_mapping_strategy is not current.namespace_mapping_strategy
        or spec.remote_namespace_name != current.remote_namespace_name
    ):
        was = current.namespace_mapping_strategy.value + (
            f" {current.remote_namespace_name}" if current.remote_namespace_name else ""
        )
        raise click.BadParameter(
            f"the namespace mapping of an offloaded namespace is immutable (docs/offloading.md; it is {was}): "
            "unoffload the namespace, then offload it again with the new strategy",
            param_hint="--namespace-mapping-strategy/--remote-namespace-name",
        )
    return spec, warnings


def _shown(field: str, spec: NamespaceOffloadingSpec) -> str:
    if field == "clusterSelector":
        return format_selector(spec.cluster_selector)
    value = spec.to_wire().get(field)
    return str(value) if value is not None else "(none)"


SPEC_FIELDS = ("namespaceMappingStrategy", "remoteNamespaceName", "podOffloadingStrategy", "clusterSelector")


def spec_changes(current: NamespaceOffloadingSpec | None, new: NamespaceOffloadingSpec) -> list[str]:
    """`field: old -> new` for every field that changes (a new offloading: `field: value`, every field set)."""
    if current is None:
        return [f"{f}: {_shown(f, new)}" for f in SPEC_FIELDS if new.to_wire().get(f) is not None]
    was, now = current.to_wire(), new.to_wire()
    return [f"{f}: {_shown(f, current)} -> {_shown(f, new)}" for f in SPEC_FIELDS if was.get(f) != now.get(f)]


@click.group()
def offload() -> None:
    """Offload a namespace to the foreign clusters."""


@offload.command("namespace")
@click.argument("name")
@click.option(
    "--namespace-mapping-strategy",
    type=click.Choice([s.value for s in NamespaceMappingStrategy]),
    help=f"twin namespace naming [default: {NamespaceMappingStrategy.DEFAULT_NAME.value}; immutable once offloaded]",
)
@click.option("--remote-namespace-name", help="twin namespace name (used with SelectedName, ignored otherwise)")
@click.option(
    "--pod-offloading-strategy",
    type=click.Choice([s.value for s in PodOffloadingStrategy]),
    help=f"where pods may run [default: {PodOffloadingStrategy.LOCAL_AND_REMOTE.value}; "
    "an offloaded namespace keeps its own]",
)
@click.option(
    "--selector",
    "selectors",
    multiple=True,
    help="cluster selector on the virtual nodes' labels, e.g. 'topology.liqo.io/region in (europe,us-west)'; "
    "repeat to OR [default: every cluster; an offloaded namespace keeps its own]",
)
@click.option("--yes", is_flag=True, help="do not ask before dropping a cluster (its twin is deleted there)")
@click.option(
    "--output", "-o", type=click.Choice(["yaml", "json"]), help="print the NamespaceOffloading and apply nothing"
)
@timeout_option("Ready")
@with_cluster
def offload_namespace(
    name: str,
    namespace_mapping_strategy: str | None,
    remote_namespace_name: str | None,
    pod_offloading_strategy: str | None,
    selectors: tuple[str, ...],
    yes: bool,
    output: str | None,
    timeout: float,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Offload namespace NAME: twin namespaces in the selected foreign clusters, pods may go there.

    On a namespace already offloaded, only the options given change (each change is printed); a
    change that drops a cluster deletes the twin there, so it is shown and asked first (--yes)."""
    try:
        selector = parse_selector(list(selectors)) if selectors else None
    except SelectorSyntaxError as err:
        raise click.BadParameter(str(err), param_hint="--selector") from err

    def merged(current: NamespaceOffloadingSpec | None) -> tuple[NamespaceOffloadingSpec, list[str]]:
        return merged_spec(
            current,
            namespace_mapping_strategy=namespace_mapping_strategy,
            remote_namespace_name=remote_namespace_name,
            pod_offloading_strategy=pod_offloading_strategy,
            selector=selector,
        )

    if output:  # the manifest from the flags and the defaults alone: no cluster is read
        spec, warnings = merged(None)
        for warning in warnings:
            click.echo(warning, err=True)
        manifest = offloading_manifest(name, spec)
        click.echo(yaml.safe_dump(manifest, sort_keys=False) if output == "yaml" else json.dumps(manifest, indent=2))
        return

    client = home_client(kubeconfig, context)
    if get_or_none(client, Namespace, name) is None:
        raise click.ClickException(
            f"namespace {name} does not exist: create it first (kubectl create namespace {name})"
        )
    found = get_offloading(client, name)
    if found is not None and found.metadata and found.metadata.deletionTimestamp:
        raise click.ClickException(
            f"namespace {name} is being unoffloaded: wait until it is (`liqo-stack unoffload namespace {name}` "
            "waits for it), then offload it again"
        )
    current = NamespaceOffloadingSpec.model_validate(found.get("spec") or {}) if found is not None else None
    spec, warnings = merged(current)
    for warning in warnings:
        click.echo(warning, err=True)
    peers = read_peers(client)
    selected = clusters_matching(spec.cluster_selector, {p.cluster_id: p.labels for p in peers})
    if not selected:
        message = no_cluster_selected(spec.cluster_selector, peers, given=selector is not None)
        if selector is not None:
            raise click.BadParameter(message, param_hint="--selector")
        raise click.ClickException(message)
    changes = spec_changes(current, spec)

    if found is not None:
        status = dict(found.get("status") or {})
        dropped = [c for c in selected_clusters(status) if c not in selected]
        if dropped and changes:
            twin = status.get("remoteNamespaceName") or ""
            click.echo(
                f"This change stops offloading {name} to {', '.join(dropped)}: its twin namespace {twin} is deleted "
                "there with everything in it.\n"
                + render_sections(twins_going(client, name, twin, dropped, peers, NOT_SELECTED))
            )
            ask(f"Drop {', '.join(dropped)} from namespace {name}?", yes)
    if found is not None and not changes:
        click.echo(f"namespace {name}: nothing to change")
    else:
        try:
            client.apply(NamespaceOffloadingResource.from_dict(offloading_manifest(name, spec)), force=True)
        except ApiError as err:  # e.g. refused by the validating webhook: its message says what to change
            raise click.ClickException(f"offloading of {name} refused: {err.status.message}") from err
        click.echo(
            f"namespace {name}: "
            + ("offloading" if found is None else "changed")
            + "\n"
            + "\n".join(f"  {change}" for change in changes)
        )
    wait_settled(client, name, timeout)


def get_offloading(client: Client, namespace: str) -> Any | None:
    return get_or_none(client, NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace)


def wait_settled(client: Client, name: str, timeout: float) -> None:
    click.echo(f"waiting up to {format_duration(timeout)} for the offloading of {name} to settle ...", err=True)
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


def withdrawals(status: dict[str, Any]) -> dict[str, str]:
    """Per foreign cluster, what the controller says of its twin while the namespace is unoffloaded."""
    found = {}
    for cluster_id, conditions in (status.get("remoteNamespacesConditions") or {}).items():
        for condition in conditions:
            if condition.get("type") == "OffloadingRequired" and condition.get("status") == "False":
                found[cluster_id] = str(condition.get("message") or condition.get("reason") or "")
    return found


@unoffload.command("namespace")
@click.argument("name")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@timeout_option("the twins to be deleted")
@with_cluster
def unoffload_namespace(name: str, yes: bool, timeout: float, kubeconfig: str | None, context: str | None) -> None:
    """Unoffload NAME: its twin namespaces, and everything in them, are deleted in every foreign cluster;
    waits until they are gone."""
    client = home_client(kubeconfig, context)
    if get_or_none(client, Namespace, name) is None:
        raise click.ClickException(f"namespace {name} does not exist (kubectl get namespaces lists them)")
    found = get_offloading(client, name)
    if found is None:
        raise click.ClickException(f"namespace {name} is not offloaded: nothing to do")
    status = dict(found.get("status") or {})
    clusters, twin = selected_clusters(status), status.get("remoteNamespaceName")
    if clusters and twin and not (found.metadata and found.metadata.deletionTimestamp):
        click.echo(render_sections(twins_going(client, name, twin, clusters, read_peers(client), "unoffloaded")))
    ask(f"This deletes the twin namespaces of {name} and all they contain in every foreign cluster. Continue?", yes)
    delete_if_present(client, NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, name)
    click.echo(
        f"unoffloading {name}: waiting up to {format_duration(timeout)} for the twins to be deleted ...", err=True
    )
    started = time.monotonic()
    deadline, next_note = started + timeout, started + PROGRESS_EVERY
    said: dict[str, str] = {}
    while time.monotonic() < deadline:
        found = get_offloading(client, name)
        if found is None:
            click.echo(f"namespace {name} unoffloaded: its twins are deleted" + (f" ({twin})" if twin else ""))
            return
        for cluster_id, state in sorted(withdrawals(dict(found.get("status") or {})).items()):
            if said.get(cluster_id) != state:
                click.echo(f"  {cluster_id}: {state}", err=True)
                said[cluster_id] = state
        if time.monotonic() >= next_note:
            click.echo(
                f"  still waiting for the twins to be deleted ({format_duration(round(time.monotonic() - started))})",
                err=True,
            )
            next_note += PROGRESS_EVERY
        time.sleep(0.5)
    raise click.ClickException(
        f"{name} still unoffloading after {format_duration(timeout)}: is the controller-manager running? "
        f"See `kubectl get namespaceoffloading -n {name} -o yaml`."
    )
