"""The kubelet API's serving certificate, signed by the home cluster as a kubelet's is.

Like a kubelet with `serverTLSBootstrap`, the virtual kubelet asks the home cluster for a
certificate of signer `kubernetes.io/kubelet-serving` (subject `system:node:<node>`, group
`system:nodes`, the node's address as SAN), approves its own request (no controller approves
serving certificates) and waits for kube-controller-manager to sign it. An API server started with
`--kubelet-certificate-authority` can then verify the virtual node as any other. A cluster whose
controller-manager signs nothing leaves the request pending: after `timeout` the virtual kubelet
serves a self-signed certificate instead (and says so), which only an API server that verifies
no kubelet accepts, as with a kubelet's own self-signed default.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
import secrets

from lightkube import AsyncClient
from lightkube.resources.certificates_v1 import CertificateSigningRequest

from runtime.tls import ServingCertificate, issue, serving_request

log = logging.getLogger(__name__)

SIGNER = "kubernetes.io/kubelet-serving"
USAGES = ["digital signature", "server auth"]  # what the signer requires of an ECDSA key


async def signed_by_home(
    home: AsyncClient, node_name: str, hosts: list[str], timeout: float = 30
) -> ServingCertificate | None:
    """A certificate the home cluster signed for `hosts`, or None when it signs none in `timeout`."""
    request = await serving_request(node_name, hosts)
    name = f"{node_name}-serving-{secrets.token_hex(4)}"
    body = {
        "metadata": {"name": name},
        "spec": {
            "request": base64.b64encode(request.request_pem).decode(),
            "signerName": SIGNER,
            "usages": USAGES,
            "expirationSeconds": int(datetime.timedelta(days=365).total_seconds()),
        },
    }
    csr = await home.create(CertificateSigningRequest.from_dict(body))  # type: ignore[call-overload]
    approved = csr.to_dict()
    approved.setdefault("status", {})["conditions"] = [
        {
            "type": "Approved",
            "status": "True",
            "reason": "VirtualKubeletServing",
            "message": f"the serving certificate of virtual node {node_name}",
        }
    ]
    # a PUT of the approval, as `kubectl certificate approve` does (from_dict's type is too loose)
    await home.replace(CertificateSigningRequest.Approval.from_dict(approved))  # type: ignore[call-overload]
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        current = await home.get(CertificateSigningRequest, name)
        issued = current.status.certificate if current.status else None
        if issued:
            return ServingCertificate(ca_pem=b"", cert_pem=base64.b64decode(issued), key_pem=request.key_pem)
        await asyncio.sleep(0.5)
    log.warning(
        "certificate request %s not signed in %.0fs (does kube-controller-manager sign %s?)", name, timeout, SIGNER
    )
    return None


async def serving_certificate(home: AsyncClient, node_name: str, hosts: list[str]) -> ServingCertificate:
    """Signed by the home cluster when it can, else self-signed."""
    try:
        signed = await signed_by_home(home, node_name, hosts)
    except Exception as err:  # no right to ask, no certificates API: the kubelet API still serves
        log.warning("no kubelet-serving certificate from the home cluster: %s", err)
        signed = None
    if signed is not None:
        return signed
    log.warning("the kubelet API serves a self-signed certificate: API servers that verify kubelets refuse it")
    return await issue(hosts, ca_common_name=f"{node_name}-ca")
