"""`liqo-stack` and kubectl as a user runs them in the tests: the installed command, against the home
cluster, and the pinned kubectl."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from pulumi import automation as auto

from liqo_stack.dev import paths
from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from liqo_stack.operating.cli import main as cli


def liqo_stack_command(dev_env: DevEnvironment, *args: str) -> list[str]:
    """`liqo-stack ARGS --kubeconfig <home>`, the console script of the tests' environment."""
    return [str(Path(sys.executable).parent / "liqo-stack"), *args, "--kubeconfig", str(dev_env.kubeconfig("home"))]


def run_liqo_stack(dev_env: DevEnvironment, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(liqo_stack_command(dev_env, *args), capture_output=True, text=True, timeout=120, check=False)


def liqo_stack_output(dev_env: DevEnvironment, *args: str) -> str:
    """What it printed; it must succeed."""
    done = run_liqo_stack(dev_env, *args)
    assert done.returncode == 0, f"{done.args}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def previewed(dev_env: DevEnvironment, *args: str) -> dict[str, dict[str, Any]]:
    """`liqo-stack preview pod ARGS -o json`: its previews by cluster id (for a pod bound to a node, or a
    cluster of one virtual node, there is one per cluster)."""
    report = json.loads(liqo_stack_output(dev_env, "preview", "pod", *args, "-o", "json"))
    return {c["cluster"]: c for c in report["clusters"]}


def run_preview(
    stack: auto.Stack, pulumi_env: PulumiEnvironment, output: str, extra: list[str] | None = None
) -> tuple[int, str]:
    """`liqo-stack preview --stack` of the stack as its config stands (`extra`: more options): exit code and
    output."""
    env = {k: v for k, v in pulumi_env.env_vars().items() if k != "PATH"}
    result = CliRunner().invoke(
        cli,
        ["preview", "--stack", stack.name, "--work-dir", stack.workspace.work_dir, "--output", output, *(extra or [])],
        env=env,
        catch_exceptions=False,
    )
    print(result.output)
    return result.exit_code, result.output


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, timeout: float = 60, **env: str) -> Any:
    """The pinned kubectl, run to its end: a CompletedProcess with text output."""
    environ = {**os.environ, "KUBECONFIG": str(kubeconfig), **env}
    command = [str(paths.bin_dir() / "kubectl"), *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout, env=environ)
