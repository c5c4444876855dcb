#!/usr/bin/env bash
# The test command: bootstrap, lint, type-check, the import rules, then pytest (unit, integration
# and e2e tests start real local clusters through the shared fixtures in tests/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."
# the tests also need the pins marked optional (the YAML language host of tests/e2e/test_package.py,
# Toxiproxy of the links between the dev clusters)
LIQO_STACK_BUILD_OPTIONAL=1 bash scripts/bootstrap.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# its cache outside the checkout, beside the tools' (a fresh clone checks in 0.4 s instead of 11 s)
MYPY_CACHE_DIR="${LIQO_STACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/liqo-stack}/mypy" .venv/bin/mypy
.venv/bin/lint-imports  # DESIGN.md's dependency rules ([tool.importlinter] in pyproject.toml)
# Five workers, each with its own clusters (tests/conftest.py gives each worker one lane of modules);
# LIQO_STACK_TEST_WORKERS=0 runs everything in this process; with 1 to 4 the lanes are merged, one per worker.
workers="${LIQO_STACK_TEST_WORKERS:-5}"
# Each dev cluster's API server, controller-manager and metrics-server hold 10 inotify instances between
# them, and kwok one more per `kubectl logs -f` or attach. Five workers run up to 18 clusters at once
# (five lanes of three, a second home in the first and the staging pair in the fifth); Linux's default
# limit of 128 per user leaves room for about 12, and past it kwok answers "too many open files"
# (docs/dev-clusters.md). Three workers run up to 11.
inotify_limit=$(cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null || echo 0)
if [ "$inotify_limit" -lt 512 ] && [ "$(id -u)" -eq 0 ]; then
  echo "test: fs.inotify.max_user_instances $inotify_limit -> 512 for the dev clusters"
  sysctl -q -w fs.inotify.max_user_instances=512 || echo "test: could not raise it" >&2
  inotify_limit=$(cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null || echo 0)
fi
if [ "$inotify_limit" -lt 256 ] && [ "$workers" -gt 3 ]; then
  echo "test: fs.inotify.max_user_instances is $inotify_limit, room for 3 workers' clusters, not $workers:" \
    "running 3 (as root, \`sysctl -w fs.inotify.max_user_instances=512\` makes room for 5)" >&2
  workers=3
fi
exec .venv/bin/pytest -n "$workers" "$@"
