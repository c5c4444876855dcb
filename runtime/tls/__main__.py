"""`python -m runtime.tls`: mint what one JSON request on stdin asks for (see runtime.tls), write it
to stdout as JSON, PEM as text."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from runtime.tls import minting
from runtime.tls.identities import CertificateAuthority

OPERATIONS: dict[str, Callable[..., Any]] = {
    "new_ca": minting.new_ca,
    "issue": minting.issue,
    "issue_with": lambda authority, hosts: minting.issue_with(
        CertificateAuthority(**{field: pem.encode() for field, pem in authority.items()}), hosts
    ),
    "serving_request": minting.serving_request,
}


def main() -> int:
    request = json.load(sys.stdin)
    operation = OPERATIONS.get(request.get("operation"))
    if operation is None:
        print(f"unknown operation {request.get('operation')!r}; one of: {', '.join(OPERATIONS)}", file=sys.stderr)
        return 2
    made = operation(**request.get("arguments", {}))
    json.dump({field: pem.decode() for field, pem in asdict(made).items()}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
