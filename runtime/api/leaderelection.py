"""Leader election settings, shared by the runtime (flags) and the stack config (validation)."""

from __future__ import annotations

from dataclasses import dataclass

JITTER_FACTOR = 1.2  # client-go's: the retry period is jittered up to this factor


@dataclass(frozen=True)
class LeaderElectionTiming:
    """client-go's defaults (and controller-runtime's): 15 s lease, 10 s renew deadline, 2 s retry."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problems(
        self, settings: tuple[str, str, str] = ("lease duration", "renew deadline", "retry period")
    ) -> list[str]:
        """What client-go's NewLeaderElector refuses, naming the settings as the caller calls them
        (flags, config paths); empty: valid."""
        lease, renew, retry = settings
        found = []
        if self.retry_period <= 0:
            found.append(f"{retry} must be greater than zero, got {self.retry_period}")
        if self.lease_duration <= self.renew_deadline:
            found.append(f"{lease} ({self.lease_duration}) must be greater than {renew} ({self.renew_deadline})")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            found.append(
                f"{renew} ({self.renew_deadline}) must be greater than {JITTER_FACTOR} x {retry} ({self.retry_period})"
            )
        return found
