"""Links between the dev clusters: a fault-injecting proxy on each link from the home's runtime to a
foreign API server.

`liqo-stack dev up --links` starts a Toxiproxy server (`toxiproxy-server`, an optional pin of
tools/toolchain.toml) listening on 127.0.0.1 only, and gives every foreign cluster a proxy named after
its cluster id, from a port of its own on 127.0.0.1 to that cluster's API server. The home's runtime
goes through a proxy when the stack says so: `apiServerAddress` of the foreign cluster in the stack
config is where the home identity's kubeconfig (the credentials Secret the virtual kubelet, the
controller-manager and `liqo-stack offload` use) points, and `liqo-stack demo` sets it to the proxy
while links are on (`stack_config_with_links`). TLS passes through the proxy untouched: the API
server's certificate names 127.0.0.1, and a certificate never names a port.

Faults are Toxiproxy "toxics", each on one direction of a proxy: `upstream` (home -> foreign) or
`downstream` (foreign -> home). A profile (`PROFILES`) sets the link's standing conditions (latency
and jitter); `partition`/`heal` and the toxic helpers (`latency`, `bandwidth`, `blackhole`, `timeout`,
`reset_peer`) add faults on top, by name, so that each can be removed alone.

Standard library only (urllib): the API is a handful of JSON calls.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from liqo_stack.dev import ports

SERVER_BINARY = "toxiproxy-server"
HOST = "127.0.0.1"  # the API and every proxy: nothing of the dev env listens beyond loopback
START_TIMEOUT = 10.0  # seconds for a new server to answer /version
PROFILE_PREFIX = "profile-"  # toxics a profile set; `set_profile` replaces exactly these
PARTITION_PREFIX = "partition-"

Stream = Literal["upstream", "downstream"]
STREAMS: tuple[Stream, Stream] = ("upstream", "downstream")
PartitionMode = Literal["blackhole", "refuse"]


class LinkError(RuntimeError):
    """A link could not be set up or changed; the message says what to do."""


class ToxiproxyError(LinkError):
    """Toxiproxy's API answered with an error (`status`: its HTTP status, 0 when it did not answer)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


# -- toxics and profiles (pure) -------------------------------------------------------------------


@dataclass(frozen=True)
class Toxic:
    """One toxic on one direction of a proxy, as Toxiproxy's API takes it (attributes in ms or KB/s)."""

    name: str
    type: str
    stream: Stream
    attributes: Mapping[str, int] = field(default_factory=dict)
    toxicity: float = 1.0  # the share of connections it applies to

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": dict(self.attributes),
        }


def both_ways(name: str, type_: str, **attributes: int) -> list[Toxic]:
    """The same toxic on each direction, named `<name>-upstream` and `<name>-downstream`."""
    return [Toxic(f"{name}-{stream}", type_, stream, attributes) for stream in STREAMS]


def latency(one_way_ms: int, jitter_ms: int = 0, name: str = "latency") -> list[Toxic]:
    """Each direction delayed by `one_way_ms` +/- `jitter_ms` (uniform, per chunk of data; a
    direction's data keeps its order): the round trip takes 2 x `one_way_ms` +/- 2 x `jitter_ms`."""
    return both_ways(name, "latency", latency=one_way_ms, jitter=jitter_ms)


def bandwidth(kb_per_second: int, name: str = "bandwidth") -> list[Toxic]:
    """Each direction limited to `kb_per_second` KB/s."""
    return both_ways(name, "bandwidth", rate=kb_per_second)


def blackhole(name: str = "blackhole") -> list[Toxic]:
    """Nothing passes either way, and nothing is closed (Toxiproxy's `timeout` toxic with timeout 0):
    bytes sent meanwhile are dropped, not held back. Removing it closes (FIN) every connection it
    held, since their streams have lost bytes."""
    return both_ways(name, "timeout", timeout=0)


