"""`pulumi-analyzer-policy-liqo-stack`: starts the policy pack `policies/` for the pinned Pulumi engine.

Why not `runtime: python` in PulumiPolicy.yaml: the engine (v3.259.0) then asks the Python language host to
run the pack (RunPlugin with the newer ProgramInfo), but the pinned language host (v3.79.0, the last one
the module proxy serves, tools/NOTES.md) reads only the old `program` field, gets an empty path and runs
the *stack's* `__main__.py` instead. For a runtime that has no language host, the engine uses the older
protocol: it starts `pulumi-analyzer-policy-<runtime>` with the engine address and the pack directory,
which is what this entry point does, exactly like upstream's `pulumi-analyzer-policy-python` script:
`python -m pulumi.policy <engine> <pack>` in the interpreter liqo-stack is installed in.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.execv(sys.executable, [sys.executable, "-u", "-m", "pulumi.policy", *sys.argv[1:3]])
