"""`liqo-stack offload|unoffload namespaces --namespace-selector ...`: many namespaces by label.

`offload namespaces` applies a NamespaceOffloadingSelector (cluster-scoped, named after the selector
unless --name says otherwise); the controller-manager offloads every namespace it matches, now and
whenever one is labelled later, and unoffloads those it offloaded once their label goes. The command
waits until every matching namespace is Ready, with progress. `unoffload namespaces` shows what
goes (the twins, as `liqo-stack preview` counts them), asks, deletes the selector and waits until
the offloadings it made are gone. Namespaces offloaded by hand are never touched by either.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click
import yaml
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Namespace

from liqo_stack.foreseeing.effects import NOT_SELECTED
from liqo_stack.kube import delete_if_present, get_or_none
from liqo_stack.operating.cli.offload import (
    FAILED,
    PROGRESS_EVERY,
    SETTLED,
    ask,
    describe_failures,
    no_cluster_selected,
    offload,
    read_peers,
    render_sections,
    selected_clusters,
    still_pending,
    twins_going,
    unoffload,
    with_cluster,
)
from liqo_stack.operating.cli.offload import home_client as _home_client
from liqo_stack.operating.cli.params import timeout_option
from runtime.api import (
    NamespaceMappingStrategy,
    PodOffloadingStrategy,
    SelectorSyntaxError,
    format_duration,
    names,
    parse_selector,
)
from runtime.api.namespaceselector import (
    LabelSelector,
    NamespaceOffloadingSelector,
    NamespaceOffloadingSelectorSpec,
    format_label_selector,
    is_system_namespace,
    label_selector_matches,
    parse_label_selector,
    selector_object_name,
    selector_problems,
)
from runtime.api.plan import selected_clusters as clusters_matching
from runtime.api.resources import NamespaceOffloadingResource, NamespaceOffloadingSelectorResource

POLL_SECONDS = 1.0  # a burst of hundreds of namespaces: each poll lists them all
SHOWN = 10  # namespace names listed in a line; the count says how many in all

# `--selector` is Liqo's word for the foreign clusters everywhere on this CLI; namespaces are picked
# with their own name (and kubectl's -l)
selector_option = click.option(
    "--namespace-selector",
    "-l",
    "namespace_selector",
    required=True,
    help="which namespaces, by label, in kubectl's -l syntax: 'team=shop', 'env in (dev,test)', '!legacy', "
    "ANDed with commas (kube-system, kube-public, kube-node-lease, default and liqo are never offloaded)",
)


def parsed_selector(text: str) -> LabelSelector:
    try:
        selector = parse_label_selector(text)
    except SelectorSyntaxError as err:
        raise click.BadParameter(str(err), param_hint="--namespace-selector") from err
    problems = selector_problems(selector)
    if problems:
        raise click.BadParameter("; ".join(problems), param_hint="--namespace-selector")
    return selector


def shown(names_: list[str]) -> str:
    more = f" and {len(names_) - SHOWN} more" if len(names_) > SHOWN else ""
    return ", ".join(names_[:SHOWN]) + more


def _labels(obj: Any) -> dict[str, str]:
    return dict((obj.metadata.labels if obj.metadata else None) or {})


def matching_namespaces(client: Client, selector: LabelSelector) -> list[str]:
    """The live namespaces the selector matches, as the controller matches them (system ones never)."""
    return sorted(
        ns.metadata.name
        for ns in client.list(Namespace)
        if ns.metadata
        and ns.metadata.name
        and not ns.metadata.deletionTimestamp
        and not is_system_namespace(ns.metadata.name)
        and label_selector_matches(selector, _labels(ns))
    )


def offloadings_by_namespace(client: Client) -> dict[str, Any]:
    return {
        o.metadata.namespace: o
        for o in client.list(NamespaceOffloadingResource, namespace="*")
        if o.metadata.name == names.NAMESPACE_OFFLOADING_NAME
    }


def owner(offloading: Any) -> str | None:
    return _labels(offloading).get(names.OFFLOADING_SELECTOR_LABEL)


def get_selector(client: Client, name: str) -> Any | None:
    return get_or_none(client, NamespaceOffloadingSelectorResource, name)


def refuse_stack_managed(found: Any, name: str) -> None:
    """A selector the stack declared is the stack's to change: `pulumi up` would put it back."""
    if _labels(found).get(names.MANAGED_BY_LABEL) == names.MANAGED_BY:
        raise click.ClickException(
            f"NamespaceOffloadingSelector {name} is declared in the stack config: change or remove it in "
            "liqo:namespaceSelectors and run `pulumi up`. Nothing was changed."
        )


