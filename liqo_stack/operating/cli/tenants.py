"""`liqo-stack cordon|uncordon|drain home HOME_ID`: a foreign cluster's admin bounds one home cluster.

Run against the foreign cluster (its admin's kubeconfig), on the home's Quota in its tenant namespace
(runtime/api/quota.py), as `kubectl cordon` and `kubectl drain` do for a node:
- cordon: no new pod of that home starts here; its running pods go on, and its virtual node at home
  shows it (unschedulable, condition ForeignCordoned);
- drain: cordon, then evict its pods here (the Eviction API: PodDisruptionBudgets hold); each comes
  back home as from a drained node (its controller makes a new one where it can run). Lists the pods
  and asks first (`--yes`);
- uncordon: new pods start again.
The stack's `liqo:foreignClusters[].grant.cordoned` is the lasting setting: a `pulumi up --refresh`
puts back what the stack declares.
"""

from __future__ import annotations

import time
from typing import Any

import click
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod, PodEviction
from lightkube.types import PatchType

from liqo_stack.operating.cli.offload import PROGRESS_EVERY, ask
from liqo_stack.operating.cli.offload import cluster_client as foreign_client
from liqo_stack.operating.cli.params import timeout_option
from runtime.api import format_duration, names
from runtime.api.resources import QuotaResource

TERMINAL = ("Succeeded", "Failed")


def with_foreign_cluster(func: Any) -> Any:
    func = click.option("--context", help="context in that kubeconfig (default: its current context)")(func)
    return click.option("--kubeconfig", help="kubeconfig of the foreign cluster (default: $KUBECONFIG)")(func)


def quota_of(client: Client, home_id: str) -> Any:
    tenant = names.tenant_namespace(home_id)
    try:
        return client.get(QuotaResource, names.quota_name(home_id), namespace=tenant)
    except ApiError as err:
        if err.status.code == 404:
            raise click.ClickException(
                f"HOME_ID: no Quota {tenant}/{names.quota_name(home_id)} in this cluster: is home cluster "
                f"{home_id} peered with it? (`kubectl get quotas.offloading.liqo.io -A` lists the homes)"
            ) from None
        raise click.ClickException(f"reading the Quota of home cluster {home_id}: {err.status.message}") from None


def running_pods_of(client: Client, home_id: str) -> list[Any]:
    pods = client.list(Pod, namespace="*", labels={names.ORIGIN_LABEL: home_id})
    return [p for p in pods if (p.status.phase if p.status else None) not in TERMINAL]


def set_cordoned(client: Client, home_id: str, cordoned: bool) -> None:
    patch = {"spec": {"cordoned": cordoned}}
    client.patch(
        QuotaResource,
        names.quota_name(home_id),
        patch,
        namespace=names.tenant_namespace(home_id),
        patch_type=PatchType.MERGE,
    )


LASTING = (
    "The stack's liqo:foreignClusters[].grant.cordoned is the lasting setting (`pulumi up --refresh` restores it)."
)


@click.group()
def cordon() -> None:
    """Start no new pod of a home cluster in this foreign cluster."""


@cordon.command("home")
@click.argument("home_id")
@with_foreign_cluster
def cordon_home(home_id: str, kubeconfig: str | None, context: str | None) -> None:
    """Cordon HOME_ID in the foreign cluster: its running pods go on, new ones are not started."""
    client = foreign_client(kubeconfig, context)
    quota = quota_of(client, home_id)
    running = len(running_pods_of(client, home_id))
    if (quota.get("spec") or {}).get("cordoned"):
        click.echo(f"home cluster {home_id} is already cordoned here ({running} pods of it running)")
        return
    set_cordoned(client, home_id, True)
    click.echo(
        f"home cluster {home_id} cordoned: no new pod of it starts here; its {running} running pods go on.\n"
        f"Evict them with `liqo-stack drain home {home_id}`; undo with `liqo-stack uncordon home {home_id}`.\n"
        + LASTING
    )


@click.group()
def uncordon() -> None:
    """Let a cordoned home cluster start pods again in this foreign cluster."""


@uncordon.command("home")
@click.argument("home_id")
@with_foreign_cluster
def uncordon_home(home_id: str, kubeconfig: str | None, context: str | None) -> None:
    """Uncordon HOME_ID in the foreign cluster: its new pods start here again."""
    client = foreign_client(kubeconfig, context)
    quota = quota_of(client, home_id)
    if not (quota.get("spec") or {}).get("cordoned"):
        click.echo(f"home cluster {home_id} is not cordoned here: nothing to do")
        return
    set_cordoned(client, home_id, False)
    click.echo(f"home cluster {home_id} uncordoned: its new pods start here again.\n" + LASTING)


@click.group()
def drain() -> None:
    """Evict a home cluster's pods from this foreign cluster (destructive for those pods here)."""


@drain.command("home")
@click.argument("home_id")
@click.option("--yes", is_flag=True, help="do not ask before evicting the pods")
@timeout_option("the pods to be evicted")
@with_foreign_cluster
def drain_home(home_id: str, yes: bool, timeout: float, kubeconfig: str | None, context: str | None) -> None:
    """Drain HOME_ID: cordon it, then evict its pods here; each comes back home as from a drained node."""
    client = foreign_client(kubeconfig, context)
    quota_of(client, home_id)
    pods = running_pods_of(client, home_id)
    listing = "\n".join(f"  {p.metadata.namespace}/{p.metadata.name}" for p in pods)
    click.echo(
        f"draining home cluster {home_id}: cordon it, then evict its {len(pods)} pods here" + (":" if pods else "")
    )
    if listing:
        click.echo(listing)
    if pods:
        ask(f"Evict these {len(pods)} pods of home cluster {home_id}? They come back home.", yes)
    set_cordoned(client, home_id, True)
    click.echo(f"home cluster {home_id} cordoned: no new pod of it starts here", err=True)
    started = time.monotonic()
    deadline, next_note = started + timeout, started + PROGRESS_EVERY
    pending = {(p.metadata.namespace, p.metadata.name) for p in pods}
    refused: dict[tuple[str, str], str] = {}
    while pending and time.monotonic() < deadline:
        for namespace, name in sorted(pending):
            try:
                eviction = PodEviction(metadata=ObjectMeta(name=name, namespace=namespace))
                client.create(eviction, name, namespace=namespace)
            except ApiError as err:
                if err.status.code == 404:
                    pending.discard((namespace, name))
                    continue
                refused[(namespace, name)] = str(err.status.message)  # 429: a PodDisruptionBudget; tried again
                continue
            pending.discard((namespace, name))
            refused.pop((namespace, name), None)
            click.echo(f"  evicted {namespace}/{name}", err=True)
        if pending and time.monotonic() >= next_note:
            click.echo(
                f"  still evicting {len(pending)} pods ({format_duration(round(time.monotonic() - started))}); "
                + "; ".join(f"{ns}/{n}: {why}" for (ns, n), why in sorted(refused.items())[:3]),
                err=True,
            )
            next_note += PROGRESS_EVERY
        if pending:
            time.sleep(1)
    if pending:
        raise click.ClickException(
            f"{len(pending)} pods of home cluster {home_id} not evicted after {format_duration(timeout)} "
            f"(its cordon stays): {', '.join(f'{ns}/{n}' for ns, n in sorted(pending))}. "
            + "; ".join(f"{ns}/{n}: {why}" for (ns, n), why in sorted(refused.items()))
            + " Check their PodDisruptionBudgets, then run the drain again."
        )
    click.echo(f"home cluster {home_id} drained: its pods were evicted, and it stays cordoned here")