def timeout(after_ms: int, name: str = "timeout") -> list[Toxic]:
    """Nothing passes, and each connection is closed `after_ms` after its first byte met the toxic."""
    return both_ways(name, "timeout", timeout=after_ms)


def reset_peer(after_ms: int = 0, name: str = "reset-peer") -> list[Toxic]:
    """Each connection is reset (TCP RST) `after_ms` after it next carries data, new ones too, until removed."""
    return both_ways(name, "reset_peer", timeout=after_ms)


@dataclass(frozen=True)
class LinkProfile:
    """A link's standing conditions: latency each way and its jitter (both directions alike)."""

    name: str
    one_way_latency_ms: int
    jitter_ms: int
    description: str

    def toxics(self) -> list[Toxic]:
        if not self.one_way_latency_ms and not self.jitter_ms:
            return []
        return latency(self.one_way_latency_ms, self.jitter_ms, name=f"{PROFILE_PREFIX}latency")


# wan: the "100 ms RTT, +/-20 ms jitter" taken as the round trip's spread: +/-10 ms each way
PROFILES: dict[str, LinkProfile] = {
    profile.name: profile
    for profile in (
        LinkProfile("none", 0, 0, "the proxy alone: loopback's own speed, faults only when added"),
        LinkProfile("lan", 1, 0, "a data centre: 1 ms each way (2 ms round trip)"),
        LinkProfile("wan", 50, 10, "two regions: 50 ms +/- 10 ms each way (100 ms +/- 20 ms round trip)"),
    )
}


def profile_toxics(profile: str) -> list[Toxic]:
    """The toxics a profile puts on each proxy, named `profile-...`."""
    try:
        return PROFILES[profile].toxics()
    except KeyError:
        raise LinkError(f"no link profile {profile!r}: choose one of {', '.join(PROFILES)}") from None


def partition_toxics() -> list[Toxic]:
    return blackhole(name=f"{PARTITION_PREFIX}blackhole")


def stack_config_with_links(
    foreign_clusters: list[dict[str, Any]], addresses: Mapping[str, str]
) -> list[dict[str, Any]]:
    """`liqo:foreignClusters` with `apiServerAddress` set to the link of each cluster that has one:
    the home identity's kubeconfig (the credentials Secret) then names the proxy."""
    return [
        {**entry, "apiServerAddress": addresses[entry["clusterId"]]} if entry.get("clusterId") in addresses else entry
        for entry in foreign_clusters
    ]


def upstream_of(server: str) -> str:
    """`https://127.0.0.1:32781` (a kubeconfig's server) -> `127.0.0.1:32781` (a proxy's upstream)."""
    host_port = server.split("://", 1)[-1].split("/", 1)[0]
    if ":" not in host_port.rsplit("]", 1)[-1]:
        host_port += ":443"
    return host_port


# -- Toxiproxy's HTTP API -------------------------------------------------------------------------


