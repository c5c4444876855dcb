"""The destroy guards (liqo_stack/declaring/components/destroy_guard.py, its provider in
liqo_stack/resources/destroy_guard.py): what they count as another's, what
they say, and where the program declares them (Pulumi's mocks). Their refusal of a real `pulumi destroy`
and `pulumi up`: tests/e2e/test_package_three_teams.py, tests/e2e/test_virtual_node_lifecycle.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest

from liqo_stack.declaring.components.destroy_guard import TYPE
from liqo_stack.resources.destroy_guard import (
    CONSENT_VARIABLE,
    DestroyGuardProvider,
    Offloaded,
    left_to_others,
    offloaded_of,
    refusal,
)
from runtime.api import names
from tests.unit.test_components import SECRET_SIG, SECRET_SIG_KEY, RecordingMocks, stack_config

STACK = "organization/liqo-stack/unit"
OTHER = "organization/team-a/prod"


def offloading(namespace: str, clusters: list[str], **metadata: Any) -> dict[str, Any]:
    conditions = {cid: [{"type": "Ready", "status": "True"}] for cid in clusters}
    status = {"remoteNamespaceName": f"{namespace}-home", "remoteNamespacesConditions": conditions}
    return {"metadata": {"name": "offloading", "namespace": namespace, **metadata}, "status": status}


def declared_by(stack: str) -> dict[str, str]:
    return {names.DECLARED_BY_ANNOTATION: stack}


def test_each_offloading_is_its_stacks_or_its_selectors_stacks() -> None:
    selectors = [
        {"metadata": {"name": "mine", "annotations": declared_by(STACK)}},
        {"metadata": {"name": "by-hand"}},
    ]
    found = offloaded_of(
        [
            offloading("team-a", ["foreign-2", "foreign-1"], annotations=declared_by(OTHER)),
            offloading("going", ["foreign-1"], deletionTimestamp="2026-11-28T00:00:00Z"),
            offloading("by-my-selector", [], labels={names.OFFLOADING_SELECTOR_LABEL: "mine"}),
            offloading("by-a-hand-made-selector", [], labels={names.OFFLOADING_SELECTOR_LABEL: "by-hand"}),
            offloading("by-hand", ["foreign-1"]),
            {
                "metadata": {"name": "offloading", "namespace": "not-selected-there"},
                "status": {
                    "offloadingPhase": "Ready",
                    "remoteNamespaceName": "not-selected-there-home",
                    "remoteNamespacesConditions": {
                        "foreign-1": [{"type": "Ready", "status": "True"}],
                        "foreign-2": [{"type": "OffloadingRequired", "status": "False"}],
                    },
                },
            },
        ],
        selectors,
    )
    assert found == [
        Offloaded("team-a", ("foreign-1", "foreign-2"), OTHER),
        Offloaded("by-my-selector", (), STACK),
        Offloaded("by-a-hand-made-selector", ()),
        Offloaded("by-hand", ("foreign-1",)),
        Offloaded("not-selected-there", ("foreign-1",)),
    ], "one being deleted is not counted, nor a cluster the status reports as not selected"


def test_what_is_left_to_others_leaves_out_the_stacks_own() -> None:
    offloaded = [
        Offloaded("own", ("foreign-1",), STACK),
        Offloaded("team-b", ("foreign-2",), OTHER),
        Offloaded("team-a", ("foreign-1",), OTHER),
        Offloaded("by-hand", ("foreign-1",)),
        Offloaded("no-twin-yet", ()),
    ]
    everywhere = left_to_others(offloaded, stack=STACK, cluster=None)
    assert [o.namespace for o in everywhere] == ["by-hand", "no-twin-yet", "team-a", "team-b"]
    in_foreign_1 = left_to_others(offloaded, stack=STACK, cluster="foreign-1")
    assert [o.namespace for o in in_foreign_1] == ["by-hand", "team-a"]


def test_consent_names_the_namespaces_it_gives_up_or_all() -> None:
    offloaded = [Offloaded("team-a", ("foreign-1",)), Offloaded("team-b", ("foreign-1",))]
    named = left_to_others(offloaded, stack=STACK, cluster=None, consent="team-a, other")
    assert [o.namespace for o in named] == ["team-b"], "only what the consent names is given up"
    assert left_to_others(offloaded, stack=STACK, cluster=None, consent="all") == []


def test_the_refusal_names_each_namespace_its_twins_and_what_to_do() -> None:
    message = refusal([Offloaded("team-a", ("foreign-1", "foreign-2")), Offloaded("team-b", ())], "removing X")
    assert message.startswith("removing X would unoffload namespaces this stack did not declare")
    assert "team-a (twins in foreign-1, foreign-2)" in message
    assert "team-b (no twin yet)" in message
    assert "Nothing was deleted" in message
    assert f"{CONSENT_VARIABLE}=team-a,team-b" in message


def test_a_changed_guard_is_updated_never_replaced() -> None:
    """A replace would delete the old guard, which is the check itself."""
    diff = DestroyGuardProvider().diff("guard", {"stack": "a", "cluster": ""}, {"stack": "b", "cluster": ""})
    assert diff.changes is True and diff.replaces == []
    same = DestroyGuardProvider().diff("guard", {"stack": "a"}, {"stack": "a"})
    assert same.changes is False


UNREACHABLE_HOME = (
    "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
    "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9', insecure-skip-tls-verify: true}}]\n"
    "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
)
GUARD_PROPS = {"kubeconfig": UNREACHABLE_HOME, "what": "removing X", "cluster": "", "stack": STACK}


def test_an_unreachable_home_is_nothing_to_guard() -> None:
    """Nothing it protects can be deleted there either: the engine's own deletes fail, not the guard."""
    DestroyGuardProvider().delete("guard", GUARD_PROPS)


