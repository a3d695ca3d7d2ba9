"""Warm start against cold start on a realistic nightly split: 30 days of history plus one new day.

    .venv/bin/python scripts/experiments/warm_start.py [--engine local|spark]

Synthetic Dawid-Skene labels (crowdspark.synthetic); item i arrives on day i % 31 + 1.  Yesterday's run
fitted days 1-30.  Tonight's run fits days 1-31 (the whole log, as a nightly job does), cold and
warm-started from yesterday's model.  For comparison, day 31 alone, cold and warm.  Prints iterations,
seconds of the fit and error rates (Markdown table for the README).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

from crowdspark.config import load_config
from crowdspark.pipeline import aggregate
from crowdspark.synthetic import dawid_skene_data


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", default="local", choices=["local", "spark"])
    parser.add_argument("--items", type=int, default=60_000)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    spark = None
    if args.engine == "spark":
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from crowdspark.spark_session import build_session

        spark = build_session("warm-start", master="local[2]")
        spark.sparkContext.setLogLevel("ERROR")
    labels, truth, _ = dawid_skene_data(args.items, 500, 5, 5, seed=11, accuracy=(0.3, 0.75))
    day = labels["item"].str[1:].astype(int) % 31 + 1
    with tempfile.TemporaryDirectory() as tmp:
        labels[day <= 30].to_parquet(f"{tmp}/history.parquet")
        labels[day == 31].to_parquet(f"{tmp}/day31.parquet")
        labels.to_parquet(f"{tmp}/all.parquet")
        truth.to_csv(f"{tmp}/truth.csv", index=False)
        config = load_config(algorithm="ds", engine_name=args.engine)
        hist = aggregate(config, f"{tmp}/history.parquet", f"{tmp}/hist", gold_path=f"{tmp}/truth.csv", spark=spark)
        rows = []
        for data in ("all", "day31"):
            for name, warm in (("cold", None), ("warm", f"{tmp}/hist")):
                s = aggregate(config, f"{tmp}/{data}.parquet", f"{tmp}/{data}-{name}", gold_path=f"{tmp}/truth.csv",
                              spark=spark, warm_start=warm).summary
                what = "days 1-31" if data == "all" else "day 31 only"
                rows.append((what, name, s["iterations"], s["timings"]["fit"], s["metrics"]["error_rate"], s["counts"]["labels"]))
    print(f"history: {hist.summary['counts']['labels']} labels, {hist.summary['iterations']} iterations; "
          f"engine {args.engine}")
    print("| tonight's data | start | labels | iterations | fit seconds | error rate |")
    print("|---|---|---|---|---|---|")
    for what, name, it, sec, err, n in rows:
        print(f"| {what} | {name} | {n} | {it} | {sec:.2f} | {100 * err:.2f}% |")
    if spark is not None:
        spark.stop()


if __name__ == "__main__":
    main()
