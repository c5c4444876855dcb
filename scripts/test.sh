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
# Four workers, each with its own clusters (tests/conftest.py gives each worker one lane of modules);
# LIQO_STACK_TEST_WORKERS=0 runs everything in this process; with 1 to 3 the lanes are merged, one per worker.
exec .venv/bin/pytest -n "${LIQO_STACK_TEST_WORKERS:-4}" "$@"