def merge_sections(sections: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    merged: dict[str, list[str]] = {}
    for title, lines in sections:
        merged.setdefault(title, []).extend(lines)
    return list(merged.items())


def going_with(
    client: Client, offloadings: dict[str, Any], dropped: dict[str, list[str]], why: str
) -> list[tuple[str, list[str]]]:
    """What deleting the twins of each namespace in its clusters takes with it (as `liqo-stack preview`)."""
    peers, foreign = read_peers(client), dict[str, Client]()
    sections: list[tuple[str, list[str]]] = []
    for namespace, clusters in sorted(dropped.items()):
        twin = (offloadings[namespace].get("status") or {}).get("remoteNamespaceName")
        if clusters and twin:
            sections += twins_going(client, namespace, twin, clusters, peers, why, foreign)
    return merge_sections(sections)


@offload.command("namespaces")
@selector_option
@click.option("--name", help="the NamespaceOffloadingSelector's name [default: made from the selector]")
@click.option(
    "--namespace-mapping-strategy",
    type=click.Choice([NamespaceMappingStrategy.DEFAULT_NAME.value, NamespaceMappingStrategy.ENFORCE_SAME_NAME.value]),
    default=NamespaceMappingStrategy.DEFAULT_NAME.value,
    show_default=True,
    help="twin namespace naming (SelectedName names one namespace only)",
)
@click.option(
    "--pod-offloading-strategy",
    type=click.Choice([s.value for s in PodOffloadingStrategy]),
    default=PodOffloadingStrategy.LOCAL_AND_REMOTE.value,
    show_default=True,
    help="where their pods may run",
)
@click.option(
    "--selector",
    "cluster_selectors",
    multiple=True,
    help="which foreign clusters, on the virtual nodes' labels, e.g. 'region=europe'; repeat to OR "
    "[default: every cluster]",
)
@click.option("--yes", is_flag=True, help="do not ask before a change that unoffloads namespaces or drops clusters")
@click.option(
    "--output",
    "-o",
    type=click.Choice(["yaml", "json"]),
    help="print the NamespaceOffloadingSelector and apply nothing",
)
@timeout_option("every matching namespace Ready")
@with_cluster
def offload_namespaces(
    namespace_selector: str,
    name: str | None,
    namespace_mapping_strategy: str,
    pod_offloading_strategy: str,
    cluster_selectors: tuple[str, ...],
    yes: bool,
    output: str | None,
    timeout: float,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Offload every namespace whose labels match --namespace-selector, and each one labelled later.

    The controller-manager keeps a NamespaceOffloading in each (a namespace offloaded by hand keeps its
    own) and removes it when the namespace's label goes; waits until all are Ready."""
    selector = parsed_selector(namespace_selector)
    if name is not None and not names.is_dns_label(name):
        raise click.BadParameter(f"{name!r} {names.DNS_LABEL_RULE}", param_hint="--name")
    name = name or selector_object_name(selector)
    try:
        cluster_selector = parse_selector(list(cluster_selectors))
    except SelectorSyntaxError as err:
        raise click.BadParameter(str(err), param_hint="--selector") from err
    spec = NamespaceOffloadingSelectorSpec(
        namespace_selector=selector,
        namespace_mapping_strategy=namespace_mapping_strategy,  # a Choice of the two
        pod_offloading_strategy=PodOffloadingStrategy(pod_offloading_strategy),
        cluster_selector=cluster_selector,
    )
    obj = NamespaceOffloadingSelector(spec=spec)
    obj.metadata.name = name
    manifest = obj.to_apply()
    if output:
        click.echo(yaml.safe_dump(manifest, sort_keys=False) if output == "yaml" else json.dumps(manifest, indent=2))
        return

    client = _home_client(kubeconfig, context)
    peers = read_peers(client)
    selected = clusters_matching(cluster_selector, {p.cluster_id: p.labels for p in peers})
    if not selected:
        message = no_cluster_selected(cluster_selector, peers, given=bool(cluster_selectors))
        message = message.replace("unoffload namespace`", "unoffload namespaces`")
        raise click.BadParameter(message, param_hint="--selector")
    found = get_selector(client, name)
    if found is not None:
        refuse_stack_managed(found, name)
        if found.metadata and found.metadata.deletionTimestamp:
            raise click.ClickException(
                f"NamespaceOffloadingSelector {name} is being deleted: wait until it is gone "
                f"(`liqo-stack unoffload namespaces -l '{format_label_selector(selector)}'` waits for it)"
            )
        offloadings = offloadings_by_namespace(client)
        matched = set(matching_namespaces(client, selector))
        owned = {ns: o for ns, o in offloadings.items() if owner(o) == name}
        dropped = {
            ns: [c for c in selected_clusters(dict(o.get("status") or {})) if ns not in matched or c not in selected]
            for ns, o in owned.items()
        }
        dropped = {ns: clusters for ns, clusters in dropped.items() if clusters}
        if dropped:
            click.echo(
                f"This change takes {len(dropped)} namespaces offloaded by {name} out of some or all foreign clusters "
                "(unless another selector matches them):\n"
                + render_sections(going_with(client, owned, dropped, NOT_SELECTED))
            )
            ask(f"Change NamespaceOffloadingSelector {name}?", yes)
    try:
        client.apply(NamespaceOffloadingSelectorResource.from_dict(manifest), force=True)
    except ApiError as err:
        raise click.ClickException(f"NamespaceOffloadingSelector {name} refused: {err.status.message}") from err
    click.echo(
        f"NamespaceOffloadingSelector {name}: " + ("created" if found is None else "applied") + "\n"
        f"  namespaces: {format_label_selector(selector)}\n"
        f"  clusters: {', '.join(selected)}"
    )
    wait_offloaded(client, name, selector, timeout)


def wait_offloaded(client: Client, name: str, selector: LabelSelector, timeout: float) -> None:
    """Until every namespace the selector matches is offloaded and settled (Ready or NoClusterSelected)."""
    click.echo(f"waiting up to {format_duration(timeout)} for the matching namespaces to be Ready ...", err=True)
    started = time.monotonic()
    deadline, next_note = started + timeout, started + PROGRESS_EVERY
    last: tuple[int, int] | None = None
    while True:
        matched = matching_namespaces(client, selector)
        offloadings = offloadings_by_namespace(client)
        ready, others, waiting, failed = [], [], [], {}
        for namespace in matched:
            offloading = offloadings.get(namespace)
            if offloading is not None and owner(offloading) != name:
                others.append(namespace)  # by hand, or by a selector named before this one: left as it is
                continue
            status = dict((offloading.get("status") if offloading is not None else None) or {})
            generation = offloading.metadata.generation if offloading is not None else None
            phase = status.get("offloadingPhase") if status.get("observedGeneration") == generation else None
            if phase in SETTLED:
                ready.append(namespace)
            elif phase in FAILED and not still_pending(status):
                failed[namespace] = status
            else:
                waiting.append(namespace)
        mine = len(matched) - len(others)
        if (len(ready), mine) != last:
            click.echo(f"  {len(ready)}/{mine} namespaces Ready", err=True)
            last = (len(ready), mine)
        if not waiting:
            break
        if time.monotonic() >= deadline:
            raise click.ClickException(
                f"{len(waiting)} of {mine} namespaces not Ready after {format_duration(timeout)}: {shown(waiting)}. "
                "Is the controller-manager running? See `kubectl get namespaceoffloadingselector "
                f"{name} -o yaml` and `kubectl get namespaceoffloading -A`."
            )
        if time.monotonic() >= next_note:
            elapsed = format_duration(round(time.monotonic() - started))
            click.echo(f"  still waiting for {len(waiting)} namespaces ({elapsed}): {shown(waiting)}", err=True)
            next_note += PROGRESS_EVERY
        time.sleep(POLL_SECONDS)
    if others:
        click.echo(f"left as they are (offloaded by hand or by another selector): {shown(others)}")
    if failed:
        details = "\n".join(f"{ns}:\n{describe_failures(status)}" for ns, status in sorted(failed.items()))
        raise click.ClickException(f"{len(failed)} namespaces failed to offload:\n{details}")
    if not matched:
        click.echo(f"no namespace matches {format_label_selector(selector)} yet: those labelled later are offloaded")
    else:
        click.echo(f"{len(ready)} namespaces offloaded by {name}: {shown(ready)}")


@unoffload.command("namespaces")
@selector_option
@click.option("--name", help="the NamespaceOffloadingSelector's name [default: the one with this selector]")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@timeout_option("the twins to be deleted")
@with_cluster
def unoffload_namespaces(
    namespace_selector: str, name: str | None, yes: bool, timeout: float, kubeconfig: str | None, context: str | None
) -> None:
    """Stop offloading the namespaces offloaded by --namespace-selector: their twin namespaces, and everything in
    them, are deleted in every foreign cluster (namespaces offloaded by hand stay); waits until they are gone."""
    selector = parsed_selector(namespace_selector)
    text = format_label_selector(selector)
    client = _home_client(kubeconfig, context)
    selectors = {str(s.metadata.name): s for s in client.list(NamespaceOffloadingSelectorResource) if s.metadata}
    if name is None:
        same = [
            n
            for n, s in selectors.items()
            if format_label_selector(LabelSelector.model_validate((s.get("spec") or {}).get("namespaceSelector") or {}))
            == text
        ]
        if not same:
            raise click.ClickException(
                f"no NamespaceOffloadingSelector selects {text}: nothing to do "
                "(`kubectl get namespaceoffloadingselectors` lists them; a namespace offloaded by hand is "
                "unoffloaded with `liqo-stack unoffload namespace NAME`)"
            )
        name = same[0]
    assert name is not None
    if name not in selectors:
        raise click.ClickException(f"no NamespaceOffloadingSelector {name}: nothing to do")
    found = selectors[name]
    refuse_stack_managed(found, name)
    offloadings = offloadings_by_namespace(client)
    owned = {ns: o for ns, o in offloadings.items() if owner(o) == name}
    by_hand = [
        ns for ns in matching_namespaces(client, selector) if ns in offloadings and owner(offloadings[ns]) is None
    ]
    going = {ns: selected_clusters(dict(o.get("status") or {})) for ns, o in owned.items()}
    sections = going_with(client, owned, going, "unoffloaded")
    click.echo(
        f"NamespaceOffloadingSelector {name} ({text}) offloads {len(owned)} namespaces"
        + (f": {shown(sorted(owned))}" if owned else "")
    )
    if sections:
        click.echo(render_sections(sections))
    if by_hand:
        click.echo(f"Left as they are (offloaded by hand): {shown(by_hand)}")
    ask(
        f"This unoffloads {len(owned)} namespaces (unless another selector matches them): their twin namespaces "
        "and all they contain are deleted in every foreign cluster. Continue?",
        yes,
    )
    delete_if_present(client, NamespaceOffloadingSelectorResource, name)
    click.echo(f"unoffloading: waiting up to {format_duration(timeout)} for the twins to be deleted ...", err=True)
    started = time.monotonic()
    deadline, next_note = started + timeout, started + PROGRESS_EVERY
    last = None
    while True:
        remaining = sorted(ns for ns, o in offloadings_by_namespace(client).items() if owner(o) == name)
        if not remaining and get_selector(client, name) is None:
            break
        if len(remaining) != last:
            click.echo(f"  {len(remaining)} namespaces still unoffloading", err=True)
            last = len(remaining)
        if time.monotonic() >= deadline:
            raise click.ClickException(
                f"{len(remaining)} namespaces still unoffloading after {format_duration(timeout)}: {shown(remaining)}. "
                "Is the controller-manager running? See `kubectl get namespaceoffloading -A`."
            )
        if time.monotonic() >= next_note:
            elapsed = format_duration(round(time.monotonic() - started))
            click.echo(f"  still waiting for the twins to be deleted ({elapsed}): {shown(remaining)}", err=True)
            next_note += PROGRESS_EVERY
        time.sleep(POLL_SECONDS)
    click.echo(f"NamespaceOffloadingSelector {name} removed: {len(owned)} namespaces unoffloaded")