class ToxiproxyClient:
    """Toxiproxy's HTTP API (JSON): proxies, their toxics, and reset."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace").strip()
            with contextlib.suppress(ValueError, AttributeError):
                detail = json.loads(detail).get("error", detail)
            raise ToxiproxyError(f"toxiproxy {method} {path}: {err.code} {detail}", err.code) from None
        except OSError as err:
            raise ToxiproxyError(f"toxiproxy at {self.url} does not answer ({method} {path}): {err}") from None
        return json.loads(text) if text.strip() else None

    def version(self) -> str:
        return str(self._call("GET", "/version")["version"])

    def proxies(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = self._call("GET", "/proxies")
        return found

    def create_proxy(self, name: str, listen: str, upstream: str) -> dict[str, Any]:
        created: dict[str, Any] = self._call(
            "POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream, "enabled": True}
        )
        return created

    def update_proxy(self, name: str, **fields: Any) -> dict[str, Any]:
        """Change `listen`, `upstream` or `enabled`; a changed address restarts the proxy's listener."""
        updated: dict[str, Any] = self._call("PATCH", f"/proxies/{name}", fields)
        return updated

    def delete_proxy(self, name: str) -> None:
        self._call("DELETE", f"/proxies/{name}")

    def toxics(self, proxy: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._call("GET", f"/proxies/{proxy}/toxics")
        return found

    def add_toxic(self, proxy: str, toxic: Toxic) -> None:
        self._call("POST", f"/proxies/{proxy}/toxics", toxic.to_json())

    def remove_toxic(self, proxy: str, name: str) -> None:
        """Remove one toxic; one already gone is no error."""
        try:
            self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")
        except ToxiproxyError as err:
            if err.status != 404:
                raise

    def reset(self) -> None:
        """Every proxy enabled again, every toxic removed."""
        self._call("POST", "/reset")


# -- the server process ---------------------------------------------------------------------------


class ToxiproxyServer:
    """One `toxiproxy-server` process on 127.0.0.1, its pid and log in `folder`."""

    def __init__(self, binary: Path, folder: Path) -> None:
        self.binary = binary
        self.folder = folder

    @property
    def pid_file(self) -> Path:
        return self.folder / "toxiproxy.pid"

    @property
    def log(self) -> Path:
        return self.folder / "toxiproxy.log"

    def pid(self) -> int | None:
        """The process, if it runs (not a pid reused by another program since, nor a zombie)."""
        try:
            pid = int(self.pid_file.read_text().strip())
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # our own child that ended: reap it
            alive = str(self.binary).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        return pid if alive else None

    def port(self) -> int | None:
        """The API port of the running process (from its command line)."""
        pid = self.pid()
        if pid is None:
            return None
        with contextlib.suppress(OSError, ValueError, IndexError):
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
            return int(args[args.index("-port") + 1])
        return None

    def client(self) -> ToxiproxyClient:
        port = self.port()
        if port is None:
            raise LinkError(f"no toxiproxy server runs for {self.folder}: start the links first")
        return ToxiproxyClient(f"http://{HOST}:{port}")

    def start(self, port: int | None = None) -> ToxiproxyClient:
        """Start the server unless it runs (on `port` if it is free, else on a free one); return a
        client once it answers."""
        running = self.port()
        if running is not None:
            return ToxiproxyClient(f"http://{HOST}:{running}")
        if not self.binary.exists():
            raise LinkError(
                f"{self.binary} is not built: `python3 tools/build.py toxiproxy` builds it (an optional pin; "
                "scripts/test.sh builds the optional pins)"
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        port = port if port and ports.is_free(port, HOST) else ports.any_free(HOST)
        with self.log.open("ab") as log:
            process = subprocess.Popen(
                [str(self.binary), "-host", HOST, "-port", str(port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # outlives the CLI that started it, like the clusters
                env={**os.environ, "LOG_LEVEL": "info"},  # not a line per API call
            )
        self.pid_file.write_text(str(process.pid))
        client = ToxiproxyClient(f"http://{HOST}:{port}")
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                client.version()
                return client
            except ToxiproxyError:
                if process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise LinkError(
                        f"toxiproxy-server did not start: {_last_lines(self.log)} (log: {self.log})"
                    ) from None
                time.sleep(0.05)

    def stop(self, timeout: float = 10) -> None:
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while self.pid() is not None and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.pid() is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)  # our own child, ended: reaped, so no zombie is left in the process table
        self.pid_file.unlink(missing_ok=True)


def _last_lines(log: Path, count: int = 3) -> str:
    with contextlib.suppress(OSError):
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-count:]) or "(empty log)"
    return "(no log)"


# -- the dev env's links --------------------------------------------------------------------------


class LinkNetwork:
    """The links of one dev environment: the server, one proxy per foreign cluster (named after its
    cluster id) and the profile, recorded in `<folder>/links.json` so that each proxy keeps its
    address across `dev up` runs and server restarts (the credentials Secret names it)."""

    def __init__(self, folder: Path, bin_dir: Path) -> None:
        self.folder = folder
        self.server = ToxiproxyServer(bin_dir / SERVER_BINARY, folder)

    # -- recorded state --
    @property
    def state_file(self) -> Path:
        return self.folder / "links.json"

    def _state(self) -> dict[str, Any]:
        try:
            state: dict[str, Any] = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {"profile": "none", "proxies": {}}
        return state

    def _save(self, state: Mapping[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        written = self.state_file.with_suffix(".tmp")
        written.write_text(json.dumps(state, indent=2) + "\n")
        written.replace(self.state_file)

    def running(self) -> bool:
        return self.server.pid() is not None

    @property
    def url(self) -> str:
        """Toxiproxy's API (TOXIPROXY_URL for `toxiproxy-cli`)."""
        return self.server.client().url

    @property
    def profile(self) -> str:
        return str(self._state()["profile"])

    def addresses(self) -> dict[str, str]:
        """Where the home reaches each foreign API server through its link: cluster id -> `127.0.0.1:port`."""
        return {cluster_id: proxy["listen"] for cluster_id, proxy in self._state()["proxies"].items()}

    def address(self, cluster_id: str) -> str:
        try:
            return self.addresses()[cluster_id]
        except KeyError:
            raise LinkError(
                f"no link to {cluster_id}: links lead to {', '.join(self.addresses()) or 'nothing'}"
            ) from None

    def client(self) -> ToxiproxyClient:
        return self.server.client()

    # -- verbs --
    def up(self, upstreams: Mapping[str, str], profile: str | None = None) -> dict[str, str]:
        """The server running, a proxy from a port of its own to each upstream (`host:port`, by cluster id)
        and `profile` on every proxy (None: the one recorded, else `none`). Idempotent: a proxy keeps
        its address. Returns `addresses()`."""
        state = self._state()
        profile = profile or state["profile"]
        toxics = profile_toxics(profile)  # an unknown profile fails before anything starts
        client = self.server.start(state.get("api_port"))
        state["api_port"] = self.server.port()
        existing = client.proxies()
        # the recorded links too: a server started again (killed meanwhile) has none of them
        wanted = {**{c: proxy["upstream"] for c, proxy in state["proxies"].items()}, **upstreams}
        for cluster_id, upstream in wanted.items():
            recorded = state["proxies"].get(cluster_id)
            listen = recorded["listen"] if recorded else f"{HOST}:{ports.any_free(HOST)}"
            if cluster_id not in existing:
                client.create_proxy(cluster_id, listen, upstream)
            elif existing[cluster_id]["upstream"] != upstream or existing[cluster_id]["listen"] != listen:
                client.update_proxy(cluster_id, listen=listen, upstream=upstream)
            state["proxies"][cluster_id] = {"listen": listen, "upstream": upstream}
        state["profile"] = profile
        self._save(state)
        for cluster_id in state["proxies"]:
            self._replace_toxics(client, cluster_id, PROFILE_PREFIX, toxics)
        return self.addresses()

    def down(self) -> None:
        """Stop the server and forget the links (the next `up` picks new ports)."""
        self.server.stop()
        self.state_file.unlink(missing_ok=True)

    def set_profile(self, profile: str, cluster_ids: Iterable[str] | None = None) -> None:
        """Replace the profile's toxics on the given links (default: all); other toxics stay. Recorded
        as the links' profile only when it applies to all of them."""
        toxics = profile_toxics(profile)
        client = self.client()
        chosen = list(cluster_ids) if cluster_ids is not None else list(self.addresses())
        for cluster_id in chosen:
            self._replace_toxics(client, cluster_id, PROFILE_PREFIX, toxics)
        if cluster_ids is None:
            state = self._state()
            state["profile"] = profile
            self._save(state)

    def add_toxics(self, cluster_id: str, toxics: Iterable[Toxic]) -> None:
        """Add toxics to a link (e.g. `links.add_toxics("foreign-1", bandwidth(100))`); a toxic of the
        same name is replaced."""
        self._replace_toxics(self.client(), self._proxy(cluster_id), None, list(toxics))

    def remove_toxics(self, cluster_id: str, name: str) -> None:
        """Remove the toxics named `name`, `name-upstream` and `name-downstream` from a link."""
        client = self.client()
        proxy = self._proxy(cluster_id)
        for toxic in client.toxics(proxy):
            if toxic["name"] in (name, *(f"{name}-{stream}" for stream in STREAMS)):
                client.remove_toxic(proxy, toxic["name"])

    def toxics(self, cluster_id: str) -> list[dict[str, Any]]:
        return self.client().toxics(self._proxy(cluster_id))

    def partition(self, cluster_id: str, mode: PartitionMode = "blackhole") -> None:
        """Cut the link until `heal`:
        - `blackhole` (the default; how a partition looks from either side): the proxy still accepts
          connections, but no byte passes either way on open or new ones, and nothing is closed, so
          only a client's own deadlines and pings find out. Bytes sent meanwhile are dropped, not
          delayed (TCP across a real partition would resend them): on `heal` Toxiproxy closes (FIN)
          every connection that lived through it, and clients connect again.
        - `refuse`: the proxy is disabled, as if the API server were down: open connections are closed
          (FIN) at once, new ones refused (RST). Its port is free meanwhile."""
        proxy = self._proxy(cluster_id)
        client = self.client()
        if mode == "blackhole":
            present = {toxic["name"] for toxic in client.toxics(proxy)}
            for toxic in partition_toxics():
                if toxic.name not in present:  # re-adding it would close the connections it holds
                    client.add_toxic(proxy, toxic)
        elif mode == "refuse":
            client.update_proxy(proxy, enabled=False)
        else:
            raise LinkError(f"partition mode {mode!r}: choose blackhole or refuse")

    def heal(self, cluster_id: str) -> None:
        """Undo `partition` (either mode); the profile and other toxics stay."""
        proxy = self._proxy(cluster_id)
        client = self.client()
        for toxic in client.toxics(proxy):
            if toxic["name"].startswith(PARTITION_PREFIX):
                client.remove_toxic(proxy, toxic["name"])
        client.update_proxy(proxy, enabled=True)

    def cut_connections(self, cluster_id: str) -> None:
        """Close (FIN) every open connection through the link; new ones work at once (a load balancer
        that restarts): the proxy disabled and enabled again."""
        proxy = self._proxy(cluster_id)
        client = self.client()
        client.update_proxy(proxy, enabled=False)
        client.update_proxy(proxy, enabled=True)

    @contextlib.contextmanager
    def partitioned(self, cluster_id: str, mode: PartitionMode = "blackhole") -> Iterator[None]:
        """`partition` for the `with` block, `heal` after it, whatever happens in it."""
        self.partition(cluster_id, mode)
        try:
            yield
        finally:
            self.heal(cluster_id)

    # -- helpers --
    def _proxy(self, cluster_id: str) -> str:
        if cluster_id not in self._state()["proxies"]:
            raise LinkError(f"no link to {cluster_id}: links lead to {', '.join(self.addresses()) or 'nothing'}")
        return cluster_id

    @staticmethod
    def _replace_toxics(client: ToxiproxyClient, proxy: str, prefix: str | None, toxics: list[Toxic]) -> None:
        """Remove the proxy's toxics whose name starts with `prefix` (None: those named as one of
        `toxics`), then add `toxics`."""
        names = {toxic.name for toxic in toxics}
        present = client.toxics(proxy)
        replaced = [t for t in present if (t["name"].startswith(prefix) if prefix is not None else t["name"] in names)]
        if sorted(replaced, key=lambda t: t["name"]) == sorted((t.to_json() for t in toxics), key=lambda t: t["name"]):
            return  # as wanted already: `dev up` again changes nothing
        for found in replaced:
            client.remove_toxic(proxy, found["name"])
        for toxic in toxics:
            client.add_toxic(proxy, toxic)
