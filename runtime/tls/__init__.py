"""TLS identities of the runtime's servers: the webhooks, the kubelet API, the secure /metrics.

They are minted in a short-lived child process, `python -m runtime.tls` (runtime/tls/minting.py):
a process that imports the cryptography library maps about 9 MB of it for the rest of its life, and
the long-running components need it once, at start. The child reads one request as JSON on stdin
and writes what it made, PEM as text, as JSON on stdout.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import asdict
from typing import Any

from runtime.tls.identities import CertificateAuthority, ServingCertificate, SigningRequest

__all__ = [
    "CertificateAuthority",
    "MintingError",
    "ServingCertificate",
    "SigningRequest",
    "issue",
    "issue_with",
    "new_ca",
    "serving_request",
]

# Generous: the child starts an interpreter and makes one or two EC keys (~0.3 s here).
MINTING_TIMEOUT = 60.0


class MintingError(RuntimeError):
    """The child process that mints keys and certificates failed."""


async def new_ca(common_name: str = "liqo-webhook-ca") -> CertificateAuthority:
    """A new self-signed CA."""
    return CertificateAuthority(**await _minted("new_ca", common_name=common_name))


async def issue(hosts: list[str], ca_common_name: str = "liqo-webhook-ca") -> ServingCertificate:
    """A new CA and a certificate for `hosts` (IP addresses or DNS names)."""
    return ServingCertificate(**await _minted("issue", hosts=hosts, ca_common_name=ca_common_name))


async def issue_with(authority: CertificateAuthority, hosts: list[str]) -> ServingCertificate:
    """A certificate for `hosts` (IP addresses or DNS names), signed by `authority`."""
    authority_text = {field: pem.decode() for field, pem in asdict(authority).items()}
    return ServingCertificate(**await _minted("issue_with", authority=authority_text, hosts=hosts))


async def serving_request(node_name: str, hosts: list[str]) -> SigningRequest:
    """A request the kubelet-serving signer accepts, and the new private key it was made with."""
    return SigningRequest(**await _minted("serving_request", node_name=node_name, hosts=hosts))


async def _minted(operation: str, **arguments: Any) -> dict[str, bytes]:
    request = json.dumps({"operation": operation, "arguments": arguments}).encode()
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runtime.tls",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(MINTING_TIMEOUT):
            made, errors = await child.communicate(request)
    except BaseException:  # the timeout, or the caller cancelled: no child left behind
        if child.returncode is None:
            child.kill()
            await child.wait()
        raise
    if child.returncode != 0:
        reason = errors.decode(errors="replace").strip().splitlines()
        raise MintingError(
            f"`{sys.executable} -m runtime.tls` ({operation}) exited with {child.returncode}: "
            f"{reason[-1] if reason else 'no message'}"
        )
    return {field: text.encode() for field, text in json.loads(made).items()}
