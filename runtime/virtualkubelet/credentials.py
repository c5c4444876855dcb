"""The home identity's credentials for one foreign cluster, picked up live.

The stack stores the home identity's kubeconfig in the home Secret `liqo/liqo-credentials-<foreign>`.
Its token changes when the foreign side reissues it (a revoked token, the next `pulumi up`): a
foreign API server that answers 401 makes the virtual kubelet read the Secret again
(`Credentials.refresh`, from the health check), and the clients and the kubelet API relay that ask
`Credentials.token` use the new token from their next request on. Nothing restarts; no pod is touched.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Callable
from typing import Any

import yaml
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.resources.core_v1 import Secret

from runtime.api import names

log = logging.getLogger(__name__)

REREAD_AT_MOST_EVERY = 2.0  # seconds: several virtual nodes of one cluster fail their checks together


def kubeconfig_of(secret: Any) -> dict[str, Any]:
    kubeconfig: dict[str, Any] = yaml.safe_load(base64.b64decode((secret.data or {})["kubeconfig"]).decode())
    return kubeconfig


def token_of(kubeconfig: dict[str, Any]) -> str | None:
    config = KubeConfig.from_dict(kubeconfig).get()
    return config.user.token if config is not None and config.user is not None else None


class Credentials:
    def __init__(self, home: AsyncClient, foreign_cluster_id: str, kubeconfig: dict[str, Any]) -> None:
        self.home = home
        self.secret_name = names.credentials_secret_name(foreign_cluster_id)
        self.kubeconfig = kubeconfig
        self._token = token_of(kubeconfig)
        self._read_at = time.monotonic()
        self._listeners: list[Callable[[str | None], None]] = []

    @classmethod
    async def load(cls, home: AsyncClient, foreign_cluster_id: str) -> Credentials:
        """From the credentials Secret; waits for it while `pulumi up` has not made it yet."""
        name = names.credentials_secret_name(foreign_cluster_id)
        while True:
            try:
                secret = await home.get(Secret, name, namespace=names.LIQO_NAMESPACE)
                break
            except Exception as err:  # not created yet by `pulumi up`: wait for it
                print(f"waiting for Secret {names.LIQO_NAMESPACE}/{name}: {err}", flush=True)
                await asyncio.sleep(2)
        return cls(home, foreign_cluster_id, kubeconfig_of(secret))

    def token(self) -> str | None:
        """The token to send now (a client's token source)."""
        return self._token

    def on_change(self, listener: Callable[[str | None], None]) -> None:
        self._listeners.append(listener)

    async def refresh(self) -> bool:
        """Read the Secret again (at most every few seconds); whether the token changed."""
        if time.monotonic() - self._read_at < REREAD_AT_MOST_EVERY:
            return False
        self._read_at = time.monotonic()
        try:
            secret = await self.home.get(Secret, self.secret_name, namespace=names.LIQO_NAMESPACE)
            token = token_of(kubeconfig_of(secret))
        except (ApiError, KeyError, ValueError, yaml.YAMLError) as err:
            log.warning("could not read %s/%s again: %s", names.LIQO_NAMESPACE, self.secret_name, err)
            return False
        if token == self._token:
            return False
        log.info("new credentials in %s/%s: used from now on", names.LIQO_NAMESPACE, self.secret_name)
        self._token = token
        for listener in self._listeners:
            listener(token)
        return True
