#!/usr/bin/env bash
# Package the library for a cluster: dist/crowdspark.zip (or the path given), to ship with spark-submit --py-files.
# The executors also need numpy, scipy, pandas and pyarrow (see README, "Submitting to a cluster").
set -euo pipefail
cd "$(dirname "$0")/.."
ZIP="${1:-dist/crowdspark.zip}"
mkdir -p "$(dirname "$ZIP")"
rm -f "$ZIP"
python3 - "$ZIP" <<'PY'
import pathlib, sys, zipfile
root = pathlib.Path(".")
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as zf:
    for path in sorted(root.joinpath("crowdspark").rglob("*.py")):
        zf.write(path, path.as_posix())
print(f"wrote {sys.argv[1]}")
PY
