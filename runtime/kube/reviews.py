"""Who calls and may they, asked of the API server as kubelets and controller-runtime do: a bearer
token through a TokenReview, a request through a SubjectAccessReview; answers cached with the
kubelet's webhook TTLs so a scraper or an API server calling every few seconds costs no review."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lightkube import AsyncClient
from lightkube.models.authentication_v1 import TokenReviewSpec
from lightkube.models.authorization_v1 import NonResourceAttributes, ResourceAttributes, SubjectAccessReviewSpec
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.authorization_v1 import SubjectAccessReview

# The kubelet's cache of webhook answers (--authentication-token-webhook-cache-ttl,
# --authorization-webhook-cache-authorized-ttl / -unauthorized-ttl).
TOKEN_TTL = 120.0
ALLOWED_TTL = 300.0
DENIED_TTL = 30.0


@dataclass(frozen=True)
class Caller:
    """Who calls, as the API server's authenticators would say."""

    user: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, list[str]] = field(default_factory=dict)


class TtlCache:
    def __init__(self) -> None:
        self._entries: dict[Any, tuple[float, Any]] = {}

    def get(self, key: Any) -> Any | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] < time.monotonic():
            self._entries.pop(key, None)
            return None
        return entry[1]

    def put(self, key: Any, value: Any, ttl: float) -> None:
        if len(self._entries) > 10_000:  # callers are the API server, scrapers and a few admins: never big
            self._entries.clear()
        self._entries[key] = (time.monotonic() + ttl, value)


def bearer_token(authorization: str) -> str | None:
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class Reviewer:
    """TokenReviews and SubjectAccessReviews in one cluster (errors reach the caller: the API server
    away means nobody can be told apart, which is not a 401)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self._tokens = TtlCache()
        self._decisions = TtlCache()

    async def caller_of(self, token: str) -> Caller | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._tokens.get(key)
        if cached is not None:
            return cached if isinstance(cached, Caller) else None
        review = await self.client.create(TokenReview(spec=TokenReviewSpec(token=token)))
        status = review.status
        caller: Caller | None = None
        if status is not None and status.authenticated and status.user is not None:
            user = status.user
            caller = Caller(user.username or "", tuple(user.groups or ()), user.uid or "", dict(user.extra or {}))
        self._tokens.put(key, caller or False, TOKEN_TTL)
        return caller

    async def allowed(
        self,
        caller: Caller,
        resource: ResourceAttributes | None = None,
        non_resource: NonResourceAttributes | None = None,
    ) -> tuple[bool, str]:
        """Whether `caller` may do what the attributes say, and the authorizer's reason."""
        extra = tuple(sorted((k, tuple(v)) for k, v in caller.extra.items()))
        asked = resource or non_resource
        attributes = asked.to_dict() if asked is not None else {}
        key = (caller.user, caller.groups, caller.uid, extra, bool(resource), tuple(sorted(attributes.items())))
        cached = self._decisions.get(key)
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        spec = SubjectAccessReviewSpec(
            user=caller.user,
            groups=list(caller.groups),
            uid=caller.uid or None,
            extra=dict(caller.extra) or None,
            resourceAttributes=resource,
            nonResourceAttributes=non_resource,
        )
        review = await self.client.create(SubjectAccessReview(spec=spec))
        status = review.status
        decision = (bool(status and status.allowed), (status.reason or "") if status else "")
        self._decisions.put(key, decision, ALLOWED_TTL if decision[0] else DENIED_TTL)
        return decision
