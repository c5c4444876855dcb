"""The environment the dev clusters' processes run in (etcd, the control plane, kwok, metrics-server)."""

from __future__ import annotations

import os

# Each component's Go scheduler gets one core to run goroutines on (GOMAXPROCS) unless the caller's
# environment says otherwise: a dev cluster shares the machine's cores with other clusters, and an idle Go
# process with two spends part of its time on its scheduler's idle threads looking for work. Three idle
# clusters used 5.7-6.2 CPU-seconds a minute so, 7.6-8.1 with two (docs/performance.md).
COMPONENT_GOMAXPROCS = "1"


def component_env() -> dict[str, str]:
    """The environment of the clusters' processes: kwokctl passes its own to the components it starts."""
    return {**os.environ, "GOMAXPROCS": os.environ.get("GOMAXPROCS", COMPONENT_GOMAXPROCS)}
