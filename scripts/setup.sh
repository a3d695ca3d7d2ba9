#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment in .venv and install crowdspark with its test tools.
# Idempotent: a second run only checks that the packages are there.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]"
