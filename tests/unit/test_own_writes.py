"""Which watch events are the echo of a controller's own write, and so need no reconcile."""

from __future__ import annotations

from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap

from runtime.kube import Event, OwnWrites


def config_map(version: str) -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name="a", namespace="ns", resourceVersion=version))


def test_the_event_of_our_write_is_an_echo_once() -> None:
    own = OwnWrites()
    own.record("ns/a", config_map("7"))
    assert own.is_echo(Event("MODIFIED", "ns/a", config_map("7")))
    assert not own.is_echo(Event("MODIFIED", "ns/a", config_map("7")))  # matched once: a replay is news


def test_a_change_by_someone_else_is_not_an_echo() -> None:
    own = OwnWrites()
    own.record("ns/a", config_map("7"))
    assert not own.is_echo(Event("MODIFIED", "ns/a", config_map("8")))
    assert len(own) == 0  # the record is gone with the first event after it, whatever it was


def test_a_deletion_is_never_an_echo() -> None:
    own = OwnWrites()
    own.record("ns/a", config_map("7"))
    assert not own.is_echo(Event("DELETED", "ns/a", config_map("7")))


def test_an_echo_seen_before_the_write_returned_is_reconciled() -> None:
    own = OwnWrites()
    early = Event("ADDED", "ns/a", config_map("7"))
    assert not own.is_echo(early)  # nothing recorded yet: one reconcile too many, never one too few
    own.record("ns/a", config_map("7"))
    assert not own.is_echo(Event("MODIFIED", "ns/a", config_map("9")))


def test_other_objects_are_not_echoes() -> None:
    own = OwnWrites()
    own.record("ns/a", config_map("7"))
    assert not own.is_echo(Event("ADDED", "ns/b", config_map("7")))
    assert len(own) == 1


def test_a_write_is_in_flight_until_the_store_shows_it() -> None:
    own = OwnWrites()
    assert own.in_flight("ns/a", None) is None
    own.record("ns/a", config_map("7"), "hash-1")
    assert own.in_flight("ns/a", None) == "hash-1"  # created: the store has nothing yet
    assert own.in_flight("ns/a", "5") == "hash-1"  # updated: the store still holds the version before
    assert own.in_flight("ns/a", "7") is None  # the echo came before the write's answer: it is seen
    own.is_echo(Event("MODIFIED", "ns/a", config_map("7")))
    assert own.in_flight("ns/a", "7") is None


def test_cleared_writes_are_not_in_flight() -> None:
    own = OwnWrites()
    own.record("ns/a", config_map("7"), "hash-1")
    own.clear()
    assert own.in_flight("ns/a", None) is None


def test_an_echo_a_reconcile_waits_for_is_news() -> None:
    own = OwnWrites()
    assert not own.await_echo("ns/a"), "nothing recorded: nothing to wait for"
    own.record("ns/a", config_map("7"))
    assert own.await_echo("ns/a")
    assert not own.is_echo(Event("ADDED", "ns/a", config_map("7")))  # the reconcile that waited runs
    assert len(own) == 0


def test_a_create_answered_409_is_decided_again_at_once_only_when_the_store_shows_it() -> None:
    own = OwnWrites()
    own.record("ns/a", config_map("7"))
    assert not own.create_conflicted("ns/a", stored={}), "ours, not shown yet: its echo brings the key back"
    assert not own.is_echo(Event("ADDED", "ns/a", config_map("7")))
    assert own.create_conflicted("ns/a", stored={"ns/a"}), "nothing awaited, the store shows it: at once"
    assert not own.create_conflicted("ns/b", stored={}), "another's, not shown yet: its event comes"
