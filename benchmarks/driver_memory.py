"""The Python driver's peak memory of a Spark run against the number of items, with the workers and partitions fixed.

    source scripts/env.sh
    .venv/bin/python -m benchmarks.driver_memory --labels 3000000 10000000 30000000 --workers 10000 --partitions 8

Each size is a synthetic Dawid-Skene Parquet file (``benchmarks.common.ds_dataset``, 10 labels per item, the
same ``--workers``) run once by ``spark-submit --master local[2]`` (Dawid-Skene, ``--iterations``, the
distributed path forced, ``spark.partitions = --partitions``), as :mod:`benchmarks.datapath` runs it.  The
driver merges one worker dictionary per partition (size K) and the summaries; no per-label or per-item data
should reach it, so its peak (``summary.json``'s ``memory.driver_python_peak_mib``) should not grow with the
items.  The peak RSS of the run's largest process (the JVM) is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from benchmarks.common import ROOT, ds_dataset, machine, run_measured
from benchmarks.datapath import command


def run(labels: str, iterations: int, partitions: int) -> dict:
    """Wall seconds, the largest process's peak RSS and the Python driver's peak RSS (MiB) of one run."""
    python = sys.executable
    env = {**os.environ, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, "SPARK_LOCAL_IP": "127.0.0.1"}
    with tempfile.TemporaryDirectory() as tmp:
        cmd = command(ROOT, "spark", labels, iterations, f"{tmp}/out", "8g") + [
            "--set", f"spark.partitions={partitions}"]
        wall, rss, _ = run_measured(cmd, env)
        summary = json.loads(Path(f"{tmp}/out/summary.json").read_text())
    return {"wall_s": wall, "rss_mib": rss, "driver_mib": summary["memory"]["driver_python_peak_mib"],
            "items": summary["counts"]["items"], "workers": summary["counts"]["workers"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, nargs="+", default=[3_000_000, 10_000_000, 30_000_000])
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()
    print(machine())
    print("| labels | items | workers | partitions | Python driver peak (MiB) | largest process peak (MiB) | wall (s) |")
    print("|---|---|---|---|---|---|---|")
    for n in args.labels:
        r = run(ds_dataset(None, n, n_workers=args.workers), args.iterations, args.partitions)
        print(f"| {n:,} | {r['items']:,} | {r['workers']:,} | {args.partitions} | {r['driver_mib']:.1f} | "
              f"{r['rss_mib']:.0f} | {r['wall_s']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
