"""A process's open TCP connections, read from /proc: what benches and tests count per API server."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from liqo_stack.dev.clusters import DevEnvironment


def established_by_port(pid: int) -> Counter[int]:
    """The process's ESTABLISHED TCP connections, by remote port."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found: Counter[int] = Counter()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
                found[int(fields[2].rsplit(":", 1)[1], 16)] += 1
    return found


def api_ports(env: DevEnvironment, cluster_ids: list[str]) -> dict[int, str]:
    """Each cluster's API server port -> its cluster id."""
    ports = {}
    for cluster_id in cluster_ids:
        config = yaml.safe_load(env.kubeconfig(cluster_id).read_text())
        ports[urlsplit(config["clusters"][0]["cluster"]["server"]).port or 443] = cluster_id
    return ports
