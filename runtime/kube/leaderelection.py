"""Leader election on a coordination.k8s.io Lease, with client-go's leaderelection semantics.

A candidate acquires the Lease when it is free (no holder: released) or expired (its record has not
changed for leaseDurationSeconds as observed on this candidate's own clock, so clock skew between
replicas does not matter), renews it every retry period, and counts as having lost it when it could
not renew for the renew deadline. Writes use the Lease's resourceVersion, so two candidates never
both win a round. A graceful stop releases the Lease (ReleaseOnCancel), so a successor takes over at
once; a crash leaves it to expire.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from runtime.api.leaderelection import JITTER_FACTOR, LeaderElectionTiming

log = logging.getLogger(__name__)

# A release that meets a changed Lease (409) reads it again and retries, as long as it is still this
# candidate's; a Lease that keeps changing is left to expire.
RELEASE_ATTEMPTS = 3


def default_identity() -> str:
    """hostname_uuid, as controller-runtime: a restarted process is a new candidate."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def _micro_time(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: AsyncClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        timing: LeaderElectionTiming | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timing = timing or LeaderElectionTiming()
        self.is_leader = asyncio.Event()
        # the last record seen and when (monotonic, local clock): expiry is judged from it
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._lease: Lease | None = None

    # -- one round ------------------------------------------------------------------------
    async def try_acquire_or_renew(self) -> bool:
        """One attempt: True when this candidate holds the Lease afterwards."""
        now = datetime.datetime.now(datetime.UTC)
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as err:
            if err.status.code != 404:
                raise
            return await self._create(now)
        spec = lease.spec or LeaseSpec()
        record = (spec.holderIdentity, spec.leaseDurationSeconds, spec.renewTime, spec.acquireTime)
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        holder = spec.holderIdentity or ""
        duration = spec.leaseDurationSeconds or 0
        if holder and holder != self.identity and self._observed_at + duration > time.monotonic():
            return False  # someone else holds it and it has not expired
        ours = holder == self.identity
        lease.spec = LeaseSpec(
            holderIdentity=self.identity,
            leaseDurationSeconds=round(self.timing.lease_duration),
            acquireTime=spec.acquireTime if ours else now,
            renewTime=now,
            leaseTransitions=(spec.leaseTransitions or 0) + (0 if ours else 1),
        )
        try:
            updated = await self.client.replace(lease)
        except ApiError as err:
            if err.status.code == 409:  # another candidate wrote first
                return False
            raise
        self._remember(updated)
        return True

    async def _create(self, now: datetime.datetime) -> bool:
        lease = Lease(
            metadata=ObjectMeta(name=self.name, namespace=self.namespace),
            spec=LeaseSpec(
                holderIdentity=self.identity,
                leaseDurationSeconds=round(self.timing.lease_duration),
                acquireTime=now,
                renewTime=now,
                leaseTransitions=0,
            ),
        )
        try:
            created = await self.client.create(lease)
        except ApiError as err:
            if err.status.code == 409:  # another candidate created it first
                return False
            raise
        self._remember(created)
        return True

    def _remember(self, lease: Lease) -> None:
        spec = lease.spec or LeaseSpec()
        self._lease = lease
        self._observed = (spec.holderIdentity, spec.leaseDurationSeconds, spec.renewTime, spec.acquireTime)
        self._observed_at = time.monotonic()

    async def _attempt(self) -> bool:
        try:
            return await self.try_acquire_or_renew()
        except Exception as err:  # API server unreachable, 5xx, ...: this round failed, the next retries
            log.warning("lease %s/%s: %s", self.namespace, self.name, err)
            return False

    async def _attempt_until(self, deadline: float) -> bool:
        """A renewal that hangs (an API server that accepts and never answers) counts as failed at the deadline."""
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.01)):
                return await self._attempt()
        except TimeoutError:
            return False

    def _jittered_retry(self) -> float:
        return self.timing.retry_period * (1 + random.random() * (JITTER_FACTOR - 1))

    # -- the loops --------------------------------------------------------------------------
    async def acquire(self) -> None:
        """Returns once this candidate leads."""
        log.info("lease %s/%s: %s standing by for leadership", self.namespace, self.name, self.identity)
        while not await self._attempt():
            await asyncio.sleep(self._jittered_retry())
        self.is_leader.set()
        log.info("lease %s/%s: %s acquired leadership", self.namespace, self.name, self.identity)

    async def keep(self) -> None:
        """Renews until it cannot for the renew deadline; then returns (leadership is lost)."""
        while True:
            await asyncio.sleep(self.timing.retry_period)
            deadline = time.monotonic() + self.timing.renew_deadline
            while not await self._attempt_until(deadline):
                if time.monotonic() >= deadline:
                    self.is_leader.clear()
                    log.error("lease %s/%s: %s lost leadership", self.namespace, self.name, self.identity)
                    return
                await asyncio.sleep(self.timing.retry_period)

    async def campaign(self, on_lost: Callable[[], None]) -> None:
        """Stands by until this candidate leads, renews, and calls `on_lost` if the Lease is lost. The
        runtime exits the process there, as controller-runtime does: a process that may have missed the
        new leader's writes must not drain its queues, and its supervisor restarts it as a stand-by."""
        await self.acquire()
        await self.keep()
        on_lost()

    async def release(self) -> None:
        """Gives the Lease up if this candidate holds it (client-go's ReleaseOnCancel): no holder and a
        1 s duration, so a stand-by takes over on its next retry."""
        if not self.is_leader.is_set() or self._lease is None:
            return
        self.is_leader.clear()
        lease = self._lease
        try:
            for _ in range(RELEASE_ATTEMPTS):
                spec = lease.spec or LeaseSpec()
                now = datetime.datetime.now(datetime.UTC)
                lease.spec = LeaseSpec(
                    holderIdentity=None,
                    leaseDurationSeconds=1,
                    acquireTime=now,
                    renewTime=now,
                    leaseTransitions=spec.leaseTransitions,
                )
                try:
                    await self.client.replace(lease)
                    log.info("lease %s/%s: %s released leadership", self.namespace, self.name, self.identity)
                    return
                except ApiError as err:
                    if err.status.code != 409:
                        raise
                # Changed since it was read: a renewal in flight when the campaign was cancelled, or another
                # writer. Release the Lease as it is now, if it is still this candidate's.
                lease = await self.client.get(Lease, self.name, namespace=self.namespace)
                if (lease.spec or LeaseSpec()).holderIdentity != self.identity:
                    return  # another candidate holds it already
            log.warning(
                "lease %s/%s: release failed: changed at each of %d attempts",
                self.namespace,
                self.name,
                RELEASE_ATTEMPTS,
            )
        except Exception as err:  # refused, or the server is gone: the Lease will expire
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, err)
