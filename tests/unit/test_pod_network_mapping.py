"""Which foreign pod ranges are remapped at home, and to what (docs/reflection.md), from config to VirtualNode."""

from __future__ import annotations

from typing import Any

import pytest

from liqo_stack.declaring.config import ConfigError, parse
from runtime.api.network import (
    ForeignPodNetwork,
    PodNetworkError,
    ranges_seen_by,
    remapped_pod_cidrs,
    translate_address,
)
from runtime.forging.kinds import ENDPOINT_SLICES
from runtime.forging.objects import ReflectionSettings, settings_from
from runtime.forging.pods import pod_cidr_mapping


def foreign(cluster_id: str, cidr: str | None, remapped: str | None = None) -> ForeignPodNetwork:
    return ForeignPodNetwork(cluster_id, cidr, remapped, f"foreignClusters[{cluster_id}]")


def test_distinct_ranges_are_shown_as_they_are() -> None:
    plan = remapped_pod_cidrs("10.100.0.0/16", [foreign("a", "10.101.0.0/16"), foreign("b", "10.102.0.0/16")])
    assert plan == {"a": None, "b": None}


def test_overlapping_ranges_get_distinct_blocks_from_the_pool() -> None:
    clusters = [foreign("a", "10.0.0.0/16"), foreign("b", "10.0.0.0/16"), foreign("c", "10.0.0.0/16")]
    # a overlaps home; b and c overlap home and each other: all three get blocks of their own size
    assert remapped_pod_cidrs("10.0.0.0/16", clusters, "100.64.0.0/10") == {
        "a": "100.64.0.0/16",
        "b": "100.65.0.0/16",
        "c": "100.66.0.0/16",
    }
    # without a home range the first keeps its own, the next ones move
    assert remapped_pod_cidrs(None, clusters[:2], "100.64.0.0/10") == {"a": None, "b": "100.64.0.0/16"}


def test_allocation_avoids_declared_ranges_and_declared_remappings() -> None:
    clusters = [
        foreign("a", "100.64.0.0/16"),  # a real cluster living in the pool's first block
        foreign("b", "10.0.0.0/16", "100.65.0.0/16"),
        foreign("c", "10.0.0.0/16"),
    ]
    assert remapped_pod_cidrs("10.0.0.0/16", clusters, "100.64.0.0/10") == {
        "a": None,
        "b": "100.65.0.0/16",
        "c": "100.66.0.0/16",
    }


def test_an_undeclared_range_is_never_remapped() -> None:
    assert remapped_pod_cidrs("10.0.0.0/16", [foreign("a", None)]) == {"a": None}


@pytest.mark.parametrize(
    ("clusters", "pool", "message"),
    [
        # b overlaps home and takes the pool's only /16; a third one finds none
        ([foreign("b", "10.100.0.0/16"), foreign("a", "10.100.0.0/16")], "100.64.0.0/16", "has no free /16"),
        ([foreign("a", "10.0.0.0/16", "10.100.0.0/16")], "100.64.0.0/10", "overlaps 10.100.0.0/16"),
        ([foreign("a", "10.0.0.0/16", "100.64.0.0/24")], "100.64.0.0/10", "prefix length of podCIDR"),
        ([foreign("a", None, "100.64.0.0/16")], "100.64.0.0/10", "set podCIDR too"),
    ],
)
def test_plans_that_cannot_work_name_the_cluster(clusters: list[ForeignPodNetwork], pool: str, message: str) -> None:
    with pytest.raises(PodNetworkError, match=message) as err:
        remapped_pod_cidrs("10.100.0.0/16", clusters, pool)
    assert str(err.value).startswith("foreignClusters[a]")


def config(**extra: object) -> dict[str, object]:
    return {
        "home": {"clusterId": "home", "kubeconfig": "k", "podCIDR": "10.0.0.0/16"},
        "foreignClusters": [
            {"clusterId": "foreign-1", "kubeconfig": "k", "podCIDR": "10.0.0.0/16"},
            {"clusterId": "foreign-2", "kubeconfig": "k", "podCIDR": "10.1.0.0/16"},
        ],
        **extra,
    }


def test_stack_config_allocates_from_its_pool() -> None:
    plan = parse(config(network={"remappingPool": "172.20.0.0/14"})).remapped_pod_cidrs()
    assert plan == {"foreign-1": "172.20.0.0/16", "foreign-2": None}


def test_bad_ranges_in_the_stack_config_name_their_path() -> None:
    raw = config()
    raw["foreignClusters"][1]["remappedPodCIDR"] = "10.0.0.0/16"  # type: ignore[index]
    with pytest.raises(ConfigError) as err:
        parse(raw)
    assert "liqo:foreignClusters[1].remappedPodCIDR: 10.0.0.0/16 overlaps 10.0.0.0/16" in str(err.value)
    raw = config()
    raw["home"]["podCIDR"] = "10.0.0.1/16"  # type: ignore[index]
    with pytest.raises(ConfigError, match=r"liqo:home.podCIDR: '10.0.0.1/16' is not a CIDR network address"):
        parse(raw)


def test_the_virtual_node_carries_the_remapping_the_virtual_kubelet_uses() -> None:
    from liqo_stack.declaring.plan import virtual_node_spec, virtual_nodes_plan

    stack = parse(config())
    spec = virtual_node_spec(stack, stack.foreign_clusters[0])
    assert (spec.pod_cidr, spec.remapped_pod_cidr) == ("10.0.0.0/16", "100.64.0.0/16")
    mapping = pod_cidr_mapping(spec)
    assert mapping is not None and mapping.translate("10.0.3.7") == "100.64.3.7"
    assert pod_cidr_mapping(virtual_node_spec(stack, stack.foreign_clusters[1])) is None
    plan = virtual_nodes_plan(stack)
    assert plan["foreign-1"]["podNetwork"] == {
        "podCIDR": "10.0.0.0/16",
        "seenAtHomeAs": "100.64.0.0/16",
        "remapped": True,
        "reachesOthersIn": {"home": "100.64.0.0/16", "foreign-2": "10.1.0.0/16"},
    }
    assert plan["foreign-2"]["podNetwork"]["remapped"] is False


