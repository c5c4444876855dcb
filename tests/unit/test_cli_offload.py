"""`liqo-stack offload namespace --output`: the seeds' manifest format; bad flags name themselves."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from liqo_stack.cli import main


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
    """Seed 003: --remote-namespace-name is only used with SelectedName, and ignored otherwise."""
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
