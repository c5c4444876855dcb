"""The dev env's links (liqo_stack/dev/links.py): profiles and faults as Toxiproxy toxics, and the stack
config that routes the home through them. The proxy itself: tests/integration/test_links.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from liqo_stack.dev import links
from liqo_stack.operating.cli import main
from liqo_stack.operating.cli.demo import config_file_through_links, project_dir


def test_the_wan_profile_is_a_100ms_round_trip_give_or_take_20ms() -> None:
    toxics = links.profile_toxics("wan")
    assert [(t.name, t.type, t.stream) for t in toxics] == [
        ("profile-latency-upstream", "latency", "upstream"),
        ("profile-latency-downstream", "latency", "downstream"),
    ]
    assert sum(t.attributes["latency"] for t in toxics) == 100  # one way each: the round trip
    assert sum(t.attributes["jitter"] for t in toxics) == 20  # the round trip's spread, +/-
    assert toxics[0].to_json() == {
        "name": "profile-latency-upstream",
        "type": "latency",
        "stream": "upstream",
        "toxicity": 1.0,
        "attributes": {"latency": 50, "jitter": 10},
    }


def test_none_adds_nothing_lan_a_millisecond_and_an_unknown_profile_is_named() -> None:
    assert links.profile_toxics("none") == []
    assert [t.attributes for t in links.profile_toxics("lan")] == [{"latency": 1, "jitter": 0}] * 2
    with pytest.raises(links.LinkError, match="no link profile 'moon': choose one of none, lan, wan"):
        links.profile_toxics("moon")


def test_every_fault_applies_both_ways_under_its_own_name() -> None:
    cases = {
        "blackhole": (links.blackhole(), "timeout", {"timeout": 0}),
        "timeout": (links.timeout(2000), "timeout", {"timeout": 2000}),
        "reset-peer": (links.reset_peer(), "reset_peer", {"timeout": 0}),
        "bandwidth": (links.bandwidth(64), "bandwidth", {"rate": 64}),
        "latency": (links.latency(30, 5), "latency", {"latency": 30, "jitter": 5}),
    }
    for name, (toxics, type_, attributes) in cases.items():
        assert [(t.name, t.stream) for t in toxics] == [
            (f"{name}-upstream", "upstream"),
            (f"{name}-downstream", "downstream"),
        ]
        assert all(t.type == type_ and dict(t.attributes) == attributes for t in toxics), name
    # a partition is a blackhole of its own name, so that healing it leaves other blackholes alone
    assert [t.name for t in links.partition_toxics()] == [
        "partition-blackhole-upstream",
        "partition-blackhole-downstream",
    ]


def test_a_kubeconfig_server_becomes_a_proxy_upstream() -> None:
    assert links.upstream_of("https://127.0.0.1:32781") == "127.0.0.1:32781"
    assert links.upstream_of("https://api.example.com/") == "api.example.com:443"
    assert links.upstream_of("https://[::1]:6443") == "[::1]:6443"


def test_the_stack_reaches_only_the_linked_clusters_through_their_proxies() -> None:
    foreign: list[dict[str, Any]] = [{"clusterId": "foreign-1", "labels": {"a": "b"}}, {"clusterId": "foreign-2"}]
    routed = links.stack_config_with_links(foreign, {"foreign-1": "127.0.0.1:40001"})
    assert routed == [
        {"clusterId": "foreign-1", "labels": {"a": "b"}, "apiServerAddress": "127.0.0.1:40001"},
        {"clusterId": "foreign-2"},
    ]
    assert foreign[0] == {"clusterId": "foreign-1", "labels": {"a": "b"}}  # the caller's config untouched


def test_the_demo_applies_a_copy_of_the_example_config_through_the_links(tmp_path: Path) -> None:
    addresses = {"foreign-1": "127.0.0.1:40001", "foreign-2": "127.0.0.1:40002"}
    copy = config_file_through_links(tmp_path, addresses)
    example = yaml.safe_load((project_dir() / "Pulumi.dev.yaml").read_text())
    routed = yaml.safe_load(copy.read_text())
    foreign = routed["config"].pop("liqo:foreignClusters")
    assert {c["clusterId"]: c["apiServerAddress"] for c in foreign} == addresses
    assert [{k: v for k, v in c.items() if k != "apiServerAddress"} for c in foreign] == example["config"].pop(
        "liqo:foreignClusters"
    )
    assert routed == example  # the rest as it is, the encryption salt too
    assert copy.parent == tmp_path


def test_the_link_options_parse_and_a_profile_must_be_known() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["dev", "up", "--link-profile", "moon"])
    assert result.exit_code == 2 and "'moon' is not one of 'none', 'lan', 'wan'" in result.output
    for command in (["dev", "up", "--help"], ["demo", "--help"]):
        shown = runner.invoke(main, command, terminal_width=400).output
        assert "--links" in shown and "--link-profile [none|lan|wan]" in shown, command
