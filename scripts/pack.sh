#!/usr/bin/env bash
# Build what a cluster's executors need, into dist/ (or the folder given; a relative one is under the repository):
#   crowdspark-VERSION-py3-none-any.whl   the library (pip install it where the driver runs)
#   crowdspark.pex                        one executable file: the wheel, numpy, scipy, pandas, pyarrow and
#                                         the rest of their dependencies, for executors whose Python has none
#                                         of them (docs/cluster.md):
#   PYSPARK_PYTHON=./crowdspark.pex spark-submit --files dist/crowdspark.pex jobs/aggregate.py ...
# The PEX pins every dependency to the version installed beside the Python that packs (PYTHON, default
# .venv/bin/python, which needs `pip install -e ".[pack]"`), so the executors compute with the driver's
# libraries. It holds no interpreter: the nodes need a python3.X of the packing Python's minor version on
# their PATH. pyspark is left out: the executors' Python workers import the cluster's own (SPARK_HOME's).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-dist}"
PYTHON="${PYTHON:-.venv/bin/python}"
if ! command -v "$PYTHON" >/dev/null; then
  echo "pack.sh: no Python at $PYTHON; run bash scripts/setup.sh or set PYTHON to the driver's Python" >&2
  exit 2
fi
if ! "$PYTHON" -c "import pex" 2>/dev/null; then
  echo "pack.sh: $PYTHON cannot import pex; install it with: $PYTHON -m pip install -e \".[pack]\"" \
    "(or set PYTHON to a Python that has pex)" >&2
  exit 2
fi
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# the wheel, from a clean build tree (setuptools reuses build/lib, which can hold files deleted since)
rm -rf build "$OUT"/crowdspark-*.whl
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$OUT" .
wheel="$(ls "$OUT"/crowdspark-*.whl)"

# the versions to pin: every distribution installed beside PYTHON except crowdspark itself
"$PYTHON" - > "$work/constraints.txt" <<'PY'
import importlib.metadata

for dist in importlib.metadata.distributions():
    name = dist.metadata["Name"]
    if name and name.lower() != "crowdspark":
        print(f"{name}=={dist.version}")
PY

# --inherit-path=fallback: after its own libraries the PEX sees the PYTHONPATH Spark gives its Python
# workers (pyspark.zip, py4j); --no-pre-install-wheels --no-compress: the wheels go in as they are (a
# fraction of the build time; the executors install them once into PEX_ROOT at their first start)
rm -f "$OUT/crowdspark.pex"
"$PYTHON" -m pex "$wheel" --constraints "$work/constraints.txt" --exclude pyspark --inherit-path=fallback \
  --no-pre-install-wheels --no-compress --output-file "$OUT/crowdspark.pex"
echo "wrote $wheel and $OUT/crowdspark.pex"
