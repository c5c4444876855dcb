"""The runtime image for real: `liqo-stack image build`, `umoci unpack`, and `runc run` (host network,
read-only root, user 65532) as the virtual kubelet of home and foreign-1, with the in-cluster
credentials a Deployment's pod gets (its ServiceAccount token, CA and namespace under
/var/run/secrets/kubernetes.io/serviceaccount, KUBERNETES_SERVICE_HOST/PORT); a pod is offloaded
through it. `--help` of each component works inside the image.

Needs root and the Debian packages debootstrap, umoci, skopeo and runc (`.ci/run` installs them);
without them the module is skipped, unless LIQO_STACK_REQUIRE_IMAGE=1 (CI) makes that a failure.
The first build on a machine takes a few minutes (debootstrap); the base layer is cached after.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from lightkube import Client
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ServiceAccount
from pulumi import automation as auto

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from liqo_stack.operating import image
from runtime.api import names
from runtime.api.resources import NamespaceOffloadingResource
from tests.support.kube import deploy_running, free_port, node_ready, offload, remote_pod, wait_phase, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi, pytest.mark.image]

PROJECT = Path(__file__).resolve().parents[2]
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOOLS = ("debootstrap", "umoci", "skopeo", "runc")


def _image_tools_or_skip() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    problem = f"missing {', '.join(missing)}" if missing else ("not root" if os.geteuid() != 0 else "")
    if problem:
        if os.environ.get("LIQO_STACK_REQUIRE_IMAGE") == "1":
            pytest.fail(f"the image test must run here (LIQO_STACK_REQUIRE_IMAGE=1): {problem}")
        pytest.skip(f"image test: {problem} (apt-get install -y debootstrap umoci skopeo runc, as root)")


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image, built once for the module, as an OCI layout (what umoci unpacks)."""
    _image_tools_or_skip()
    folder = tmp_path_factory.mktemp("image") / "layout"
    built = image.build(f"oci:{folder}", project_dir=PROJECT)
    print(
        f"image built in {built.seconds:.0f}s (base cached: {built.base_cached}, "
        f"dependencies cached: {built.dependencies_cached}): "
        f"{built.compressed_bytes / 2**20:.1f} MiB compressed, {built.rootfs_bytes / 2**20:.1f} MiB unpacked, "
        f"{built.digest}"
    )
    assert built.digest.startswith("sha256:")
    return folder


@pytest.fixture(scope="module")
def bundle(layout: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bundle") / "bundle"
    subprocess.run(
        ["umoci", "unpack", "--image", f"{layout}:{image.project_version(PROJECT)}", str(folder)], check=True
    )
    return folder


class Runc:
    """Containers of one bundle, with a state root of their own (never anyone else's containers)."""

    def __init__(self, bundle: Path, state: Path) -> None:
        self.bundle, self.state = bundle, state
        self.pristine = json.loads((bundle / "config.json").read_text())
        self.started: list[str] = []

    def configure(self, args: list[str], env: dict[str, str], mounts: list[dict[str, Any]]) -> None:
        """The bundle's config for the next container: the image's entrypoint with `args`, host
        network, a read-only root with /tmp as the Deployment's emptyDir."""
        config = json.loads(json.dumps(self.pristine))
        process = config["process"]
        process["args"] = ["python", "-m", "runtime", *args]
        process["env"] = [*process["env"], *(f"{k}={v}" for k, v in env.items())]
        process["terminal"] = False
        config["root"]["readonly"] = True
        config["linux"]["namespaces"] = [n for n in config["linux"]["namespaces"] if n["type"] != "network"]
        tmp = {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]}
        config["mounts"] = [*config["mounts"], tmp, *mounts]
        (self.bundle / "config.json").write_text(json.dumps(config))

    def run(self, name: str, args: list[str]) -> subprocess.CompletedProcess[str]:
        """Runs to completion (foreground)."""
        self.configure(args, {}, [])
        return subprocess.run(
            ["runc", "--root", str(self.state), "run", "--bundle", str(self.bundle), name],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def start(self, name: str, log: Path) -> None:
        with log.open("w") as out:
            subprocess.run(
                ["runc", "--root", str(self.state), "run", "--detach", "--bundle", str(self.bundle), name],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                check=True,
                timeout=60,
            )
        self.started.append(name)

    def state_of(self, name: str) -> dict[str, Any]:
        out = subprocess.run(["runc", "--root", str(self.state), "state", name], capture_output=True, text=True)
        return json.loads(out.stdout) if out.returncode == 0 else {}

    def remove(self, name: str) -> None:
        subprocess.run(["runc", "--root", str(self.state), "kill", name, "TERM"], capture_output=True, check=False)
        wait_until(lambda: self.state_of(name).get("status") != "running", 30, f"{name} stopped")
        subprocess.run(["runc", "--root", str(self.state), "delete", "--force", name], capture_output=True, check=False)


@pytest.fixture(scope="module")
def runc(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runc]:
    containers = Runc(bundle, tmp_path_factory.mktemp("runc"))
    try:
        yield containers
    finally:
        for name in containers.started:
            containers.remove(name)


@pytest.mark.parametrize("component", ["", "controller-manager", "foreign-agent", "virtual-kubelet"])
def test_each_component_answers_help_inside_the_image(runc: Runc, component: str) -> None:
    done = runc.run(f"liqo-help-{component or 'main'}-{os.getpid()}", [*([component] if component else []), "--help"])
    assert done.returncode == 0, done.stderr
    assert f"usage: python -m runtime {component}".strip() in done.stdout


# -- the image as the virtual kubelet of home and foreign-1 -------------------------------------
@pytest.fixture(scope="module")
def stack(
    layout: Path, dev_env: DevEnvironment, pulumi_env: PulumiEnvironment, project_dir: Path, webhook_port: int
) -> Iterator[auto.Stack]:
    """The stack with foreign-1 only, in external mode: its objects and identities, no replicas."""
    created = pulumi_env.stack_for_directory(project_dir, "image")
    config = {
        "home": {"clusterId": "home", "kubeconfigPath": str(dev_env.kubeconfig("home"))},
        "foreignClusters": [{"clusterId": "foreign-1", "kubeconfigPath": str(dev_env.kubeconfig("foreign-1"))}],
        "runtime": {"mode": "external", "webhookPort": webhook_port},
    }
    PulumiEnvironment.set_liqo_config(created, config)
    try:
        created.up(on_output=print)
        yield created
    finally:
        created.destroy(on_output=print)
        created.workspace.remove_stack("image")


def service_account_files(home: Client, kubeconfig: Path, folder: Path) -> tuple[str, str]:
    """What the kubelet mounts for the virtual kubelet's ServiceAccount; returns the API server's host, port."""
    account = names.virtual_kubelet_name("foreign-1")
    request = ServiceAccount.Token(
        metadata=ObjectMeta(name=account, namespace=names.LIQO_NAMESPACE),
        spec=TokenRequestSpec(audiences=[], expirationSeconds=3600),
    )
    token: Any = home.create(request, name=account, namespace=names.LIQO_NAMESPACE)
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    if "certificate-authority-data" in cluster:
        ca = base64.b64decode(cluster["certificate-authority-data"])
    else:
        ca = (kubeconfig.parent / cluster["certificate-authority"]).read_bytes()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "token").write_text(token.status.token)
    (folder / "ca.crt").write_bytes(ca)
    (folder / "namespace").write_text(names.LIQO_NAMESPACE)
    for file in folder.iterdir():
        file.chmod(0o644)  # readable by the image's user, as the kubelet's projected volume
    folder.chmod(0o755)
    server = urlparse(cluster["server"])
    return str(server.hostname), str(server.port)


