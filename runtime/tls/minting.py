"""Keys and certificates, made with the cryptography library. Only the child process that
runtime.tls starts imports this module: a process that imports cryptography maps about 9 MB of it
for the rest of its life.

The webhooks' TLS identity is a self-signed CA and a serving certificate signed by it. The
controller-manager hands the CA to the API server through the webhook configurations' caBundle
(see runtime/controllers/webhookconfig.py). Its replicas share one CA, kept in a Secret of the liqo
namespace that the first replica creates (runtime/webhooks/sharedca.py), so whichever replica the
webhook Service reaches is trusted; each replica issues its own serving certificate from it. No key
material ever sits in the stack's state.
"""

from __future__ import annotations

import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from runtime.tls.identities import CertificateAuthority, ServingCertificate, SigningRequest

VALIDITY = datetime.timedelta(days=365)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def subject_alt_names(hosts: list[str]) -> list[x509.GeneralName]:
    """IP addresses as IP names, the rest as DNS names."""
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def new_ca(common_name: str = "liqo-webhook-ca") -> CertificateAuthority:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(common_name)
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    return CertificateAuthority(ca.public_bytes(serialization.Encoding.PEM), _key_pem(ca_key))


def issue(hosts: list[str], ca_common_name: str = "liqo-webhook-ca") -> ServingCertificate:
    """A new CA and a certificate for `hosts` (IP addresses or DNS names)."""
    return issue_with(new_ca(ca_common_name), hosts)


def issue_with(authority: CertificateAuthority, hosts: list[str]) -> ServingCertificate:
    """A certificate for `hosts` (IP addresses or DNS names), signed by `authority`."""
    now = datetime.datetime.now(datetime.UTC)
    ca = x509.load_pem_x509_certificate(authority.cert_pem)
    ca_key = serialization.load_pem_private_key(authority.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca_name = ca.subject
    key = ec.generate_private_key(ec.SECP256R1())
    alt_names = subject_alt_names(hosts)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCertificate(
        ca_pem=authority.cert_pem,
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=_key_pem(key),
    )


def serving_request(node_name: str, hosts: list[str]) -> SigningRequest:
    """A request the kubelet-serving signer accepts (subject `system:node:<node>`, group
    `system:nodes`, `hosts` as SANs), with a new ECDSA key."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}"),
        ]
    )
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject)
        .add_extension(x509.SubjectAlternativeName(subject_alt_names(hosts)), critical=False)
        .sign(key, hashes.SHA256())
    )
    return SigningRequest(csr.public_bytes(serialization.Encoding.PEM), _key_pem(key))
