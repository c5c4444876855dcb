"""Pulumi without a network: a local file backend, passphrase secrets, no update checks, no plugin downloads.

The CLI, the Python language host and the plugins come from the pinned toolchain (tools/), so
every Pulumi run here uses exactly the engine we built; nothing is fetched at run time.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pulumi import automation as auto

from liqo_stack.dev import paths

# Secrets of dev and test stacks only; real stacks set PULUMI_CONFIG_PASSPHRASE themselves.
DEV_PASSPHRASE = "liqo-stack-dev-only"


@dataclass(frozen=True)
class PulumiEnvironment:
    state_dir: Path
    bin_dir: Path

    @classmethod
    def default(cls) -> PulumiEnvironment:
        return cls(state_dir=paths.state_root() / "pulumi", bin_dir=paths.bin_dir())

    @property
    def backend_url(self) -> str:
        return f"file://{self.state_dir / 'backend'}"

    @property
    def pulumi_home(self) -> Path:
        return self.state_dir / "home"

    def env_vars(self) -> dict[str, str]:
        """Variables for the pulumi CLI and the programs it runs (the built plugins installed first)."""
        (self.state_dir / "backend").mkdir(parents=True, exist_ok=True)
        self.pulumi_home.mkdir(parents=True, exist_ok=True)
        self._without_automatic_logs()
        self.install_plugins()
        return {
            "PULUMI_BACKEND_URL": self.backend_url,
            "PULUMI_HOME": str(self.pulumi_home),
            "PULUMI_CONFIG_PASSPHRASE": os.environ.get("PULUMI_CONFIG_PASSPHRASE", DEV_PASSPHRASE),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            # a crash of a Python provider process then shows its threads' tracebacks in the diagnostics
            "PYTHONFAULTHANDLER": "1",
            # The pinned engine first, then this interpreter's environment: the policy pack's analyzer
            # (liqo_stack/foreseeing/policy_host.py) and the retired dynamic providers of an upgrade run there.
            "PATH": os.pathsep.join([str(self.bin_dir), str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        }

    def _without_automatic_logs(self) -> None:
        """The pinned pulumi writes every command's debug log, gzipped and encrypted, to PULUMI_HOME/logs
        (2.4 MB per preview of the example stack) and has no setting to stop it (pulumi/pulumi#22416).
        Without it a preview's CLI used 0.65 CPU-seconds instead of 2.0 (its own profile), all its
        processes 5.2-5.9 instead of 6.0-6.7. A file in that directory's place makes pulumi skip it
        ("automatic logging unavailable", at info level). An existing directory is left as it is;
        delete the file to have the logs again."""
        logs = self.pulumi_home / "logs"
        if not logs.exists():
            logs.write_text("pulumi's automatic logs are off in this environment (liqo_stack/dev/pulumi_offline.py)\n")

    def install_plugins(self, pulumi_home: Path | None = None) -> list[str]:
        """Install each plugin the toolchain built (tools/build.py: `pulumi-resource-kubernetes`) into
        PULUMI_HOME (this environment's, or `pulumi_home`), as `pulumi plugin install --file` does for a
        downloaded one; the engine then finds it by the version the SDK asks for, and nothing is
        fetched. Returns what it installed now."""
        installed = []
        home = pulumi_home or self.pulumi_home
        source = paths.plugins_dir()
        for plugin in sorted(source.iterdir()) if source.is_dir() else []:
            kind, _, rest = plugin.name.partition("-")
            name, _, version = rest.rpartition("-v")
            target = home / "plugins" / plugin.name
            if target.is_dir() and not target.with_name(f"{plugin.name}.partial").exists():
                continue
            binary = plugin / f"pulumi-{kind}-{name}"
            command = [
                str(self.bin_dir / "pulumi"),
                "plugin",
                "install",
                kind,
                name,
                f"v{version}",
                "--file",
                str(binary),
            ]
            env = {**os.environ, "PULUMI_HOME": str(home), "PULUMI_SKIP_UPDATE_CHECK": "true"}
            try:
                subprocess.run(command, env=env, check=True, capture_output=True, text=True)
            except (OSError, subprocess.CalledProcessError) as err:
                said = getattr(err, "stderr", None) or str(err)
                raise RuntimeError(
                    f"cannot install the {kind} plugin {name} v{version} ({binary}) into {home}: {said.strip()}; "
                    "run `python3 tools/build.py` (it builds pulumi and the plugin) and try again"
                ) from err
            installed.append(f"{kind} {name} v{version}")
        return installed

    def command(self) -> auto.PulumiCommand:
        return _pulumi_command(self.bin_dir.parent)

    @property
    def scratch_dir(self) -> Path:
        """TMPDIR of the engine and its plugins: pulumi-kubernetes writes each provider's kubeconfig to a
        temporary file (for Helm) and never removes it; here they stay with the state, which
        `liqo-stack dev down` (or the test session's temporary directory) removes."""
        return self.state_dir / "tmp"

    def workspace_options(self, work_dir: Path | None = None) -> auto.LocalWorkspaceOptions:
        self.scratch_dir.mkdir(parents=True, exist_ok=True)
        env_vars = {**self.env_vars(), "TMPDIR": str(self.scratch_dir)}
        if work_dir is not None and _runs_python3_from_path(work_dir) and "PULUMI_PYTHON_CMD" not in os.environ:
            env_vars["PULUMI_PYTHON_CMD"] = str(self.python_command())
        return auto.LocalWorkspaceOptions(
            work_dir=str(work_dir) if work_dir else None,
            pulumi_home=str(self.pulumi_home),
            env_vars=env_vars,
            pulumi_command=self.command(),
        )

    def python_command(self) -> Path:
        """The `python3` the language host runs (PULUMI_PYTHON_CMD) in this environment's workspaces: its
        package listing, `python -m pip list -v --format json` before each engine operation, is answered
        by installed_distributions.py (0.2 CPU-seconds, pip's 1.0-1.2); anything else runs as the
        `python3` on PATH it would have run. A shell script: it starts in a millisecond."""
        listing = Path(__file__).with_name("installed_distributions.py")
        text = (
            "#!/bin/sh\n"
            "# written by liqo_stack/dev/pulumi_offline.py (PulumiEnvironment.python_command)\n"
            f'if [ "$*" = "{_PIP_LIST}" ]; then exec python3 {shlex.quote(str(listing))}; fi\n'
            'exec python3 "$@"\n'
        )
        script = self.state_dir / "bin" / "python3-for-pulumi"
        if not script.exists() or script.read_text() != text:
            script.parent.mkdir(parents=True, exist_ok=True)
            staged = script.with_name(f".{script.name}.{os.getpid()}")
            staged.write_text(text)
            staged.chmod(0o755)
            staged.replace(script)  # whole, for a language host of another process starting meanwhile
        return script

    def stack_for_program(self, project: str, stack: str, program: auto.PulumiFn) -> auto.Stack:
        """A stack that runs an inline Python program through the Automation API."""
        os.environ.update({k: v for k, v in self.env_vars().items() if k != "PATH"})
        return auto.create_or_select_stack(
            stack_name=stack, project_name=project, program=program, opts=self.workspace_options()
        )

    @staticmethod
    def settings_file(stack: auto.Stack) -> Path:
        """The stack's Pulumi.<stack>.yaml, where `pulumi config set` writes its config."""
        return Path(stack.workspace.work_dir) / f"Pulumi.{stack.name.split('/')[-1]}.yaml"

    @staticmethod
    def liqo_config(stack: auto.Stack) -> dict[str, Any]:
        """The stack's `liqo:` config (keys without `liqo:`), as set_liqo_config takes it. Read from
        Pulumi.<stack>.yaml as a user reads it, not through `pulumi config` (0.2-0.4 s of CPU per
        command, in a test suite that is CPU-bound); a secret value still goes through the CLI."""
        settings = _settings(PulumiEnvironment.settings_file(stack))
        liqo = {key: value for key, value in settings.get("config", {}).items() if key.startswith("liqo:")}
        if any(not isinstance(value, str) for value in liqo.values()):  # `secure:` (or a --path object)
            cli = stack.get_all_config().items()
            return {key.split(":", 1)[1]: json.loads(value.value) for key, value in cli if key.startswith("liqo:")}
        return {key.split(":", 1)[1]: json.loads(value) for key, value in liqo.items()}

    @staticmethod
    def set_liqo_config(stack: auto.Stack, config: dict[str, Any]) -> None:
        """Make the stack's `liqo:` config exactly `config` (keys as in Pulumi.<stack>.yaml, without `liqo:`):
        each value a JSON string, as `pulumi config set liqo:<key> '<json>'` writes it, in the stack's
        settings file as a user edits it; its other keys and its secrets' salt are kept."""
        path = PulumiEnvironment.settings_file(stack)
        settings = _settings(path)
        kept = {key: value for key, value in settings.get("config", {}).items() if not key.startswith("liqo:")}
        settings["config"] = {**kept, **{f"liqo:{key}": json.dumps(value) for key, value in config.items()}}
        path.write_text(yaml.safe_dump(settings, sort_keys=True))

    def stack_for_directory(self, work_dir: Path, stack: str) -> auto.Stack:
        """A stack of the Pulumi project in `work_dir` (Pulumi.yaml + __main__.py), run by the CLI."""
        return auto.create_or_select_stack(
            stack_name=stack, work_dir=str(work_dir), opts=self.workspace_options(work_dir)
        )


@functools.cache
def _pulumi_command(root: Path) -> auto.PulumiCommand:
    """One per pinned toolchain and process: each checks the CLI's version against the SDK's minimum by
    running `pulumi version` (0.16 CPU-seconds), which the tests' 40-odd stacks each paid before."""
    return auto.PulumiCommand(root=str(root), skip_version_check=False)


# what pulumi-language-python v3.79.0 runs to find a program's Pulumi packages and their plugins
_PIP_LIST = "-m pip list -v --format json"


def _runs_python3_from_path(work_dir: Path) -> bool:
    """Whether the project in `work_dir` is a Python program run by the `python3` on PATH: with a
    `virtualenv` option the language host runs `<virtualenv>/bin/$PULUMI_PYTHON_CMD` instead."""
    project = next((work_dir / name for name in ("Pulumi.yaml", "Pulumi.yml") if (work_dir / name).exists()), None)
    if project is None:
        return False
    runtime = (yaml.safe_load(project.read_text()) or {}).get("runtime")
    if isinstance(runtime, str):
        return runtime == "python"
    if isinstance(runtime, dict):
        options = runtime.get("options") or {}
        return runtime.get("name") == "python" and not options.get("virtualenv") and not options.get("toolchain")
    return False


def _settings(path: Path) -> dict[str, Any]:
    """A stack settings file's content (empty when the stack has none yet). Not the Automation API's
    `LocalWorkspace.stack_settings`: it drops config values that are not strings, which a save would lose."""
    if not path.exists():
        return {}
    found = yaml.safe_load(path.read_text()) or {}
    if not isinstance(found, dict):
        raise ValueError(f"{path}: not a stack settings file (a mapping)")
    return found
