#!/usr/bin/env bash
# Install everything liqo-stack needs on a new machine: the Python environment (.venv) and the
# pinned Go-built binaries (cached outside the repository; a warm machine rebuilds nothing).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv" >&2
  python3 -m venv .venv
fi
echo "bootstrap: installing Python packages (pinned in pyproject.toml)" >&2
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'

echo "bootstrap: building pinned Go binaries (tools/toolchain.toml)" >&2
started=$SECONDS
python3 tools/build.py >&2
echo "bootstrap: toolchain ready in $((SECONDS - started))s" >&2
