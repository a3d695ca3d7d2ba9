"""One Dawid-Skene iteration: Spark engine on local[2] against the local engine, side by side.

    source scripts/env.sh
    .venv/bin/python -m benchmarks.ds_iteration --labels 1000000 10000000 --iterations 5

For each size it generates (once, under benchmarks/data/) a synthetic Dawid-Skene dataset with about 10
labels per item and 5 classes, builds the blocks for both engines, runs ``--iterations`` EM iterations on
each (tol = 0, so both run the same count) and prints the median seconds per iteration and the ratio
spark / local, for each Spark sweep mode (``session``: one barrier job for all sweeps; ``jobs``: one Spark
job per sweep).  Data loading and block building are not part of the per-iteration time.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import date

import pandas as pd

from benchmarks.common import ds_dataset, machine, median, spark_session, timed_fit
from crowdspark.config import InputConfig
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.spark.engine import SparkEngine
from crowdspark.io.pandas_reader import prepare_labels
from crowdspark.io.spark_reader import block_rdd, prepare_labels_spark, read_spark_frame
from crowdspark.models.dawid_skene import DawidSkene
from crowdspark.pipeline.prepare import local_blocks


def local_iteration(path: str, iterations: int) -> dict:
    start = time.perf_counter()
    labels = prepare_labels(pd.read_parquet(path), InputConfig(), path)
    blocks = local_blocks(labels.frame, None, labels.encoding, 2_000_000)
    setup = time.perf_counter() - start
    enc = labels.encoding
    model = DawidSkene(enc.n_workers, enc.n_classes, max_iter=iterations, tol=0.0)
    seconds, total = timed_fit(model, LocalEngine(blocks))
    return {"setup_s": setup, "iteration_s": median(seconds), "iterations": seconds}


def spark_iteration(spark, path: str, iterations: int, partitions: int, sweep_mode: str = "auto") -> dict:
    start = time.perf_counter()
    labels = prepare_labels_spark(read_spark_frame(spark, path, "parquet", "labels"), InputConfig(), path)
    engine = SparkEngine(block_rdd(labels, None, partitions, 2_000_000), sweep_mode=sweep_mode)
    enc = labels.encoding
    model = DawidSkene(enc.n_workers, enc.n_classes, max_iter=iterations, tol=0.0)
    try:
        seconds, total = timed_fit(model, engine)
    finally:
        engine.close()
    return {"setup_s": time.perf_counter() - start - total, "iteration_s": median(seconds), "iterations": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--sweep-modes", nargs="+", default=["session", "jobs"], choices=["session", "jobs"],
                        help="Spark engine sweep modes to measure (spark.sweep_mode)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    spark = spark_session("local[2]")
    rows = []
    for n in args.labels:
        path = ds_dataset(spark, n)
        local = local_iteration(path, args.iterations)
        row = {"labels": n, "local": local}
        for mode in args.sweep_modes:
            sp = spark_iteration(spark, path, args.iterations, args.partitions, mode)
            row[mode] = sp
            row[f"ratio_{mode}"] = sp["iteration_s"] / local["iteration_s"]
            print(f"{n:>11,d} labels: local {local['iteration_s']:.3f} s/iter, spark local[2] ({mode}) "
                  f"{sp['iteration_s']:.3f} s/iter, spark/local = {row[f'ratio_{mode}']:.2f}", flush=True)
        rows.append(row)
    print()
    print(f"machine: {machine()}; date: {date.today()}; {args.iterations} iterations, median; "
          f"{args.partitions} partitions")
    modes = args.sweep_modes
    print("| labels | local engine (s/iter) | " + " | ".join(f"Spark local[2], {m} (s/iter) | {m} / local" for m in modes)
          + " |")
    print("|---|---|" + "---|---|" * len(modes))
    for r in rows:
        cells = " | ".join(f"{r[m]['iteration_s']:.3f} | {r[f'ratio_{m}']:.2f}" for m in modes)
        print(f"| {r['labels']:,} | {r['local']['iteration_s']:.3f} | {cells} |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)
    spark.stop()


if __name__ == "__main__":
    main()
