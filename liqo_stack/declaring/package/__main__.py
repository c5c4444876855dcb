"""`python -m liqo_stack.declaring.package schema [FILE]`: write the package schema (default: package/schema.json)."""

from __future__ import annotations

import sys
from pathlib import Path

from liqo_stack.declaring.package.schema import schema_text

SCHEMA_FILE = Path(__file__).resolve().parents[3] / "package" / "schema.json"


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "schema" or len(argv) > 2:
        print("usage: python -m liqo_stack.declaring.package schema [FILE]", file=sys.stderr)
        return 2
    target = Path(argv[1]) if len(argv) == 2 else SCHEMA_FILE
    target.write_text(schema_text())
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
