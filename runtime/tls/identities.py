"""The TLS identities the runtime's servers hold: PEM bytes only, so holding one needs no
cryptography library (runtime.tls mints them in a child process)."""

from __future__ import annotations

import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CertificateAuthority:
    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class ServingCertificate:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        # ssl loads a chain only from files; they live just long enough to be read
        with tempfile.TemporaryDirectory() as folder:
            cert, key = Path(folder, "tls.crt"), Path(folder, "tls.key")
            cert.write_bytes(self.cert_pem + self.ca_pem)
            key.write_bytes(self.key_pem)
            key.chmod(0o600)
            context.load_cert_chain(cert, key)
        return context


@dataclass(frozen=True)
class SigningRequest:
    """A PEM certificate signing request and the PEM private key it was made with."""

    request_pem: bytes
    key_pem: bytes