# Each child starts from the parent's cold msgspec caches (forked before any decode) and deletes its guards on
# threads that switch as often as the interpreter allows; without the lock, 1 to 5 of the 40 children crashed
# in each of 6 runs.
DELETES_TOGETHER = f"""
import os, sys, threading
sys.setswitchinterval(1e-6)
from liqo_stack.resources.destroy_guard import DestroyGuardProvider
children = []
for _ in range(40):
    pid = os.fork()
    if pid == 0:
        start, raised = threading.Barrier(8), []
        def delete() -> None:
            start.wait()
            try:
                DestroyGuardProvider().delete("guard", {GUARD_PROPS!r})
            except Exception as error:
                raised.append(error)
        threads = [threading.Thread(target=delete) for _ in range(8)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        os._exit(1 if raised else 0)
    children.append(pid)
statuses = [os.waitpid(pid, 0)[1] for pid in children]
print(sum(1 for status in statuses if status != 0), "of", len(statuses), "children failed")  # crashed or raised
"""


def test_guards_deleted_together_do_not_crash_their_provider() -> None:
    """The engine deletes a stack's guards at once, each on a thread of the dynamic provider's server."""
    ran = subprocess.run([sys.executable, "-c", DELETES_TOGETHER], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "0 of 40 children failed", ran.stderr[-2000:]


@pytest.fixture
def mocks(tmp_path: Path) -> Iterator[RecordingMocks]:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    recorder = RecordingMocks()
    pulumi.runtime.set_mocks(recorder, project="liqo-stack", stack="unit", preview=False, organization="organization")
    config = stack_config(tmp_path)
    config["liqo:namespaceSelectors"] = '[{"name": "teams", "selector": "team=shop"}]'
    pulumi.runtime.set_all_config(config)
    yield recorder
    pulumi.runtime.set_all_config({})
    asyncio.set_event_loop(None)
    loop.close()


@pulumi.runtime.test  # type: ignore[untyped-decorator]
def run_stack(guard_destroy: bool) -> None:
    from liqo_stack.declaring import program

    program.declare(program.load_config(), guard_destroy=guard_destroy)  # type: ignore[arg-type]


def test_the_stack_guards_its_home_and_each_peering_and_names_itself_on_what_it_declares(
    mocks: RecordingMocks,
) -> None:
    run_stack(True)
    guards = {r.name: r.inputs for r in mocks.resources if r.typ == TYPE}
    assert set(guards) == {"destroy-guard-home", "destroy-guard-foreign-1", "destroy-guard-foreign-2"}
    assert guards["destroy-guard-home"]["cluster"] == ""
    assert guards["destroy-guard-foreign-2"]["cluster"] == "foreign-2"
    for guard in guards.values():
        assert guard["stack"] == STACK, "its inputs do not change with the namespaces declared"
        kubeconfig = guard["kubeconfig"]
        assert kubeconfig[SECRET_SIG_KEY] == SECRET_SIG, "the home's kubeconfig is kept as a secret"
        assert "server: 'https://127.0.0.1:6443'" in kubeconfig["value"], "the home's kubeconfig, to read it"
    declared = [
        o for o in mocks.in_cluster("home") if o["kind"] in ("NamespaceOffloading", "NamespaceOffloadingSelector")
    ]
    assert {o["kind"] for o in declared} == {"NamespaceOffloading", "NamespaceOffloadingSelector"}
    assert all(o["metadata"]["annotations"][names.DECLARED_BY_ANNOTATION] == STACK for o in declared)


def test_the_package_provider_declares_no_guard(mocks: RecordingMocks) -> None:
    """A YAML or TypeScript program's language host has no Python to run a dynamic resource in."""
    run_stack(False)
    assert not [r for r in mocks.resources if r.typ == TYPE]
