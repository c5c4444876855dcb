"""The runtime's TLS identities, minted in a child process (`python -m runtime.tls`)."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys

import pytest
from cryptography import x509

from runtime.tls import CertificateAuthority, MintingError, issue, issue_with, new_ca


def test_a_serving_certificate_chains_to_its_new_ca_and_names_its_hosts() -> None:
    made = asyncio.run(issue(["10.0.0.7", "webhooks.liqo.svc"], ca_common_name="test-ca"))
    ca = x509.load_pem_x509_certificate(made.ca_pem)
    cert = x509.load_pem_x509_certificate(made.cert_pem)
    cert.verify_directly_issued_by(ca)
    assert ca.subject.rfc4514_string() == "CN=test-ca"
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["10.0.0.7"]
    assert names.get_values_for_type(x509.DNSName) == ["webhooks.liqo.svc"]
    assert isinstance(made.ssl_context(), ssl.SSLContext)  # loading the chain checks the key is the cert's


def test_a_certificate_issued_with_a_given_authority_is_signed_by_it() -> None:
    async def both() -> tuple[CertificateAuthority, bytes]:
        authority = await new_ca("shared-ca")
        return authority, (await issue_with(authority, ["127.0.0.1"])).cert_pem

    authority, cert_pem = asyncio.run(both())
    x509.load_pem_x509_certificate(cert_pem).verify_directly_issued_by(
        x509.load_pem_x509_certificate(authority.cert_pem)
    )


def test_a_failure_in_the_child_is_an_error_that_says_what_failed() -> None:
    broken = CertificateAuthority(cert_pem=b"not a certificate", key_pem=b"not a key")
    with pytest.raises(MintingError, match=r"\(issue_with\) exited with 1: ValueError"):
        asyncio.run(issue_with(broken, ["127.0.0.1"]))


def test_the_long_running_components_never_import_the_cryptography_library() -> None:
    every_server = (
        "import sys, runtime.__main__, runtime.webhooks, runtime.tls, runtime.kube.securemetrics,"
        " runtime.virtualkubelet.kubeletapi, runtime.virtualkubelet.servingcert;"
        " print(sorted(m for m in sys.modules if m.split('.')[0] == 'cryptography'))"
    )
    imported = subprocess.run([sys.executable, "-c", every_server], capture_output=True, text=True, check=True)
    assert imported.stdout.strip() == "[]"
