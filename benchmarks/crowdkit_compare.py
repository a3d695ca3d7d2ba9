"""crowdspark against crowd-kit's DawidSkene and MajorityVote on the same data, side by side.

    bash scripts/setup.sh && .venv/bin/pip install crowd-kit     # crowd-kit is optional, not a dependency
    source scripts/env.sh
    .venv/bin/python -m benchmarks.crowdkit_compare --labels 10000000 --iterations 5

Per iteration: crowd-kit has no per-iteration timer, so its cost per iteration is
``(fit(n_iter=N) - fit(n_iter=1)) / (N - 1)`` with ``tol=0`` (the same count of iterations as ours).
crowdspark's is the median of its own per-iteration timings (local engine; Spark engine on local[2]).
End to end: the wall time of a fresh process that reads the Parquet data, runs N Dawid-Skene iterations
and writes the item posteriors (crowdspark: ``spark-submit jobs/aggregate.py`` including Spark start-up;
crowd-kit: a Python process with pandas).  Peak resident memory of each process tree is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from datetime import date
from pathlib import Path

import pandas as pd

from benchmarks.common import ROOT, ds_dataset, machine, run_measured, spark_session

CROWDKIT_SCRIPT = """
import sys, time, warnings, pandas as pd
warnings.simplefilter("ignore")
from crowdkit.aggregation import DawidSkene
start = time.perf_counter()
df = pd.read_parquet(sys.argv[1]).rename(columns={"item": "task"})
ds = DawidSkene(n_iter=int(sys.argv[2]), tol=0.0)
probas = ds.fit_predict_proba(df)
probas.columns = [str(c) for c in probas.columns]
probas.reset_index().to_parquet(sys.argv[3])
print(time.perf_counter() - start)
"""


def crowdkit_fit_seconds(frame: pd.DataFrame, n_iter: int) -> float:
    from crowdkit.aggregation import DawidSkene

    start = time.perf_counter()
    DawidSkene(n_iter=n_iter, tol=0.0).fit(frame)
    return time.perf_counter() - start


def crowdkit_mv_seconds(frame: pd.DataFrame) -> float:
    from crowdkit.aggregation import MajorityVote

    start = time.perf_counter()
    MajorityVote().fit_predict(frame)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    spark = spark_session("local[2]")
    path = ds_dataset(spark, args.labels)
    spark.stop()
    frame = pd.read_parquet(path).rename(columns={"item": "task"})

    from benchmarks.ds_iteration import local_iteration

    ours_local = local_iteration(path, args.iterations)["iteration_s"]
    spark = spark_session("local[2]")
    from benchmarks.ds_iteration import spark_iteration

    ours_spark = spark_iteration(spark, path, args.iterations, 2)["iteration_s"]
    spark.stop()
    ck_n = crowdkit_fit_seconds(frame, args.iterations)
    ck_1 = crowdkit_fit_seconds(frame, 1)
    ck_iter = (ck_n - ck_1) / (args.iterations - 1)
    ck_mv = crowdkit_mv_seconds(frame)
    del frame

    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    with tempfile.TemporaryDirectory() as tmp:
        ours_wall, ours_rss, _ = run_measured(
            [str(Path(sys.executable).with_name("spark-submit")), "--master", "local[2]",
             "--driver-memory", "8g", str(ROOT / "jobs" / "aggregate.py"),
             "--labels", path, "--algorithm", "ds", "--set", f"ds.max_iter={args.iterations}", "--set", "ds.tol=0",
             "--quiet", "--output", f"{tmp}/ours"],
            env,
        )
        summary = json.loads(Path(f"{tmp}/ours/summary.json").read_text())
        script = Path(tmp) / "ck.py"
        script.write_text(CROWDKIT_SCRIPT)
        ck_wall, ck_rss, _ = run_measured([sys.executable, str(script), path, str(args.iterations), f"{tmp}/ck.parquet"], env)

    print(f"\n{args.labels:,} labels, {args.iterations} Dawid-Skene iterations; machine: {machine()}; date: {date.today()}")
    print("| measure | crowd-kit | crowdspark local engine | crowdspark Spark local[2] | crowd-kit / crowdspark Spark |")
    print("|---|---|---|---|---|")
    print(f"| one DS iteration (s) | {ck_iter:.3f} | {ours_local:.3f} | {ours_spark:.3f} | {ck_iter / ours_spark:.1f}x |")
    print(f"| majority vote (s) | {ck_mv:.2f} | | | |")
    print(f"| end to end, fresh process (s) | {ck_wall:.1f} | | {ours_wall:.1f} | {ck_wall / ours_wall:.1f}x |")
    print(f"| peak RSS of the largest process (MiB) | {ck_rss:.0f} | | {ours_rss:.0f} | |")
    print(f"crowdspark end-to-end phases (s): {summary['timings']}")


if __name__ == "__main__":
    main()