@pytest.fixture(scope="module")
def kubelet_in_image(
    stack: auto.Stack,
    runc: Runc,
    home: Client,
    dev_env: DevEnvironment,
    tmp_path_factory: pytest.TempPathFactory,
    webhook_port: int,
) -> Iterator[str]:
    """The controller-manager and foreign-1's agent as local processes; foreign-1's virtual kubelet
    in the image under runc. Yields the container's name."""
    state = tmp_path_factory.mktemp("runtime")
    kubeconfigs = {c: dev_env.kubeconfig(c) for c in ("home", "foreign-1")}
    processes = ExternalRuntime(kubeconfigs, "home", webhook_port=webhook_port, state_dir=state)
    for component in ("controller-manager", "agent-foreign-1"):
        processes.start(component)
    secrets = state / "serviceaccount"
    host, port = service_account_files(home, kubeconfigs["home"], secrets)
    mount = {"destination": SERVICE_ACCOUNT_DIR, "type": "bind", "source": str(secrets), "options": ["rbind", "ro"]}
    args = [
        *(f"--probe-port={free_port()}", "virtual-kubelet", "--home-cluster-id=home"),
        *("--foreign-cluster-id=foreign-1", "--node-address=127.0.0.1", f"--kubelet-port={free_port()}"),
    ]
    runc.configure(args, {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}, [mount])
    name = f"liqo-vk-{os.getpid()}"
    log = state / "virtual-kubelet.log"
    runc.start(name, log)
    try:
        yield name
    finally:
        for offloading in home.list(NamespaceOffloadingResource, namespace="*"):
            home.delete(NamespaceOffloadingResource, "offloading", namespace=offloading.metadata.namespace)
        wait_until(lambda: not list(home.list(NamespaceOffloadingResource, namespace="*")), 60, "unoffloaded")
        stack.destroy(on_output=print)  # while the kubelet runs: it holds its VirtualNode until its Node is gone
        runc.remove(name)
        runc.started.remove(name)
        processes.stop_all()
        print(log.read_text())


def test_the_image_runs_as_an_unprivileged_user(runc: Runc, kubelet_in_image: str) -> None:
    pid = runc.state_of(kubelet_in_image)["pid"]
    uids = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:"))
    assert uids.split()[1:] == [str(names.RUNTIME_USER_ID)] * 4


def test_a_pod_is_offloaded_through_the_virtual_kubelet_in_the_image(
    kubelet_in_image: str, home: Client, foreign: dict[str, Client]
) -> None:
    wait_until(lambda: node_ready(home, names.virtual_node_name("foreign-1")), 120, "liqo-foreign-1 Ready")
    offload(home, "image-smoke", {"podOffloadingStrategy": "Remote"})
    wait_phase(home, "image-smoke", "Ready")
    (pod,) = deploy_running(home, "image-smoke", "hello", 1, timeout=120)
    assert pod.spec.nodeName == names.virtual_node_name("foreign-1")
    remote = remote_pod(foreign["foreign-1"], "image-smoke-home", pod.metadata.name)
    assert remote is not None and remote.status is not None and remote.status.phase == "Running"
