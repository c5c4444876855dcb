"""`liqo-stack promote --from A --to B`: the offloading declarations of stack A onto stack B, gated.

Copies the promoted keys (what to offload and how: namespaces, reflection, virtual-kubelet settings, the
default sharing percentage), keeps what is per environment (home and foreign clusters: ids, kubeconfigs,
labels, per-cluster sharing; runtime mode), previews B with the policy pack and the effects report, stops
when a mandatory policy fails or effects need approval without --yes (B's config is then left as it was),
else runs `up` and tags B with the version of A it came from. Promoting twice is a no-op.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
from pulumi import automation as auto

from liqo_stack.declaring import config as stack_config
from liqo_stack.operating.cli.params import policy_pack_option, work_dir_option
from liqo_stack.operating.cli.preview import (
    PreviewReport,
    preview_stack,
    render,
    select_stack,
    stack_policy_config,
)

PROMOTED_KEYS = ("namespaces", "reflection", "virtualKubelet", "sharingPercentage")
PROMOTED_FROM_TAG = "liqo-stack:promoted-from"


@dataclass
class Promotion:
    source_version: str  # "<stack>@v<update version>" of A
    changes: dict[str, tuple[auto.ConfigValue | None, auto.ConfigValue | None]]  # key -> (B now, from A)
    tagged: str | None  # B's promoted-from tag before this promotion

    def is_noop(self) -> bool:
        return not self.changes and self.tagged == self.source_version


def _version(stack: auto.Stack) -> str:
    history = stack.history(page_size=1, show_secrets=False)  # its version only: no secrets to decrypt
    if not history or history[0].version is None:
        raise click.ClickException(f"stack {stack.name} was never deployed: run `pulumi up` there first")
    return f"{stack.name}@v{history[0].version}"


def _tag(stack: auto.Stack) -> str | None:
    try:
        return stack.get_tag(PROMOTED_FROM_TAG)
    except auto.CommandError:
        return None


def plan_promotion(source: auto.Stack, target: auto.Stack) -> Promotion:
    theirs, ours = source.get_all_config(), target.get_all_config()
    changes: dict[str, tuple[auto.ConfigValue | None, auto.ConfigValue | None]] = {}
    for name in PROMOTED_KEYS:
        key = f"{stack_config.CONFIG_NAMESPACE}:{name}"
        new, old = theirs.get(key), ours.get(key)
        if _decoded(new) != _decoded(old) or (new is not None and old is not None and new.secret != old.secret):
            changes[key] = (old, new)
    return Promotion(source_version=_version(source), changes=changes, tagged=_tag(target))


def _decoded(value: auto.ConfigValue | None) -> object:
    if value is None:
        return None
    try:
        return json.loads(value.value)
    except json.JSONDecodeError:
        return value.value


def _apply_config(stack: auto.Stack, values: dict[str, auto.ConfigValue | None]) -> None:
    """Set and remove the keys in two CLI runs at most (`config set-all`, `config rm-all`), not one a key."""
    to_set = {key: value for key, value in values.items() if value is not None}
    to_remove = [key for key, value in values.items() if value is None]
    if to_set:
        stack.set_all_config(to_set)
    if to_remove:
        stack.remove_all_config(to_remove)


def _show(value: auto.ConfigValue | None) -> str:
    if value is None:
        return "(unset)"
    return "[secret]" if value.secret else value.value


@dataclass
class Outcome:
    promotion: Promotion
    report: PreviewReport | None
    applied: bool
    stopped: str | None  # why the gate stopped it

    def exit_code(self) -> int:
        if self.stopped:
            return 1
        return 0


def promote_stack(
    source: auto.Stack,
    target: auto.Stack,
    *,
    policy_pack: Path | None,
    dry_run: bool = False,
    yes: bool = False,
    echo: Callable[[str], object] = print,
) -> Outcome:
    promotion = plan_promotion(source, target)
    if promotion.is_noop():
        echo(f"{target.name} already has the declarations of {promotion.source_version}: nothing to promote")
        return Outcome(promotion, None, applied=False, stopped=None)
    for key, (old, new) in promotion.changes.items():
        echo(f"{key}: {_show(old)} -> {_show(new)}")
    before = {key: old for key, (old, _) in promotion.changes.items()}
    policy_config = stack_policy_config(policy_pack, target.name) if policy_pack else None
    applied = False
    try:
        _apply_config(target, {key: new for key, (_, new) in promotion.changes.items()})  # undone below if half done
        report = preview_stack(target, policy_pack, policy_config)
        echo(render(report, "text").rstrip())
        mandatory = [v for v in report.effects.policy_violations if v["enforcement"] == "mandatory"]
        if report.preview_failed or mandatory:
            return Outcome(promotion, report, applied=False, stopped="the preview of the target failed its policies")
        if dry_run:
            echo(f"dry run: nothing applied to {target.name}")
            return Outcome(promotion, report, applied=False, stopped=None)
        if report.effects.needs_approval() and not yes:
            return Outcome(
                promotion, report, applied=False, stopped="effects on running workloads need approval: rerun with --yes"
            )
        result = target.up(
            policy_packs=[str(policy_pack)] if policy_pack else None,
            policy_pack_configs=[str(policy_config)] if policy_config else None,
            on_output=None,
        )
        applied = True
        target.set_tag(PROMOTED_FROM_TAG, promotion.source_version)
        changes = {k: v for k, v in (result.summary.resource_changes or {}).items() if k != "same"}
        echo(
            f"promoted {promotion.source_version} to {target.name}: {len(promotion.changes)} config keys, "
            f"resources {changes or 'unchanged'}"
        )
        return Outcome(promotion, report, applied=True, stopped=None)
    finally:
        if not applied:
            _apply_config(target, before)  # stopped or dry run: B's config is left as it was


@click.command()
@click.option("--from", "source_name", required=True, help="the stack to promote from, e.g. dev")
@click.option("--to", "target_name", required=True, help="the stack to promote to, e.g. staging")
@click.option("--dry-run", is_flag=True, help="print what would change and apply nothing")
@click.option("--yes", is_flag=True, help="apply even when the effects report needs approval (twins deleted, ...)")
@work_dir_option()
@policy_pack_option("policy pack the target's preview must pass")
def promote(source_name: str, target_name: str, dry_run: bool, yes: bool, work_dir: Path, policy_pack: Path) -> None:
    """Promote the offloading declarations of one stack to the next (dev -> staging -> prod)."""
    if source_name == target_name:
        raise click.BadParameter("must differ from --from", param_hint="--to")
    try:
        source = select_stack(source_name, work_dir.resolve())
        target = select_stack(target_name, work_dir.resolve())
        outcome = promote_stack(
            source, target, policy_pack=policy_pack.resolve(), dry_run=dry_run, yes=yes, echo=click.echo
        )
    except (stack_config.ConfigError, auto.CommandError, OSError) as err:
        click.echo(f"liqo-stack promote: {err}", err=True)
        sys.exit(1)
    if outcome.stopped:
        click.echo(f"stopped: {outcome.stopped}; nothing applied to {target_name}", err=True)
    sys.exit(outcome.exit_code())
