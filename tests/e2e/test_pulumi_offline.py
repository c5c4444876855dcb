"""The Pulumi engine runs offline against the dev clusters: up, up again with no change, destroy.

Both ways a Pulumi program runs: inline through the Automation API, and as a project directory
run by the `pulumi` CLI through the Python language host (what `pulumi up` in a checkout does).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import ConfigMap
from pulumi import automation as auto

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.pulumi_offline import PulumiEnvironment

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

PROGRAMS = Path(__file__).parent / "programs"


def assert_gone(client: Client, name: str) -> None:
    with pytest.raises(ApiError) as gone:
        client.get(ConfigMap, name, namespace="default")
    assert gone.value.status.code == 404


def round_trip(stack: auto.Stack, client: Client, name: str) -> None:
    first = stack.up(on_output=print)
    # the plugins come from PULUMI_HOME and the language host from beside the CLI: nothing "from $PATH"
    assert "warning" not in (first.stdout + first.stderr).lower(), first.stdout + first.stderr
    assert first.summary.resource_changes == {"create": 3}  # the stack, the provider and the ConfigMap
    live = client.get(ConfigMap, name, namespace="default")
    assert live.data == {"hello": "world"}
    assert live.metadata is not None
    assert first.outputs["uid"].value == live.metadata.uid

    second = stack.up(on_output=print)
    assert second.summary.resource_changes == {"same": 3}
    preview = stack.preview(on_output=print)
    assert preview.change_summary == {auto.OpType.SAME: 3}

    stack.destroy(on_output=print)
    assert_gone(client, name)
    stack.workspace.remove_stack(stack.name)


def test_inline_program_round_trip(
    dev_env: DevEnvironment, foreign: dict[str, Client], pulumi_env: PulumiEnvironment, unique_name: str
) -> None:
    kubeconfig = dev_env.kubeconfig("foreign-1").read_text()

    def program() -> None:
        import pulumi
        import pulumi_kubernetes as k8s

        cluster = k8s.Provider("foreign-1", kubeconfig=pulumi.Output.secret(kubeconfig), cluster_identifier="foreign-1")
        greeting = k8s.core.v1.ConfigMap(
            "greeting",
            metadata={"name": unique_name, "namespace": "default"},
            data={"hello": "world"},
            opts=pulumi.ResourceOptions(provider=cluster),
        )
        pulumi.export("uid", greeting.metadata.uid)

    stack = pulumi_env.stack_for_program("inline-round-trip", "dev", program)
    round_trip(stack, foreign["foreign-1"], unique_name)


def test_cli_program_round_trip_through_the_language_host(
    dev_env: DevEnvironment, foreign: dict[str, Client], pulumi_env: PulumiEnvironment, unique_name: str
) -> None:
    stack = pulumi_env.stack_for_directory(PROGRAMS / "configmap", "dev")
    stack.set_config("clusterId", auto.ConfigValue("foreign-2"))
    stack.set_config("kubeconfigPath", auto.ConfigValue(str(dev_env.kubeconfig("foreign-2"))))
    stack.set_config("name", auto.ConfigValue(unique_name))
    round_trip(stack, foreign["foreign-2"], unique_name)
    # pulumi's automatic debug logs stay off in the dev environment: none was written by these commands
    assert (pulumi_env.pulumi_home / "logs").is_file()


def test_a_changed_value_is_previewed_then_updated_in_place(
    dev_env: DevEnvironment, foreign: dict[str, Client], pulumi_env: PulumiEnvironment, unique_name: str
) -> None:
    stack = pulumi_env.stack_for_directory(PROGRAMS / "configmap", "change")
    stack.set_config("clusterId", auto.ConfigValue("foreign-1"))
    stack.set_config("kubeconfigPath", auto.ConfigValue(str(dev_env.kubeconfig("foreign-1"))))
    stack.set_config("name", auto.ConfigValue(unique_name))
    client = foreign["foreign-1"]
    stack.up(on_output=print)
    uid = client.get(ConfigMap, unique_name, namespace="default").metadata.uid  # type: ignore[union-attr]

    stack.set_config("greeting", auto.ConfigValue("again"))
    preview = stack.preview(diff=True, on_output=print)
    assert preview.change_summary == {auto.OpType.SAME: 2, auto.OpType.UPDATE: 1}
    stack.up(on_output=print)
    live = client.get(ConfigMap, unique_name, namespace="default")
    assert live.data == {"hello": "again"}
    assert live.metadata is not None and live.metadata.uid == uid, "updated in place, not replaced"

    stack.destroy(on_output=print)
    assert_gone(client, unique_name)
    stack.workspace.remove_stack("change")


def test_the_liqo_config_written_to_the_settings_file_is_what_the_cli_reads(
    pulumi_env: PulumiEnvironment, project_dir: Path
) -> None:
    """set_liqo_config and liqo_config edit Pulumi.<stack>.yaml directly (no CLI process): the CLI reads the
    same config, and what the file held besides (another key, a secret, the secrets' salt) stays."""
    stack = pulumi_env.stack_for_directory(project_dir, "settings-file")
    try:
        stack.set_config("team:owner", auto.ConfigValue("infra"))
        stack.set_config("team:token", auto.ConfigValue("s3cret", secret=True))
        stack.set_config("liqo:gone", auto.ConfigValue('"soon"'))
        wanted = {"home": {"clusterId": "home", "labels": {"a": "b"}}, "foreignClusters": [{"clusterId": "f-1"}]}
        PulumiEnvironment.set_liqo_config(stack, wanted)

        read_by_cli = {key: json.loads(v.value) for key, v in stack.get_all_config().items() if key.startswith("liqo:")}
        assert read_by_cli == {f"liqo:{key}": value for key, value in wanted.items()}
        assert PulumiEnvironment.liqo_config(stack) == wanted
        others = stack.get_all_config()
        assert (others["team:owner"].value, others["team:token"].value) == ("infra", "s3cret")  # salt kept

        # a secret liqo value (the file holds its ciphertext) is read through the CLI
        stack.set_config("liqo:runtime", auto.ConfigValue(json.dumps({"mode": "external"}), secret=True))
        assert PulumiEnvironment.liqo_config(stack) == {**wanted, "runtime": {"mode": "external"}}
    finally:
        stack.workspace.remove_stack(stack.name)
        PulumiEnvironment.settings_file(stack).unlink(missing_ok=True)