# -- endpoints remapped for the destination (docs/reflection.md) -----------------------------------------------
HOME = ForeignPodNetwork("home", "10.100.0.0/16", None, "home")
SAME_RANGE = [foreign("foreign-1", "10.101.0.0/16"), foreign("foreign-2", "10.101.0.0/16")]  # the dev clusters'


def test_each_foreign_cluster_reaches_the_other_outside_its_own_overlapping_range() -> None:
    assert remapped_pod_cidrs(HOME.pod_cidr, SAME_RANGE) == {"foreign-1": None, "foreign-2": "100.64.0.0/16"}
    # foreign-1 sees foreign-2 where home does; foreign-2 cannot reach foreign-1 in its own range
    assert ranges_seen_by(SAME_RANGE[0], HOME, SAME_RANGE) == {
        "home": ("10.100.0.0/16", "10.100.0.0/16"),
        "foreign-2": ("100.64.0.0/16", "100.64.0.0/16"),
    }
    assert ranges_seen_by(SAME_RANGE[1], HOME, SAME_RANGE) == {
        "home": ("10.100.0.0/16", "10.100.0.0/16"),
        "foreign-1": ("10.101.0.0/16", "100.64.0.0/16"),
    }
    undeclared = [foreign("foreign-1", "10.101.0.0/16"), foreign("foreign-2", None)]
    assert ranges_seen_by(undeclared[0], HOME, undeclared) == {"home": ("10.100.0.0/16", "10.100.0.0/16")}


def test_translate_address_moves_only_addresses_of_a_remapped_range() -> None:
    ranges = [("10.101.0.0/16", "100.64.0.0/16")]
    assert translate_address("10.101.3.9", ranges) == "100.64.3.9"
    assert translate_address("10.100.0.5", ranges) == "10.100.0.5"
    assert translate_address("fd00::1", ranges) == "fd00::1"
    assert translate_address("web.example", ranges) == "web.example"


def slice_content(destination: str, ranges: dict[str, tuple[str, str]]) -> list[str]:
    """The addresses of a home slice's copy for `destination`, with a replica in every cluster."""
    home_slice: dict[str, Any] = {
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.100.0.5"], "nodeName": "home-worker-0"},
            {"addresses": ["10.101.0.9"], "nodeName": "liqo-foreign-1"},  # foreign-1's, as home shows it
            {"addresses": ["100.64.0.7"], "nodeName": "liqo-foreign-2"},  # foreign-2's, remapped at home
        ],
    }
    settings = ReflectionSettings(address_ranges=tuple(pair for pair in ranges.values() if pair[0] != pair[1]))
    content = ENDPOINT_SLICES.content_for(home_slice, destination, settings)
    assert home_slice["endpoints"][1]["addresses"] == ["10.101.0.9"], "the home slice is never changed"
    return [a for endpoint in content["endpoints"] for a in endpoint["addresses"]]


def test_a_reflected_slice_gives_each_destination_the_addresses_it_reaches() -> None:
    assert slice_content("foreign-1", ranges_seen_by(SAME_RANGE[0], HOME, SAME_RANGE)) == ["10.100.0.5", "100.64.0.7"]
    # foreign-1's replica at 10.101.0.9 would be one of foreign-2's own pods' addresses
    assert slice_content("foreign-2", ranges_seen_by(SAME_RANGE[1], HOME, SAME_RANGE)) == ["10.100.0.5", "100.64.0.9"]


def test_the_virtual_node_carries_where_its_cluster_reaches_the_others() -> None:
    from liqo_stack.declaring.plan import virtual_node_spec

    stack = parse(config())  # foreign-1 has home's range: each sees the other's pods in 100.64.0.0/16
    first, second = (virtual_node_spec(stack, f) for f in stack.foreign_clusters)
    assert [r.to_wire() for r in first.endpoint_remappings] == [
        {"seenAtHome": "10.0.0.0/16", "seenThere": "100.64.0.0/16"}
    ]
    assert second.endpoint_remappings == [], "foreign-2 sees home and foreign-1 where home does"
    assert settings_from(first, "endpointslice").address_ranges == (("10.0.0.0/16", "100.64.0.0/16"),)


def test_the_skip_lists_of_the_stack_config_reach_every_virtual_node() -> None:
    """liqo:reflection.skipLabels / skipAnnotations become each VirtualNode's offloadingPatch (docs/reflection.md's
    labelsNotReflected / annotationsNotReflected); none set: the patch is empty."""
    from liqo_stack.declaring.plan import virtual_node_spec

    skips = {"skipLabels": ["cloud.example/zone"], "skipAnnotations": ["cloud.example/id", "note"]}
    stack = parse(config(reflection=skips))
    for foreign_cluster in stack.foreign_clusters:
        patch = virtual_node_spec(stack, foreign_cluster).to_wire()["offloadingPatch"]
        assert patch == {
            "labelsNotReflected": ["cloud.example/zone"],
            "annotationsNotReflected": ["cloud.example/id", "note"],
        }
    plain = parse(config())
    assert virtual_node_spec(plain, plain.foreign_clusters[0]).to_wire()["offloadingPatch"] == {}
