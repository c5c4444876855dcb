#!/usr/bin/env bash
# Install everything liqo-stack needs on a new machine: the Python environment (.venv) and the
# pinned Go-built binaries (cached outside the repository; a warm machine rebuilds nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS

# tools/build.py needs only the standard library: it starts first and builds while pip installs
# (pip mostly waits for the network, the build for the CPU).
echo "bootstrap: building pinned Go binaries (tools/toolchain.toml) in the background" >&2
python3 tools/build.py >&2 &
build=$!

if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv" >&2
  python3 -m venv .venv
fi
echo "bootstrap: installing Python packages (pinned in pyproject.toml)" >&2
pip_status=0
# one line per package pip fetches; errors pass unfiltered on stderr
.venv/bin/python -m pip install --progress-bar off --disable-pip-version-check -e '.[dev]' \
  | sed -n -e 's/^\(Collecting\|Successfully installed\) /bootstrap:   \1 /p' >&2 || pip_status=$?
if [ "$pip_status" -eq 0 ]; then
  echo "bootstrap: Python packages ready in $((SECONDS - started))s; waiting for the Go binaries" >&2
else
  echo "bootstrap: pip install failed (exit $pip_status); waiting for the Go build to stop" >&2
fi

build_status=0
wait "$build" || build_status=$?
if [ "$build_status" -ne 0 ]; then
  echo "bootstrap: tools/build.py failed (exit $build_status): see the build log it named above" >&2
  exit "$build_status"
fi
echo "bootstrap: Python packages and Go binaries ready after $((SECONDS - started))s" >&2
exit "$pip_status"
