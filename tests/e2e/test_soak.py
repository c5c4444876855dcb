"""One round of the soak's faults (tests/bench/soak.py) on the test clusters: churn while a runtime
process is killed, a foreign control plane stops and the home API server restarts; nothing is lost.

The 30-minute soak, with the memory verdict after a 5-minute warm-up, is the bench:
`.venv/bin/python -m tests.bench.soak`. Here memory is reported, not judged: such a run is too
short for a process's heap to settle. The run ends once each fault has been made and recovered from,
not on the clock: about a minute.
"""

from __future__ import annotations

import os

import pytest
from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from runtime.api import names
from tests.bench.soak import FOREIGN_OUTAGE, HOME_RESTART, KILL, Soak
from tests.support.kube import VIRTUAL_NODES, get_or_none, node_ready, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

# a cap: the soak ends after its round of faults (each kind once), 3-8 s apart
SOAK_SECONDS_AT_MOST = 300.0


def nothing_terminating(clients: list[Client]) -> bool:
    return not any(ns.metadata.deletionTimestamp for client in clients for ns in client.list(Namespace) if ns.metadata)


def test_churn_through_a_round_of_faults_loses_nothing(
    offloaded: str, runtime: ExternalRuntime, dev_env: DevEnvironment, home: Client, foreign: dict[str, Client]
) -> None:
    # the namespaces earlier modules left are deleted without a wait: gone before the soak judges any
    wait_until(lambda: nothing_terminating([home, *foreign.values()]), 120, "no namespace Terminating")
    seed = int(os.environ.get("LIQO_STACK_SOAK_SEED", "1"))
    # the outage outlasts the health checks' failure threshold (2 x 2 s, `installed`): the nodes go NotReady
    soak = Soak(
        dev_env, runtime, offloaded=offloaded, seed=seed, warmup=None, fault_gap=(3.0, 8.0), fault_rounds=1, outage=15.0
    )
    clean = soak.run(SOAK_SECONDS_AT_MOST)
    for kind in (KILL, FOREIGN_OUTAGE, HOME_RESTART):
        assert any(kind in line for _, line in soak.journal.faults), (kind, soak.journal.faults)
    assert soak.journal.checked["remote pods"] > 0 and soak.journal.checked["reflected objects"] > 0
    assert clean, f"invariants breached (seed {seed}): {soak.journal.breaches}"


def test_the_soak_sees_a_reflected_object_left_without_its_home_one(
    offloaded: str, runtime: ExternalRuntime, dev_env: DevEnvironment, home: Client, foreign: dict[str, Client]
) -> None:
    """The invariants are not vacuous: a ConfigMap in a twin, labelled as reflected from home, with
    no home ConfigMap of its name, is an orphan. foreign-1's virtual kubelet is stopped meanwhile: its
    reflector would delete such a ConfigMap at once."""
    twin = f"{offloaded}-home"
    labels = {names.ORIGIN_LABEL: "home", names.DESTINATION_LABEL: "foreign-1"}
    planted = ConfigMap(metadata=ObjectMeta(name="left-behind", namespace=twin, labels=labels), data={"a": "b"})
    runtime.stop("kubelet-foreign-1")
    try:
        foreign["foreign-1"].create(planted)
        soak = Soak(dev_env, runtime, offloaded=offloaded, warmup=None)
        assert f"orphan ConfigMap foreign-1/{twin}/left-behind" in soak.violations()
    finally:
        runtime.start("kubelet-foreign-1")
    # the restarted reflector removes the orphan: the soak's settle relies on the runtime converging
    wait_until(lambda: get_or_none(foreign["foreign-1"], ConfigMap, "left-behind", twin) is None, 60, "orphan gone")
    wait_until(lambda: node_ready(home, VIRTUAL_NODES["foreign-1"]), 60, "foreign-1's virtual node Ready")
