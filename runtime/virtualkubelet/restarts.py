"""How often a peering was restarted in this process, and why: its virtual Nodes show it as the
condition `PeeringRestarted` (runtime/virtualkubelet/peerings.py restarts a failed peering alone)."""

from __future__ import annotations

from dataclasses import dataclass

RESTARTED_CONDITION = "PeeringRestarted"
RESTARTED_REASON = "PeeringFailed"


@dataclass
class PeeringRestarts:
    count: int = 0
    last_error: str = ""

    def condition(self) -> dict[str, str]:
        """The Node condition (without times): False until the peering's first restart."""
        if not self.count:
            return {
                "type": RESTARTED_CONDITION,
                "status": "False",
                "reason": "NotRestarted",
                "message": "the peering has run without a failure since its virtual kubelet started",
            }
        return {
            "type": RESTARTED_CONDITION,
            "status": "True",
            "reason": RESTARTED_REASON,
            "message": f"restarted {self.count} time(s) in its virtual kubelet; the last failure: {self.last_error}"[
                :1024
            ],
        }
