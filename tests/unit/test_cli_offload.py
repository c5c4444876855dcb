"""`liqo-stack offload namespace --output`: the seeds' manifest format; bad flags name themselves."""

from __future__ import annotations

import json
from typing import Any

import yaml
from click.testing import CliRunner

from liqo_stack.operating.cli import main
from tests.support.kubeconfigs import one_cluster_kubeconfig


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["offload", "namespace", *args])
    return result.exit_code, result.output


def test_default_manifest_in_the_seeds_format() -> None:
    code, out = run("foo", "--output", "yaml")
    assert code == 0
    assert yaml.safe_load(out) == {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "NamespaceOffloading",
        "metadata": {"name": "offloading", "namespace": "foo"},
        "spec": {
            "namespaceMappingStrategy": "DefaultName",
            "podOffloadingStrategy": "LocalAndRemote",
            "clusterSelector": {"nodeSelectorTerms": []},
        },
    }


def test_repeated_selectors_are_ored_and_commas_anded() -> None:
    code, out = run("foo", "-o", "json", "--selector", "region in (europe,us-west), !staging", "--selector", "!staging")
    assert code == 0
    terms = json.loads(out)["spec"]["clusterSelector"]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "region", "operator": "In", "values": ["europe", "us-west"]},
                {"key": "staging", "operator": "DoesNotExist"},
            ]
        },
        {"matchExpressions": [{"key": "staging", "operator": "DoesNotExist"}]},
    ]


def test_selected_name_and_pod_strategy() -> None:
    code, out = run(
        "foo", "-o", "yaml", "--namespace-mapping-strategy", "SelectedName", "--remote-namespace-name", "bar",
        "--pod-offloading-strategy", "Remote",
    )  # fmt: skip
    spec = yaml.safe_load(out)["spec"]
    assert code == 0 and spec["remoteNamespaceName"] == "bar" and spec["podOffloadingStrategy"] == "Remote"


def test_bad_flags_name_the_flag_and_apply_nothing() -> None:
    code, out = run("foo", "-o", "yaml", "--selector", "region in ()")
    assert code == 2 and "Invalid value for --selector" in out and "apiVersion" not in out
    code, out = run("foo", "-o", "yaml", "--namespace-mapping-strategy", "SelectedName")
    assert code == 2 and "--remote-namespace-name" in out
    code, out = run("foo", "-o", "yaml", "--namespace-mapping-strategy", "SelectedName", "--remote-namespace-name", "B")
    assert code == 2 and "Invalid value for --remote-namespace-name: 'B' must be a DNS-1123 label" in out
    code, out = run("foo", "-o", "yaml", "--pod-offloading-strategy", "Elsewhere")
    assert code == 2 and "'Elsewhere' is not one of" in out


def test_a_remote_name_with_another_strategy_is_ignored_with_a_warning() -> None:
    """docs/offloading.md: --remote-namespace-name is only used with SelectedName, and ignored otherwise."""
    result = CliRunner().invoke(main, ["offload", "namespace", "foo", "-o", "yaml", "--remote-namespace-name", "bar"])
    assert result.exit_code == 0, result.output
    assert "warning: --remote-namespace-name is ignored with --namespace-mapping-strategy DefaultName" in result.stderr
    assert "remoteNamespaceName" not in yaml.safe_load(result.stdout)["spec"]


def test_timeout_takes_durations_like_kubectl() -> None:
    # --output applies nothing: the flags are still parsed and checked
    for timeout in ("60s", "2m", "1h30m", "1.5m", "90"):
        code, out = run("foo", "-o", "yaml", "--timeout", timeout)
        assert code == 0, out
    code, out = run("foo", "-o", "yaml", "--timeout", "60x")
    assert code == 2 and "Invalid value for '--timeout': '60x' is not a duration: unknown unit 'x'" in out
    assert "e.g. 60s, 2m, 1h30m, 500ms" in out and "apiVersion" not in out
    code, out = run("foo", "-o", "yaml", "--timeout", "500ms")
    assert code == 2 and "Invalid value for '--timeout': '500ms' is shorter than the minimum, 1s" in out


def test_every_timeout_flag_takes_durations() -> None:
    for command in (["unoffload", "namespace", "foo"], ["demo"]):
        result = CliRunner().invoke(main, [*command, "--timeout", "1h30"])
        assert result.exit_code == 2, result.output
        assert "Invalid value for '--timeout': '1h30' is not a duration: 30 has no unit" in result.output
        assert "[default: 2m]" in CliRunner().invoke(main, [*command, "--help"]).output


# -- an offloaded namespace changed by a second `offload` ---------------------------------------


