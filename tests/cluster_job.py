"""spark-submit driver of the cluster tests: ``crowdspark aggregate`` once per argument list, in one application.

    spark-submit --master spark://HOST:PORT --py-files crowdspark.zip tests/cluster_job.py RUNS.json

``RUNS.json`` holds a list of argument lists, each what follows ``crowdspark aggregate``.  Every run goes
through the command line's own ``run_aggregate`` on one shared SparkSession, so the cluster starts the
application's executors once for all of them.
"""

from __future__ import annotations

import json
import sys

from crowdspark.cli import build_parser, configure_logging, run_aggregate
from crowdspark.spark_session import build_session


def main(runs_path: str) -> int:
    configure_logging(debug=False, quiet=False)
    with open(runs_path) as handle:
        runs = json.load(handle)
    spark = build_session("crowdspark-cluster-tests")
    try:
        for argv in runs:
            run_aggregate(build_parser().parse_args(["aggregate", *argv]), spark=spark)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
