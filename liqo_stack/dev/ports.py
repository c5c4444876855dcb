"""Ports of the dev clusters' components on one machine, where several environments may start at once
(a demo beside a test session, three test workers).

kwokctl picks a port by scanning down from 32767 for one free at that moment, and its components bind
it seconds later: two clusters created at once pick the same ports. So the ports are handed out here,
under one lock per machine and remembered for a while, and kwokctl is given them: cluster creations
then run side by side, and the lock is held for milliseconds instead of a whole creation.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from liqo_stack.dev import paths

# Below Linux's ephemeral range (32768-60999 by default), as kwokctl's own choice: a listener's port
# there could be taken meanwhile as the source port of an outgoing connection.
LOOPBACK = "127.0.0.1"
HIGHEST_PORT = 32767
LOWEST_PORT = 10000
# A cluster's port handed out is bound within seconds; one not bound by then was abandoned (a creation that
# failed) and may be handed out again. A listener bound later than that asks to hold its port for longer.
HANDED_OUT_FOR_SECONDS = 600.0


# flock locks belong to an open file: a second `locked()` inside the first, in the same process (`hand_out`
# called by code already under the lock, as `start_links` once did), would wait for itself and hold up every
# other process's. So the process holds the file lock once, and its threads take turns through this one.
_PROCESS_HOLD = threading.RLock()
_depth = 0


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """The machine's port lock: held from picking a port until it is taken (handing ports out, binding a
    proxy's, relaunching a component on its old one). Re-entrant within a process."""
    global _depth
    with _PROCESS_HOLD:
        if _depth:
            _depth += 1
            try:
                yield
            finally:
                _depth -= 1
            return
        lock = paths.port_lock()
        lock.parent.mkdir(parents=True, exist_ok=True)
        with lock.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            _depth = 1
            try:
                yield
            finally:
                _depth = 0
                fcntl.flock(handle, fcntl.LOCK_UN)


def hand_out(count: int, hold_for: float = HANDED_OUT_FOR_SECONDS) -> list[int]:
    """`count` ports free now, held from anyone else on this machine for `hold_for` seconds (ten minutes
    unless asked: a listener bound later asks for longer, and gives them back once done)."""
    with locked():
        now = time.time()
        held = _held(now)
        chosen: list[int] = []
        for port in range(HIGHEST_PORT, LOWEST_PORT, -1):
            if port not in held and is_unbound(port):
                chosen.append(port)
                if len(chosen) == count:
                    break
        else:
            raise OSError(f"fewer than {count} free ports between {LOWEST_PORT} and {HIGHEST_PORT}")
        held.update({port: now + hold_for for port in chosen})
        _write_held(held)
        return chosen


def hold_again(taken: Iterable[int | None], hold_for: float = HANDED_OUT_FOR_SECONDS) -> None:
    """Ports handed out long ago (their hold expired) that a component is about to leave and take
    again (killed and relaunched): held from anyone else meanwhile, as at their hand-out. While it
    listens, `is_unbound` keeps them; between its death and its new bind, only this record does."""
    with locked():
        now = time.time()
        held = _held(now)
        held.update({port: max(held.get(port, 0.0), now + hold_for) for port in taken if port is not None})
        _write_held(held)


def give_back(given: Iterable[int]) -> None:
    """Ports handed out and no longer wanted: they may be handed out again at once."""
    with locked():
        held = _held(time.time())
        for port in given:
            held.pop(port, None)
        _write_held(held)


def _record() -> Path:
    """The machine's record of the ports held: each until when (seconds since the epoch)."""
    return paths.port_lock().with_name("ports-handed-out.json")


def _held(now: float) -> dict[int, float]:
    try:
        record: dict[str, float] = json.loads(_record().read_text())
    except (OSError, ValueError):
        record = {}
    return {int(port): until for port, until in record.items() if until > now}


def _write_held(held: dict[int, float]) -> None:
    _record().write_text(json.dumps({str(port): until for port, until in held.items()}))


def is_free(port: int, host: str = LOOPBACK) -> bool:
    """Nothing listens on `port`: a bind with SO_REUSEADDR, as the servers bind (Go's listeners set it),
    fails only then, not for a closed connection's TIME_WAIT (nor for a PortHold)."""
    return _binds(port, host, reuse_address=True)


def is_unbound(port: int, host: str = LOOPBACK) -> bool:
    """Nothing holds `port` at all: a bind without SO_REUSEADDR fails for a listener, for a PortHold
    (bound, not listening) and for a closed connection's TIME_WAIT. Stricter than `is_free`, for ports
    handed out to clusters, which must not take a stopped API server's."""
    return _binds(port, host, reuse_address=False)


def _binds(port: int, host: str, *, reuse_address: bool) -> bool:
    with socket.socket() as probe:
        if reuse_address:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def any_free(host: str = LOOPBACK) -> int:
    """A port the kernel finds free now (its ephemeral range), for a listener bound right after."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


# /proc/net/tcp's socket states (include/net/tcp_states.h), by their hex code
_TCP_STATES = {"01": "ESTABLISHED", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "0A": "LISTEN"}


def holders(port: int) -> list[str]:
    """Who holds `port` on this machine now, for an error that says what to stop: each socket whose local
    port it is (`pid command (state)`; a socket of no process's, such as a TIME_WAIT, without one). Read
    from /proc, Linux only: elsewhere, none."""
    sockets: dict[str, str] = {}  # inode -> state
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()  # sl local_address rem_address st ... uid timeout inode
                if len(fields) > 9 and int(fields[1].rpartition(":")[2], 16) == port:
                    sockets[fields[9]] = _TCP_STATES.get(fields[3], fields[3])
    found: list[str] = []
    owned: set[str] = set()
    for process in Path("/proc").iterdir():
        if not process.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fds = list((process / "fd").iterdir())
            command = (process / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            for fd in fds:
                with contextlib.suppress(OSError):  # closed meanwhile: the process's other fds still count
                    target = os.readlink(fd)
                    inode = target[len("socket:[") : -1] if target.startswith("socket:[") else None
                    if inode in sockets and inode not in owned:
                        owned.add(inode)
                        found.append(f"{process.name} {command[:160]} ({sockets[inode]})")
    # inode 0: no process's (a TIME_WAIT); another: a process whose fds this one may not read
    found += [
        f"{'no process' if inode == '0' else 'a process not readable here'} ({state})"
        for inode, state in sockets.items()
        if inode not in owned
    ]
    return found


def secure_port(command: list[str]) -> int | None:
    """The `--secure-port` of a component's command line."""
    for i, arg in enumerate(command):
        if arg.startswith("--secure-port="):
            return int(arg.split("=", 1)[1])
        if arg == "--secure-port" and i + 1 < len(command):
            return int(command[i + 1])
    return None


class PortHold:
    """Keeps a stopped component's port from being taken meanwhile: a cluster created during the outage
    (another test session on the same machine) could take it and the component could not come back.
    The port is bound and not listened on, so connections to it are refused, as by a port nobody
    listens on, and `hand_out` passes it by (`is_unbound`). A listener that accepted and reset each
    connection, as before, is not the same to Kubernetes' clients: client-go retries a GET that meets
    a reset ten times, a second apart, so pulumi-kubernetes took 19 s instead of none to find the cluster
    unreachable."""

    def __init__(self, port: int | None) -> None:
        self._sock: socket.socket | None = None
        if port is None:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the killed server's TIME_WAITs
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            sock.close()  # taken already: nothing to keep
            return
        self._sock = sock

    def release(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
