"""`liqo-stack preview`: the Pulumi preview with the policy pack, then what it will do to running workloads.

Exit code: 0 no effect, 2 effects present (CI gates on it), 1 error.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import yaml
from lightkube import Client, KubeConfig
from pulumi import automation as auto

from liqo_stack import kube
from liqo_stack.declaring import config as stack_config
from liqo_stack.declaring.config import NamespaceOffloadingConfig
from liqo_stack.declaring.package import properties as package
from liqo_stack.declaring.package.parts import OffloadedNamespaceSettings, parse_part
from liqo_stack.declaring.package.properties import properties_path
from liqo_stack.declaring.package.schema import OFFLOADED_NAMESPACE
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from liqo_stack.foreseeing.effects import Effects, Snapshot, effects, offloaded_namespaces_effects
from liqo_stack.operating.cli.params import policy_pack_option, work_dir_option

# `- [mandatory]  liqo-reserved-namespace-same-name  (pulumi:pulumi:Stack: ...)`, then its description, then the message
_VIOLATION = re.compile(r"^\s*- \[(mandatory|advisory)\]\s+(\S+)\s+\(")


def workspace_options(work_dir: Path) -> auto.LocalWorkspaceOptions:
    """The pinned engine; the offline dev backend unless the caller has a backend of its own."""
    env = PulumiEnvironment.default()
    options = env.workspace_options(work_dir)
    if os.environ.get("PULUMI_BACKEND_URL"):
        dev_only = ("PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "PULUMI_HOME")
        own = {k: v for k, v in (options.env_vars or {}).items() if k not in dev_only}
        own["PULUMI_BACKEND_URL"] = os.environ["PULUMI_BACKEND_URL"]
        if os.environ.get("PULUMI_HOME"):  # the caller's own: the kubernetes plugin built here goes there too
            own["PULUMI_HOME"] = os.environ["PULUMI_HOME"]
            env.install_plugins(Path(os.environ["PULUMI_HOME"]))
            options.pulumi_home = os.environ["PULUMI_HOME"]
        else:
            own["PULUMI_HOME"] = str(env.pulumi_home)
        options.env_vars = own
    return options


def select_stack(stack: str, work_dir: Path) -> auto.Stack:
    return auto.select_stack(stack_name=stack, work_dir=str(work_dir), opts=workspace_options(work_dir))


def policy_violations(output: str) -> list[dict[str, str]]:
    lines = output.splitlines()
    found = []
    for index, line in enumerate(lines):
        match = _VIOLATION.match(line)
        if match and index + 2 < len(lines):
            found.append({"enforcement": match[1], "policy": match[2], "message": lines[index + 2].strip()})
    return found


def stack_policy_config(policy_pack: Path, stack: str) -> Path | None:
    """`policies/config.<stack>.json`, the per-stack settings of the policy pack, when there is one."""
    candidate = policy_pack / f"config.{stack}.json"
    return candidate if candidate.is_file() else None


def clients_for(config: stack_config.StackConfig) -> dict[str, Client]:
    """A client per cluster: a foreign cluster peered through the identity its own stack issued is
    read as that identity (its tenant and twins only)."""
    texts = {config.home.cluster_id: config.home.kubeconfig_text()}
    texts |= {foreign.cluster_id: foreign.kubeconfig_to_read() for foreign in config.foreign_clusters}
    return {cluster_id: kube.client(KubeConfig.from_dict(yaml.safe_load(text))) for cluster_id, text in texts.items()}


@dataclass
class PreviewReport:
    stack: str
    effects: Effects
    preview_failed: str | None  # the engine's error (a mandatory policy, a bad config), if any
    changes: dict[str, int]

    def exit_code(self) -> int:
        """1 when the preview itself failed (a mandatory policy denied it, a bad config): `up` would fail too;
        the report still lists the violations and the effects."""
        if self.preview_failed:
            return 1
        return 2 if self.effects.any() else 0


class PackageComponents:
    """The package's `Stack` components a preview plans (a program in YAML, TypeScript, ...: docs/package.md):
    their new settings are the stack config of such a program, which has no `liqo:` settings."""

    def __init__(self) -> None:
        self.planned: dict[str, dict[str, Any]] = {}  # name -> its properties as the preview plans them
        # an application team's OffloadedNamespaces: name -> settings, declared now and deleted by the change
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.namespaces_removed: dict[str, dict[str, Any]] = {}

    def seen(self, event: auto.EngineEvent) -> None:
        """A component's outputs as the preview plans them: its `settings` output is what it was declared
        from (the engine does not show a remote component's properties as its inputs)."""
        step = event.res_outputs_event
        new = step.metadata.new if step is not None else None
        if step is not None and step.metadata.type == package.STACK and new is not None:
            settings = (new.outputs or {}).get(package.SETTINGS)
            if isinstance(settings, dict):
                self.planned[step.metadata.urn.rpartition("::")[2]] = settings
        if step is not None and step.metadata.type == OFFLOADED_NAMESPACE:
            name = step.metadata.urn.rpartition("::")[2]
            deleted = str(getattr(step.metadata.op, "value", step.metadata.op)) == "delete"
            state = step.metadata.old if deleted else new
            settings = ((state.outputs if state is not None else None) or {}).get(package.SETTINGS)
            if isinstance(settings, dict):
                (self.namespaces_removed if deleted else self.namespaces)[name] = settings

    def offloaded_namespaces(self) -> tuple[str, list[NamespaceOffloadingConfig], list[str]] | None:
        """An application team's stack (OffloadedNamespaces only): its home cluster id, the namespaces it
        declares and those the change removes; None when it declares no OffloadedNamespace."""
        if not self.namespaces and not self.namespaces_removed:
            return None
        declared = [parse_part(OffloadedNamespaceSettings, s, properties_path(n)) for n, s in self.namespaces.items()]
        removed = [parse_part(OffloadedNamespaceSettings, s, "") for s in self.namespaces_removed.values()]
        homes = sorted({ns.home_cluster_id for ns in [*declared, *removed]})
        if len(homes) > 1:
            raise stack_config.ConfigError(f"the OffloadedNamespaces name several home clusters ({homes})")
        return homes[0], [ns.offloading() for ns in declared], [ns.name for ns in removed]

    def config(self) -> stack_config.StackConfig | None:
        """The one component's config; None when the program declares none (a Python stack's `liqo:`)."""
        if not self.planned:
            return None
        if len(self.planned) > 1:
            raise stack_config.ConfigError(
                f"the program declares {len(self.planned)} liqo-stack Stack components ({sorted(self.planned)}): "
                "preview one stack of one home cluster at a time"
            )
        [(name, properties)] = self.planned.items()
        return package.config_of(name, properties)


def preview_stack(
    stack: auto.Stack, policy_pack: Path | None, policy_config: Path | None, home_kubeconfig: Path | None = None
) -> PreviewReport:
    """Pulumi preview (with the policy pack), then the effects from the stack's config and the live clusters."""
    failed: str | None = None
    changes: dict[str, int] = {}
    components = PackageComponents()
    try:
        result = stack.preview(
            policy_packs=[str(policy_pack)] if policy_pack else None,
            policy_pack_configs=[str(policy_config)] if policy_config else None,
            on_event=components.seen,
        )
        output = result.stdout
        # the summary's keys are the engine's operation names ("create", "same", ...), as text
        summary = {str(getattr(op, "value", op)): count for op, count in result.change_summary.items()}
        changes = {op: count for op, count in summary.items() if op != "same"}
    except auto.CommandError as err:
        output, failed = str(err), str(err)
    config = components.config()
    raw = {key: value.value for key, value in stack.get_all_config().items()}
    team = components.offloaded_namespaces()
    if config is None and team is not None and not any(key.startswith("liqo:") for key in raw):
        # an application team's stack: what its namespaces' offloadings do, read from the home cluster
        home_id, declared, removed = team
        text = home_kubeconfig.read_text() if home_kubeconfig else ""
        if not text:
            raise stack_config.ConfigError(
                "an application stack (OffloadedNamespaces only) is previewed against the home cluster: give its "
                "kubeconfig with --home-kubeconfig (default: $KUBECONFIG)"
            )
        client = kube.client(KubeConfig.from_dict(yaml.safe_load(text)))
        found = offloaded_namespaces_effects(home_id, text, client, declared, removed)
        found.policy_violations = policy_violations(output)
        return PreviewReport(stack=stack.name, effects=found, preview_failed=failed, changes=changes)
    if config is None:
        config = stack_config.from_pulumi_config(raw)  # raises ConfigError naming the field
    found = effects(config, Snapshot.read(config, clients_for(config)))
    found.policy_violations = policy_violations(output)
    return PreviewReport(stack=stack.name, effects=found, preview_failed=failed, changes=changes)


# -- output -----------------------------------------------------------------------------------------


def _objects(objects: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in objects.items()) or "no objects"


def twin_deleted_line(t: dict[str, Any]) -> str:
    """One of `Effects.twins_deleted` as a line (`liqo-stack offload` shows the same before it asks)."""
    return (
        f"{'DATA AT RISK: ' if t['dataAtRisk'] else ''}{t['cluster']}: {t['twin']} "
        f"(namespace {t['namespace']}, {t['why']}): {t['pods']} pods, {_objects(t['objects'])}"
    )


def pod_losing_node_line(p: dict[str, Any]) -> str:
    return f"{p['pod']} on {p['node']} ({p['why']})"


def reflection_line(entry: dict[str, Any]) -> str:
    """One of `Effects.running_pods_reflection`: a namespace's pods in one cluster under new settings."""
    parts = []
    if entry["relabelled"]:
        parts.append(
            f"remote labels/annotations change on {len(entry['relabelled'])} pods ({', '.join(entry['relabelled'])})"
        )
    parts += [
        f"{o['kind']} {o['name']} {o['after']}" + (f" ({o['why']})" if o["why"] else "") + f", used by "
        f"{', '.join(o['usedBy'])}"
        for o in entry["objects"]
    ]
    return f"{entry['namespace']} in {entry['cluster']} ({entry['pods']} pods running): " + "; ".join(parts)


def lines_of(report: PreviewReport) -> list[tuple[str, list[str]]]:
    """(section title, lines) for the text and markdown outputs."""
    e = report.effects
    sections: list[tuple[str, list[str]]] = []
    if e.twins_deleted:
        sections.append(
            (
                "Twin namespaces to be deleted",
                [twin_deleted_line(t) for t in e.twins_deleted],
            )
        )
    if e.pods_losing_node:
        sections.append(("Pods losing their virtual node", [pod_losing_node_line(p) for p in e.pods_losing_node]))
    if e.nodes_shrunk:
        sections.append(
            (
                "Virtual nodes shrinking below their pods' requests",
                [
                    f"{n['node']} at {n['sharingPercentage']}%: "
                    + "; ".join(
                        f"{r} requested {v['requested']} > new capacity {v['newCapacity']}"
                        for r, v in n["resources"].items()
                    )
                    + f"; pods that no longer fit: {', '.join(n['podsNotFitting']) or 'none individually'}"
                    for n in e.nodes_shrunk
                ],
            )
        )
    if e.pods_no_foreign_node_fits:
        sections.append(
            (
                "Pods that fit a virtual node in sum but no single foreign node behind it",
                [
                    f"{p['pod']} on {p['node']}: "
                    + "; ".join(
                        f"{r} requested {v['requested']} > {v['largestOnOneNode']} free on its largest foreign node"
                        for r, v in p["resources"].items()
                    )
                    for p in e.pods_no_foreign_node_fits
                ],
            )
        )
    if e.running_pods_reflection:
        sections.append(
            (
                "Running pods under new reflection settings",
                [reflection_line(entry) for entry in e.running_pods_reflection],
            )
        )
    if e.custom_objects_reflection:
        sections.append(
            (
                "Custom objects under new reflection settings",
                [
                    f"{o['kind']} {o['namespace']}/{o['name']} in {o['cluster']}: {o['after']}"
                    + (f" ({o['why']})" if o["why"] else "")
                    for o in e.custom_objects_reflection
                ],
            )
        )
    if e.twins_created:
        sections.append(
            (
                "New twin namespaces",
                [f"{t['cluster']}: {t['twin']} (namespace {t['namespace']})" for t in e.twins_created],
            )
        )
    if e.naming_conflicts:
        sections.append(("Naming conflicts (will fail)", [c["why"] for c in e.naming_conflicts]))
    if e.policy_violations:
        sections.append(
            ("Policy violations", [f"[{v['enforcement']}] {v['policy']}: {v['message']}" for v in e.policy_violations])
        )
    return sections


def render(report: PreviewReport, output: str) -> str:
    if output == "json":
        return json.dumps(
            {
                "stack": report.stack,
                "effects": report.effects.as_dict(),
                "resourceChanges": report.changes,
                "previewFailed": report.preview_failed is not None,
                "exitCode": report.exit_code(),
            },
            indent=2,
        )
    sections = lines_of(report)
    changes = ", ".join(f"{n} to {op}" for op, n in sorted(report.changes.items())) or "no resource changes"
    if output == "markdown":
        text = [f"### liqo-stack preview of `{report.stack}`", "", f"Resources: {changes}.", ""]
        if not sections:
            text.append("No effect on running workloads.")
        for title, items in sections:
            text += [f"**{title}**", "", *[f"- {item}" for item in items], ""]
        return "\n".join(text).rstrip() + "\n"
    text = [f"liqo-stack preview of {report.stack}: {changes}"]
    if not sections:
        text.append("no effect on running workloads")
    for title, items in sections:
        text += [f"{title}:", *[f"  {item}" for item in items]]
    return "\n".join(text) + "\n"


@click.group(invoke_without_command=True)
@click.option("--stack", "stack_name", help="the Pulumi stack to preview, e.g. dev")
@click.option(
    "--output", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True, help="report format"
)
@work_dir_option()
@policy_pack_option("policy pack to run with the preview (its config: <pack>/config.<stack>.json when present)")
@click.option(
    "--home-kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="KUBECONFIG",
    help="an application stack's (OffloadedNamespaces only): the home cluster's kubeconfig, read to foresee its "
    "namespaces' twins and pods [default: $KUBECONFIG]",
)
@click.pass_context
def preview(
    ctx: click.Context,
    stack_name: str | None,
    output: str,
    work_dir: Path,
    policy_pack: Path,
    home_kubeconfig: Path | None,
) -> None:
    """Preview a stack (--stack): resource changes, policy violations, and what they do to running
    workloads. Exit code 0: no effect; 2: effects present; 1: error.

    `liqo-stack preview pod`: one pod as each foreign cluster would run it."""
    if ctx.invoked_subcommand is not None:
        if stack_name:
            raise click.UsageError(f"--stack previews a stack; `preview {ctx.invoked_subcommand}` does not take it")
        return
    if not stack_name:
        raise click.UsageError("give the stack to preview with --stack (or preview a pod: liqo-stack preview pod)")
    try:
        stack = select_stack(stack_name, work_dir.resolve())
        report = preview_stack(
            stack, policy_pack.resolve(), stack_policy_config(policy_pack, stack_name), home_kubeconfig
        )
    except (stack_config.ConfigError, auto.CommandError, OSError) as err:
        click.echo(f"liqo-stack preview: {err}", err=True)
        sys.exit(1)
    click.echo(render(report, output), nl=False)
    if report.preview_failed and not report.effects.policy_violations:
        click.echo(f"the Pulumi preview failed:\n{report.preview_failed}", err=True)
    sys.exit(report.exit_code())
