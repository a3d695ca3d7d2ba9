"""What Spark alone costs for a run's data movement on local[2], next to crowdspark's whole runs.

    source scripts/env.sh
    .venv/bin/python -m benchmarks.spark_floor --labels 10000000 --repeats 2

Three fresh processes on the same synthetic Dawid-Skene Parquet file (``benchmarks.common.ds_dataset``),
alternated ``--repeats`` times:

- ``floor``: ``spark-submit --master local[2] --driver-memory 8g`` of this module with ``--job``: it builds the
  session as crowdspark does, reads the labels' three columns in the splits crowdspark's pass reads
  (:func:`crowdspark.engine.spark.blocks.one_wave_reads`), shuffles them by item into as many partitions as a
  crowdspark run uses, hands every partition to a Python task as Arrow batches (``mapInArrow``) that
  only counts the rows, collects the counts, and stops the session: no validation, no block, no fit, no output.
- ``spark``: crowdspark's Spark run of the same file (Dawid-Skene, ``--iterations``, ``tol = 0``, the
  distributed path forced), as :mod:`benchmarks.datapath` runs it;
- ``local``: crowdspark's local engine on the same file (``--skip-local`` leaves it out).

It prints the medians (wall time of the whole process, which is what a user waits for) and the floor job's
own steps, so the gap between crowdspark's Spark run and the floor, and between the floor and the local engine,
are read from one run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import ROOT, ds_dataset, machine, run_measured

_FLOOR_MARK = "FLOOR "


def _count_rows(batches):
    """mapInArrow function: the partition's row count, one row."""
    import pyarrow as pa

    rows = sum(batch.num_rows for batch in batches)
    yield pa.RecordBatch.from_pydict({"rows": [rows]})


def floor_job(labels: str) -> dict[str, float]:
    """Seconds of each step of the floor (run inside ``spark-submit``)."""
    from crowdspark.engine.spark.blocks import one_wave_reads
    from crowdspark.pipeline.prepare import default_partitions, footer_row_count
    from crowdspark.spark_session import build_session

    steps: dict[str, float] = {}
    start = time.perf_counter()
    spark = build_session("crowdspark-floor")
    steps["session"] = time.perf_counter() - start
    mark = time.perf_counter()
    frame = spark.read.parquet(labels).select("item", "worker", "label")
    n_partitions = default_partitions(spark, footer_row_count(frame, "parquet") or frame.count())
    steps["read"] = time.perf_counter() - mark
    mark = time.perf_counter()
    with one_wave_reads(spark):
        counts = frame.repartition(n_partitions, "item").mapInArrow(_count_rows, "rows long").collect()
    steps["shuffle by item into Python"] = time.perf_counter() - mark
    steps["rows"] = float(sum(row.rows for row in counts))
    mark = time.perf_counter()
    spark.stop()
    steps["stop"] = time.perf_counter() - mark
    return steps


def _env() -> dict[str, str]:
    python = sys.executable
    env = {**os.environ, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, "SPARK_LOCAL_IP": "127.0.0.1"}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _floor_command(labels: str) -> list[str]:
    return [str(ROOT / ".venv" / "bin" / "spark-submit"), "--master", "local[2]", "--driver-memory", "8g",
            str(Path(__file__).resolve()), "--job", "--path", labels]


def _run(name: str, labels: str, iterations: int) -> dict:
    from benchmarks.datapath import command

    if name == "floor":
        wall, rss, out = run_measured(_floor_command(labels), _env())
        line = next(line for line in out.splitlines() if line.startswith(_FLOOR_MARK))
        return {"wall_s": wall, "rss_mib": rss, "steps": json.loads(line[len(_FLOOR_MARK):])}
    with tempfile.TemporaryDirectory() as tmp:
        wall, rss, _ = run_measured(command(ROOT, name, labels, iterations, f"{tmp}/out", "8g"), _env())
    return {"wall_s": wall, "rss_mib": rss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-local", action="store_true", help="leave out the local engine (at 100M labels)")
    parser.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        print(_FLOOR_MARK + json.dumps(floor_job(args.path)), flush=True)
        return
    labels = ds_dataset(None, args.labels)
    print(machine())
    print(f"load average before: {os.getloadavg()}")
    names = ["floor", "spark"] + ([] if args.skip_local else ["local"])
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for repeat in range(args.repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            runs[name].append(_run(name, labels, args.iterations))
            print(f"  {name}: {runs[name][-1]}", flush=True)
    print(f"load average after: {os.getloadavg()}")
    wall = {name: float(np.median([r["wall_s"] for r in runs[name]])) for name in names}
    print(f"\n{args.labels:,} labels, median of {args.repeats} (wall seconds, whole process):")
    print("| run | end to end (s) | peak RSS (MiB) |\n|---|---|---|")
    for name in names:
        print(f"| {name} | {wall[name]:.1f} | {np.median([r['rss_mib'] for r in runs[name]]):.0f} |")
    steps = {key: float(np.median([r["steps"][key] for r in runs["floor"]])) for key in runs["floor"][0]["steps"]}
    print("floor steps (s): " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items() if k != "rows"))
    print(f"spark / floor {wall['spark'] / wall['floor']:.2f}")
    if "local" in wall:
        print(f"floor / local {wall['floor'] / wall['local']:.2f}; spark / local {wall['spark'] / wall['local']:.2f}")


if __name__ == "__main__":
    main()