def test_options_not_given_keep_their_current_values() -> None:
    import click
    import pytest

    from liqo_stack.operating.cli.offload import merged_spec, spec_changes
    from runtime.api import NamespaceOffloadingSpec, parse_selector

    current = NamespaceOffloadingSpec.model_validate(
        {
            "podOffloadingStrategy": "Remote",
            "clusterSelector": parse_selector(["topology.liqo.io/region=europe"]).to_wire(),
        }
    )
    nothing: dict[str, Any] = {
        "namespace_mapping_strategy": None,
        "remote_namespace_name": None,
        "pod_offloading_strategy": None,
        "selector": None,
    }
    same, _ = merged_spec(current, **nothing)
    assert same == current and spec_changes(current, same) == []
    changed, _ = merged_spec(current, **{**nothing, "pod_offloading_strategy": "LocalAndRemote"})
    assert changed.cluster_selector == current.cluster_selector
    assert spec_changes(current, changed) == ["podOffloadingStrategy: Remote -> LocalAndRemote"]
    moved, _ = merged_spec(current, **{**nothing, "selector": parse_selector(["topology.liqo.io/region=us-west"])})
    assert spec_changes(current, moved) == [
        "clusterSelector: --selector 'topology.liqo.io/region=europe' -> --selector 'topology.liqo.io/region=us-west'"
    ]
    with pytest.raises(click.BadParameter, match="immutable"):
        merged_spec(current, **{**nothing, "namespace_mapping_strategy": "EnforceSameName"})
    fresh, _ = merged_spec(None, **nothing)
    assert fresh == NamespaceOffloadingSpec()
    assert spec_changes(None, fresh) == [
        "namespaceMappingStrategy: DefaultName",
        "podOffloadingStrategy: LocalAndRemote",
        "clusterSelector: (none: every cluster)",
    ]


def test_a_selector_matching_nothing_lists_the_virtual_nodes_and_their_labels() -> None:
    from liqo_stack.operating.cli.offload import Peer, no_cluster_selected
    from runtime.api import parse_selector
    from runtime.api.plan import virtual_node_labels

    peers = [
        Peer("foreign-1", virtual_node_labels("foreign-1", {"topology.liqo.io/region": "europe"}), "s1"),
        Peer("foreign-2", virtual_node_labels("foreign-2", {"topology.liqo.io/region": "us-west"}), "s2"),
    ]
    text = no_cluster_selected(parse_selector(["region in (europe,us-west), !staging"]), peers, given=True)
    assert "--selector 'region in (europe,us-west), !staging' matches no virtual node" in text
    assert "liqo-foreign-1 (foreign-1): liqo.io/remote-cluster-id=foreign-1" in text
    assert "topology.liqo.io/region=us-west" in text and "Nothing was changed" in text
    assert "e.g. --selector 'topology.liqo.io/region=europe'" in text


def test_without_a_terminal_nothing_is_asked_and_the_error_names_yes() -> None:
    """CliRunner's stdin is not a terminal, as in a script or CI."""
    import click
    import pytest

    from liqo_stack.operating.cli.offload import ask

    ask("Drop foreign-1?", yes=True)  # --yes: no question
    with pytest.raises(click.ClickException, match="pass --yes"):
        ask("Drop foreign-1?", yes=False)


def test_info_shows_capacities_in_kubernetes_units() -> None:
    from liqo_stack.operating.cli.info import display_quantity

    assert display_quantity("memory", "123695058124") == "115Gi"
    assert display_quantity("memory", "1610612736") == "1536Mi"
    assert display_quantity("memory", "8Gi") == "8Gi"
    assert display_quantity("cpu", "0.5") == "500m" and display_quantity("cpu", "8") == "8"
    assert display_quantity("cpu", "7800m") == "7800m" and display_quantity("pods", "110") == "110"


def test_the_readmes_selectors_select_dev_clusters() -> None:
    """Issue 35 (1): every `--selector` in the README and docs/ matches a virtual node of the dev stack."""
    import re
    from pathlib import Path

    from runtime.api import parse_selector
    from runtime.api.plan import selected_clusters, virtual_node_labels

    repo = Path(__file__).resolve().parents[2]
    stack = yaml.safe_load((repo / "Pulumi.dev.yaml").read_text())["config"]["liqo:foreignClusters"]
    labels = {c["clusterId"]: virtual_node_labels(c["clusterId"], c.get("labels") or {}) for c in stack}
    pages = [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]
    examples = [e for page in pages for e in re.findall(r"--selector '([^']+)'", page.read_text())]
    assert examples
    for example in examples:
        assert selected_clusters(parse_selector([example]), labels), f"{example!r} selects no dev cluster"


def test_a_kubeconfig_the_cli_cannot_use_is_named_with_what_to_do(tmp_path: Any) -> None:
    no_user = tmp_path / "no-user.yaml"
    no_user.write_text(yaml.safe_dump(one_cluster_kubeconfig("https://127.0.0.1:1", user=False)))
    for args, says in (
        (["--kubeconfig", str(no_user)], "no current context with a user"),
        (["--kubeconfig", str(no_user), "--context", "nope"], "Context 'nope' not found"),
        (["--kubeconfig", str(tmp_path / "missing.yaml")], "not found"),
    ):
        result = CliRunner().invoke(main, ["unoffload", "namespace", "apps", "--yes", *args])
        assert result.exit_code == 1, result.output
        assert "--kubeconfig/--context" in result.output and says in result.output, result.output
        assert "kubectl config get-contexts" in result.output
