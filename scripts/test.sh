#!/usr/bin/env bash
# Set up the environment and run the whole test suite (unit, Spark and end-to-end tests).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not spark"` for the fast tests only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
