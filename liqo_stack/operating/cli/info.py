"""`liqo-stack info`: peerings, virtual nodes and offloaded namespaces, as the home cluster sees them."""

from __future__ import annotations

import json
from typing import Any

import click
import yaml
from lightkube import Client
from lightkube.resources.core_v1 import Node
from lightkube.utils.quantity import parse_quantity

from liqo_stack.kube import get_or_none
from liqo_stack.operating.cli.offload import home_client, shown_labels, with_cluster
from runtime.api import names
from runtime.api.resources import NamespaceOffloadingResource, VirtualNodeResource

_BINARY = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_BYTES = ("memory", "ephemeral-storage")


def display_quantity(resource: str, quantity: str) -> str:
    """A capacity in Kubernetes' units, as a person reads it: cpu in cores or millicores (`8`, `500m`),
    bytes in the largest binary unit that keeps at least 10 of it, rounded down (`115Gi`, `1536Mi`)."""
    amount = parse_quantity(quantity)
    if amount is None:
        return quantity
    if resource == "cpu":
        millis = int(amount * 1000)
        return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"
    if resource in _BYTES or resource.startswith("hugepages-"):
        for suffix, size in _BINARY:
            if amount >= 10 * size or (amount >= size and amount % size == 0):
                return f"{int(amount // size)}{suffix}"
        return str(int(amount))
    return str(int(amount)) if amount == amount.to_integral_value() else quantity


def node_summary(client: Client, name: str) -> dict[str, Any]:
    node = get_or_none(client, Node, name)
    if node is None:
        return {"registered": False}
    conditions = (node.status.conditions if node.status else None) or []
    ready = next((c.status for c in conditions if c.type == "Ready"), "Unknown")
    capacity = dict((node.status.capacity if node.status else None) or {})
    labels = dict((node.metadata.labels if node.metadata else None) or {})
    return {"registered": True, "ready": ready, "capacity": capacity, "labels": labels}


def collect(client: Client) -> dict[str, Any]:
    peerings = []
    for vn in client.list(VirtualNodeResource, namespace=names.LIQO_NAMESPACE):
        spec = vn.get("spec") or {}
        cluster_id = str(spec.get("clusterID"))
        peerings.append(
            {
                "clusterId": cluster_id,
                # one per VirtualNode: a cluster offered as node pools has one per pool
                "virtualNode": vn.metadata.name,
                "sharingPercentage": spec.get("sharingPercentage"),
                "labels": spec.get("labels") or {},
                "node": node_summary(client, vn.metadata.name),
            }
        )
    namespaces = []
    for offloading in client.list(NamespaceOffloadingResource, namespace="*"):
        status = offloading.get("status") or {}
        clusters = {
            cluster_id: {c["type"]: c["status"] for c in conditions}
            for cluster_id, conditions in (status.get("remoteNamespacesConditions") or {}).items()
        }
        namespaces.append(
            {
                "namespace": offloading.metadata.namespace,
                "phase": status.get("offloadingPhase"),
                "twin": status.get("remoteNamespaceName"),
                "podOffloadingStrategy": (offloading.get("spec") or {}).get("podOffloadingStrategy"),
                "clusters": clusters,
            }
        )
    return {
        "peerings": sorted(peerings, key=lambda p: (str(p["clusterId"]), str(p["virtualNode"]))),
        "namespaces": namespaces,
    }


def render(data: dict[str, Any]) -> str:
    lines = ["PEERINGS"]
    if not data["peerings"]:
        lines.append("  none: apply a stack with foreignClusters (pulumi up)")
    for p in data["peerings"]:
        node = p["node"]
        if node["registered"]:
            capacity = node["capacity"]
            shown = {r: display_quantity(r, capacity[r]) for r in ("cpu", "memory", "pods") if r in capacity}
            state = f"node Ready={node['ready']}, " + ", ".join(f"{r} {q}" for r, q in shown.items())
        else:
            state = "node not registered yet (is its virtual kubelet running?)"
        lines.append(f"  {p['clusterId']:<16} {p['virtualNode']:<24} sharing {p['sharingPercentage']}%  {state}")
        labels = node.get("labels") or p["labels"]
        lines.append(f"    labels: {shown_labels(labels) or 'none'}")
    lines.append("OFFLOADED NAMESPACES")
    if not data["namespaces"]:
        lines.append("  none: liqo-stack offload namespace NAME")
    for ns in data["namespaces"]:
        clusters = (
            ", ".join(
                f"{c}: Ready={v.get('Ready', 'Unknown')}"
                if v.get("OffloadingRequired") == "True"
                else f"{c}: not selected"
                for c, v in sorted(ns["clusters"].items())
            )
            or "-"
        )
        lines.append(f"  {ns['namespace']:<20} {ns['phase'] or 'pending':<18} twin {ns['twin'] or '-':<24} {clusters}")
    return "\n".join(lines)


@click.command()
@click.option("--output", "-o", type=click.Choice(["yaml", "json"]), help="machine-readable output")
@with_cluster
def info(output: str | None, kubeconfig: str | None, context: str | None) -> None:
    """Peerings, virtual nodes (readiness, capacity, the labels cluster selectors match) and offloaded
    namespaces with per-cluster status."""
    data = collect(home_client(kubeconfig, context))
    if output == "json":
        click.echo(json.dumps(data, indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(data, sort_keys=False))
    else:
        click.echo(render(data))
