"""The toolkit's Kubernetes client (the CLI, previews, the policy pack's reads): lightkube's, retrying
what the API server asks to be retried, and the lookups where a 404 is an answer, not a failure.

Why a transport of our own: lightkube raises a 429 at once, where client-go waits the Retry-After the
API server sends and tries again (up to 10 times). A kube-apiserver answers 429 "storage is
(re)initializing" for a custom kind while its CRD was just created or changed, which is exactly when
a command runs after `pulumi up`.
"""

from __future__ import annotations

import time
from typing import Any

import httpx2
from lightkube import ApiError, Client, KubeConfig
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import SingleConfig

# client-go's: 10 tries, each after the server's Retry-After (kube-apiserver sends 1 s), capped here
MAX_RETRIES = 10
MAX_RETRY_AFTER_SECONDS = 5.0


class RetryAfterTransport(httpx2.BaseTransport):
    """Sends each request again after a 429, as long as the server's Retry-After says, MAX_RETRIES times."""

    def __init__(self, inner: httpx2.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        for _ in range(MAX_RETRIES):
            response = self._inner.handle_request(request)
            if response.status_code != 429:
                return response
            delay = _retry_after(response.headers.get("retry-after"))
            response.close()
            time.sleep(delay)  # the server's own condition for the next try
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


class WarningsKept(httpx2.BaseTransport):
    """Keeps the API server's `Warning` headers (Pod Security names the pods a relabel would refuse
    in them): lightkube drops them."""

    def __init__(self, inner: httpx2.BaseTransport, kept: list[str]) -> None:
        self._inner, self.kept = inner, kept

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self._inner.handle_request(request)
        for value in response.headers.get_list("warning"):
            code, _, text = value.partition(" ")
            _agent, _, text = text.partition(" ")  # RFC 7234: 299 - "text"
            self.kept.append(text.strip().strip('"') if code == "299" else value)
        return response

    def close(self) -> None:
        self._inner.close()


def _retry_after(header: str | None) -> float:
    try:
        return min(max(float(header or 1), 0.0), MAX_RETRY_AFTER_SECONDS)
    except ValueError:  # an HTTP date: kube-apiserver sends seconds
        return 1.0


def client(
    config: KubeConfig | SingleConfig | None, field_manager: str | None = None, warnings: list[str] | None = None
) -> Client:
    """A client of `config` (a KubeConfig's current context) that retries what the server asks to;
    `warnings`: where the API server's warnings are kept (else dropped)."""
    single = config.get() if isinstance(config, KubeConfig) else config
    if single is None or single.user is None:
        raise ValueError("the kubeconfig names no current context with a user")
    verify = verify_cluster(single.cluster, single.user, single.abs_file)
    transport: httpx2.BaseTransport = RetryAfterTransport(httpx2.HTTPTransport(verify=verify))
    if warnings is not None:
        transport = WarningsKept(transport, warnings)
    return Client(single, field_manager=field_manager, transport=transport)


def get_or_none(client: Client, kind: Any, name: str, namespace: str | None = None) -> Any | None:
    """The object, or None when the API server says it does not exist."""
    try:
        return client.get(kind, name, namespace=namespace)
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise


def list_if_served(client: Client, kind: Any, namespace: str | None = None) -> list[Any] | None:
    """Every object of `kind` (in `namespace`; "*": all), or None when the API server does not serve the
    kind (its CRD not installed yet, or gone with a destroyed stack)."""
    try:
        return list(client.list(kind, namespace=namespace) if namespace is not None else client.list(kind))
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise
    except httpx2.HTTPStatusError as err:  # an answer that is no Status: the API is not served
        if err.response.status_code == 404:
            return None
        raise


def delete_if_present(client: Client, kind: Any, name: str, namespace: str | None = None) -> None:
    try:
        client.delete(kind, name, namespace=namespace)
    except ApiError as err:
        if err.status.code != 404:
            raise
