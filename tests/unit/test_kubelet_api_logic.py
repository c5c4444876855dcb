"""The kubelet API's pure parts: the kubelet's authorization attributes, client certificate
identities, the relayed stream's query and status frames (end to end: tests/e2e/test_kubelet_api.py)."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest
from multidict import MultiDict

from liqo_stack.dev import ports
from liqo_stack.dev.clusters import kwokctl_config
from runtime.kube.reviews import Caller
from runtime.virtualkubelet.kubeletapi import (
    bind_listener,
    caller_from_certificate,
    close_code,
    exit_status_frame,
    request_attributes,
    stream_query,
)


def test_requests_map_to_the_kubelets_verbs_and_node_subresources() -> None:
    assert request_attributes("GET", "/containerLogs/ns/pod/c") == ("get", ["proxy"])
    assert request_attributes("POST", "/exec/ns/pod/c") == ("create", ["proxy"])
    assert request_attributes("GET", "/portForward/ns/pod") == ("get", ["proxy"])
    assert request_attributes("GET", "/metrics/resource") == ("get", ["metrics"])
    assert request_attributes("GET", "/stats/summary") == ("get", ["stats"])
    assert request_attributes("GET", "/logs/syslog") == ("get", ["log"])
    assert request_attributes("GET", "/healthz") == ("get", ["healthz", "proxy"])
    assert request_attributes("GET", "/pods") == ("get", ["pods", "proxy"])
    assert request_attributes("GET", "/metricsfoo") == ("get", ["proxy"])  # a prefix is not a subpath


def test_a_client_certificate_names_the_user_and_groups_as_kubernetes_reads_them() -> None:
    peercert = {
        "subject": (
            (("organizationName", "system:masters"),),
            (("organizationName", "ops"),),
            (("commonName", "kube-apiserver-kubelet-client"),),
        )
    }
    assert caller_from_certificate(peercert) == Caller("kube-apiserver-kubelet-client", ("system:masters", "ops"))
    assert caller_from_certificate(None) is None
    assert caller_from_certificate({}) is None
    assert caller_from_certificate({"subject": ((("organizationName", "ops"),),)}) is None  # no user


def test_the_kubelets_stream_query_becomes_the_api_servers() -> None:
    query = MultiDict([("command", "sh"), ("command", "-c"), ("command", "exit 3"), ("input", "1"), ("output", "1")])
    assert stream_query("exec", query, "main") == [
        ("container", "main"),
        ("stdin", "true"),
        ("stdout", "true"),
        ("command", "sh"),
        ("command", "-c"),
        ("command", "exit 3"),
    ]
    attach = MultiDict([("output", "1"), ("error", "1"), ("tty", "1"), ("command", "ignored")])
    assert stream_query("attach", attach, "c") == [
        ("container", "c"),
        ("stdout", "true"),
        ("stderr", "true"),
        ("tty", "true"),
    ]
    assert stream_query("portforward", MultiDict([("port", "8080,9090")]), "") == [("ports", "8080"), ("ports", "9090")]


def _status(body: dict[str, object]) -> bytes:
    return b"\x03" + json.dumps(body).encode()


def test_kwoks_exit_error_becomes_the_kubelets_non_zero_exit_code_and_nothing_else_changes() -> None:
    kwok = _status(
        {
            "metadata": {},
            "status": "Failure",
            "reason": "InternalError",
            "message": "Internal error occurred: error executing command in container: cmd wait: sh -c exit 3: "
            "exit status 3",
        }
    )
    status = json.loads(exit_status_frame(kwok)[1:])
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    success = _status({"metadata": {}, "status": "Success"})
    assert exit_status_frame(success) == success
    other = _status({"status": "Failure", "reason": "InternalError", "message": "container not found"})
    assert exit_status_frame(other) == other
    stdout = b"\x01exit status 3"
    assert exit_status_frame(stdout) == stdout
    assert exit_status_frame(b"\x03not json") == b"\x03not json"


def test_close_codes_that_may_not_be_sent_are_passed_on_as_a_normal_close() -> None:
    assert close_code(None) == 1000
    assert close_code(1006) == 1000
    assert close_code(1005) == 1000
    assert close_code(1011) == 1011
    assert close_code(1000) == 1000


def test_dev_clusters_present_a_kubelet_client_certificate_and_serve_kwoks_debugging_api() -> None:
    docs = kwokctl_config("10.101.0.0/16", "10.201.0.0/16", pki_dir=Path("/pki"), pod_logs=Path("/logs"))
    patches = {p["name"]: {a["key"]: a["value"] for a in p["extraArgs"]} for p in docs[0]["componentsPatches"]}  # type: ignore[attr-defined]
    assert patches["kube-apiserver"]["kubelet-client-certificate"] == "/pki/admin.crt"
    assert patches["kube-apiserver"]["kubelet-client-key"] == "/pki/admin.key"
    assert patches["kube-apiserver"]["kubelet-certificate-authority"] == "/pki/ca.crt"
    assert patches["kube-controller-manager"] == {
        "leader-elect": "false",  # one instance per dev cluster
        "node-monitor-period": "5s",  # Kubernetes' default, not kwokctl's 25 s
        "cluster-signing-cert-file": "/pki/ca.crt",
        "cluster-signing-key-file": "/pki/ca.key",
    }
    assert patches["kube-scheduler"] == {"leader-elect": "false"}
    assert patches["etcd"] == {"unsafe-no-fsync": "true"}
    kinds = {str(doc["kind"]): doc for doc in docs[1:]}
    assert set(kinds) == {"KwokConfiguration", "ClusterLogs", "ClusterExec", "ClusterAttach", "ClusterPortForward"}
    assert kinds["ClusterLogs"]["spec"] == {
        "logs": [{"logsFile": "/logs/current.log", "previousLogsFile": "/logs/previous.log"}]
    }


def test_the_serving_certificate_request_is_one_the_kubelet_serving_signer_accepts() -> None:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    from runtime.tls import serving_request

    made = asyncio.run(serving_request("liqo-foreign-1", ["127.0.0.1", "vk.liqo.svc"]))
    request = x509.load_pem_x509_csr(made.request_pem)
    assert request.is_signature_valid and b"PRIVATE KEY" in made.key_pem
    subject = request.subject
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:nodes"]
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == ["system:node:liqo-foreign-1"]
    names = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert names.get_values_for_type(x509.DNSName) == ["vk.liqo.svc"]


def test_a_bad_kubelet_port_is_refused_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from runtime.__main__ import main

    args = ["virtual-kubelet", "--home-cluster-id", "home", "--foreign-cluster-id", "foreign-1"]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--kubelet-port", "70000"])
    assert exited.value.code == 2 and "--kubelet-port must be between 1 and 65535" in capsys.readouterr().err


def test_the_external_runtime_gives_each_foreign_clusters_virtual_node_its_own_port() -> None:
    from liqo_stack.dev.external_runtime import ExternalRuntime

    kubeconfigs = {c: Path(f"/{c}.yaml") for c in ("home", "foreign-1", "foreign-2")}
    runtime = ExternalRuntime(kubeconfigs, "home")
    ports = runtime.kubelet_ports
    assert set(ports) == {"foreign-1", "foreign-2"} and ports["foreign-1"] < ports["foreign-2"]
    assert min(ports.values()) >= 10250
    shared = runtime.command("kubelet-foreign-2")  # the one process serving both clusters
    assert shared == runtime.command("virtual-kubelet") and "--foreign-cluster-id" not in shared
    assert {f"--kubelet-port-of={c}={port}" for c, port in ports.items()} <= set(shared)
    own = ExternalRuntime(kubeconfigs, "home", one_process=False).command("kubelet-foreign-2")
    assert own[own.index("--foreign-cluster-id") + 1] == "foreign-2"
    assert own[own.index("--kubelet-port") + 1] == str(ports["foreign-2"])
    with pytest.raises(ValueError, match="kubelet_ports"):
        ExternalRuntime(kubeconfigs, "home", kubelet_ports={"foreign-1": 10300, "foreign-2": 10300})


def test_default_kubelet_ports_skip_a_port_something_listens_on() -> None:
    """The dev env's virtual kubelet holds 10250: a bench's runtime started beside it takes another."""
    from liqo_stack.dev.external_runtime import free_ports_from

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        busy = listener.getsockname()[1]
        found = free_ports_from(busy, 2, {busy + 1})  # one in use, one already given to another kubelet
        # (the next ones may be taken too, by other processes of this machine: only their order is known)
        assert len(found) == 2 and busy < found[0] < found[1] and busy + 1 not in found


def test_a_dead_component_is_reported_with_its_log(tmp_path: Path) -> None:
    import subprocess

    from liqo_stack.dev.external_runtime import ExternalRuntime, RuntimeDied

    runtime = ExternalRuntime({"home": tmp_path / "home.yaml"}, "home", state_dir=tmp_path)
    runtime.folder.mkdir(parents=True)
    runtime.log("controller-manager").write_text("starting\nOSError: [Errno 98] address already in use\n")
    ended = subprocess.Popen(["true"])
    ended.wait()
    (runtime.folder / "controller-manager.pid").write_text(str(ended.pid))
    with pytest.raises(RuntimeDied, match="controller-manager exited") as raised:
        runtime.check_alive()
    assert "address already in use" in str(raised.value) and "controller-manager.log" in str(raised.value)


def test_a_kubelet_port_another_process_holds_is_refused_naming_the_address() -> None:
    """bind_listener binds as the kubelet API serves (SO_REUSEADDR): a listener there refuses it with
    the address in the message (the event the failed peering writes); a free port is bound and listening."""
    (port,) = ports.hand_out(1)  # below the ephemeral range: nobody takes it between the two binds
    try:
        refused = f"cannot listen on 127.0.0.1:{port}: address already in use"
        with socket.create_server(("127.0.0.1", port)), pytest.raises(OSError, match=refused):
            bind_listener("127.0.0.1", port)
        with bind_listener("127.0.0.1", port) as listener:  # free again (its TIME_WAITs do not hold it)
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
            assert listener.getsockname()[1] == port
    finally:
        ports.give_back([port])
