#!/usr/bin/env bash
# Package the library for a cluster: dist/crowdspark.zip, to ship with spark-submit --py-files.
# The executors also need numpy, scipy, pandas and pyarrow (see README, "Submitting to a cluster").
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p dist
rm -f dist/crowdspark.zip
python3 - <<'PY'
import pathlib, zipfile
root = pathlib.Path(".")
with zipfile.ZipFile("dist/crowdspark.zip", "w", zipfile.ZIP_DEFLATED) as zf:
    for path in sorted(root.joinpath("crowdspark").rglob("*.py")):
        zf.write(path, path.as_posix())
print("wrote dist/crowdspark.zip")
PY
