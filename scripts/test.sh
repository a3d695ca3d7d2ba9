#!/usr/bin/env bash
# Set up the environment and run the test suite: unit, Spark and end-to-end tests, on two pytest workers (about
# 15 minutes on 2 cores; docs/testing.md).
# `--full` also runs the full tier: the standalone-cluster tests, the Spark kill matrix of a run root and the
# notebook on all 12 crowds.  CROWDSPARK_TEST_WORKERS sets the number of workers (0: one process).  Other
# arguments go to pytest, e.g. `bash scripts/test.sh -m "not spark and not slow"` for the fast tests only.
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
# a module's tests stay on one worker: its module-scoped fixtures (fitted models, a cluster) are built once; the
# files run in tests/conftest.py's order (the longest first), not in pytest-xdist's (the most tests first)
workers=(-n "${CROWDSPARK_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder)
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=30 "${workers[@]}" ${args[@]+"${args[@]}"}
