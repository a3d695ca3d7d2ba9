"""spark-submit driver of the cluster tests: ``crowdspark aggregate`` once per argument list, in one application.

    spark-submit --master spark://HOST:PORT --py-files crowdspark.zip tests/cluster_job.py RUNS.json [ORIGINS.json]

``RUNS.json`` holds a list of argument lists, each what follows ``crowdspark aggregate``.  Every run goes
through the command line's own ``run_aggregate`` on one shared SparkSession, so the cluster starts the
application's executors once for all of them.  With ``ORIGINS.json``, the job then writes there, for one task
per executor core, where the executors' Python imported crowdspark and its dependencies from.
"""

from __future__ import annotations

import json
import sys

from crowdspark.cli import build_parser, configure_logging, run_aggregate
from crowdspark.spark_session import build_session

#: the modules whose origin the executors report
MODULES = ("crowdspark", "numpy", "scipy", "pandas", "pyarrow", "pyspark")


def origins(_partition):
    """One record of an executor's Python: its interpreter, the PEX it runs from (``PEX``, set by a PEX at
    boot; empty without one) and the file of each of :data:`MODULES`."""
    import importlib
    import os

    yield {"executable": sys.executable, "pex": os.environ.get("PEX", ""), "cwd": os.getcwd(),
           "modules": {name: importlib.import_module(name).__file__ for name in MODULES}}


def main(runs_path: str, origins_path: str | None = None) -> int:
    configure_logging(debug=False, quiet=False)
    with open(runs_path) as handle:
        runs = json.load(handle)
    spark = build_session("crowdspark-cluster-tests")
    try:
        for argv in runs:
            run_aggregate(build_parser().parse_args(["aggregate", *argv]), spark=spark)
        if origins_path is not None:
            slots = spark.sparkContext.defaultParallelism
            found = spark.sparkContext.parallelize(range(slots), slots).mapPartitions(origins).collect()
            with open(origins_path, "w") as handle:
                json.dump(found, handle)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
