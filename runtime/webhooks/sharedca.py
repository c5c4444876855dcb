"""The webhook CA the controller-manager's replicas share, in a Secret of the liqo namespace.

The first replica to start creates it; the others (and restarts) read it, so the caBundle the leader
keeps in the webhook configurations trusts every replica's serving certificate.
"""

from __future__ import annotations

import base64

from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret

from runtime.api import names
from runtime.tls import CertificateAuthority, new_ca


async def shared_ca(client: AsyncClient, namespace: str = names.LIQO_NAMESPACE) -> CertificateAuthority:
    while True:
        try:
            secret = await client.get(Secret, names.WEBHOOK_CA_SECRET, namespace=namespace)
        except ApiError as err:
            if err.status.code != 404:
                raise
        else:
            data = secret.data or {}
            return CertificateAuthority(base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"]))
        authority = await new_ca()
        secret = Secret(
            metadata=ObjectMeta(
                name=names.WEBHOOK_CA_SECRET,
                namespace=namespace,
                labels={names.MANAGED_BY_LABEL: names.MANAGED_BY, names.COMPONENT_LABEL: "webhooks"},
            ),
            type="kubernetes.io/tls",
            data={
                "tls.crt": base64.b64encode(authority.cert_pem).decode(),
                "tls.key": base64.b64encode(authority.key_pem).decode(),
            },
        )
        try:
            await client.create(secret)
        except ApiError as err:
            if err.status.code != 409:
                raise
            continue  # another replica created it first: serve from theirs
        return authority
