#!/usr/bin/env bash
# Set up the environment and run the test suite: unit, Spark and end-to-end tests (about 15 minutes on 2 cores).
# `--full` also runs the full tier (docs/testing.md): the standalone-cluster tests, the Spark kill matrix of a
# run root and the notebook on all 12 crowds.  Other arguments go to pytest, e.g. `bash scripts/test.sh -m "not
# spark"` for the fast tests only.
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
for arg in "$@"; do
  if [ "$arg" = "--full" ]; then
    export CROWDSPARK_FULL_SUITE=1 CROWDSPARK_NOTEBOOK_CROWDS="${CROWDSPARK_NOTEBOOK_CROWDS:-all}"
  else
    args+=("$arg")
  fi
done
bash scripts/setup.sh
source scripts/env.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=30 ${args[@]+"${args[@]}"}
