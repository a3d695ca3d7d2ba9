#!/usr/bin/env bash
# Set up the environment and run the main job with spark-submit on the bundled RTE dataset
# (the default algorithm, ads; local[*]); prints the error rate against RTE's gold labels. Results go to out/rte/.
# Arguments are passed on to the job, e.g. `bash scripts/run_default.sh --algorithm mv`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
exec .venv/bin/spark-submit --master "local[*]" \
  --conf spark.ui.showConsoleProgress=false \
  jobs/aggregate.py \
  --labels data/rte/labels.csv --gold data/rte/truth.csv \
  --output out/rte "$@"
