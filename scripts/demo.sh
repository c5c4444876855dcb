#!/usr/bin/env bash
# The main job on the embedded default: bootstrap, then local home + foreign clusters and the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/liqo-stack demo "$@"
