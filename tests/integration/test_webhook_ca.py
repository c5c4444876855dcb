"""The controller-manager's replicas share one webhook CA, kept in a Secret (real API server)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from cryptography import x509
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from liqo_stack.dev.clusters import DevEnvironment
from runtime.tls import issue_with
from runtime.webhooks import shared_ca

pytestmark = pytest.mark.clusters


@pytest.fixture
def namespace(home: Client, unique_name: str) -> Iterator[str]:
    home.create(Namespace(metadata=ObjectMeta(name=unique_name)))
    yield unique_name
    home.delete(Namespace, unique_name)


def test_replicas_starting_together_serve_from_one_ca(dev_env: DevEnvironment, namespace: str) -> None:
    async def replicas() -> list[bytes]:
        clients = [AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("home"))) for _ in range(3)]
        authorities = await asyncio.gather(*(shared_ca(client, namespace) for client in clients))
        again = await shared_ca(clients[0], namespace)  # a restart reads the same
        return [a.cert_pem for a in [*authorities, again]]

    pems = asyncio.run(replicas())
    assert len(set(pems)) == 1


def test_serving_certificates_of_different_replicas_chain_to_the_shared_ca(
    dev_env: DevEnvironment, namespace: str
) -> None:
    async def two() -> tuple[bytes, bytes, bytes]:
        client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("home")))
        first = await issue_with(await shared_ca(client, namespace), ["10.0.0.1"])
        second = await issue_with(await shared_ca(client, namespace), ["10.0.0.2"])
        return first.ca_pem, first.cert_pem, second.cert_pem

    ca_pem, first, second = asyncio.run(two())
    ca = x509.load_pem_x509_certificate(ca_pem)
    for pem in (first, second):
        cert = x509.load_pem_x509_certificate(pem)
        cert.verify_directly_issued_by(ca)
    assert first != second
