"""Seconds of a whole ``dds`` fit against a Dawid-Skene fit on the same blocks, local engine and Spark local[2].

    source scripts/env.sh
    .venv/bin/python -m benchmarks.dds_fit --labels 10000000

The fit is what a default run's fit phase does (:func:`crowdspark.pipeline.fit.fit_configured`): for
``dds`` that is choosing H among 1 and 2 by BIC (a fit of each, then the evidence of each) and the fit of
the chosen H; for ``ds`` one fit.  The data is the synthetic Dawid-Skene set of ``benchmarks/common.py``
(~10 labels per item, 5 classes, no planted difficulty).  Block building (on Spark: the first pass over
the cached blocks) is excluded.  Each fit runs
``--repeats`` times in turn (ds, dds, ds, dds, ...); the table gives the median seconds, the ratio of the
medians, and each dds fit's iterations per candidate H.
"""

from __future__ import annotations

import argparse
import time
from datetime import date
from functools import partial

import numpy as np
import pandas as pd

from benchmarks.common import ds_dataset, machine, spark_session
from crowdspark.config import InputConfig, RunConfig
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import _init
from crowdspark.engine.spark.engine import SparkEngine
from crowdspark.io.pandas_reader import prepare_labels
from crowdspark.io.spark_reader import block_rdd, prepare_labels_spark, read_spark_frame
from crowdspark.pipeline.fit import fit_configured
from crowdspark.models.dawid_skene import DawidSkene
from crowdspark.pipeline.prepare import local_blocks

ALGORITHMS = ("ds", "dds")


def timed_fits(engine, n_workers: int, n_classes: int, repeats: int) -> dict[str, tuple[list[float], str]]:
    """Seconds of each fit of each algorithm on ``engine``, and a description of the last dds fit.

    One pass over the blocks first: Spark builds and caches its blocks on the first pass, which is not a fit.
    """
    engine.map_reduce(partial(_init, DawidSkene(n_workers, n_classes)), None, stateful=False)
    seconds: dict[str, list[float]] = {name: [] for name in ALGORITHMS}
    notes = {name: "" for name in ALGORITHMS}
    for _ in range(repeats):
        for name in ALGORITHMS:
            start = time.perf_counter()
            _, result, selection = fit_configured(RunConfig(algorithm=name), n_workers, n_classes, engine)
            seconds[name].append(time.perf_counter() - start)
            notes[name] = f"{result.n_iter} iterations"
            if selection is not None:
                candidates = ", ".join(f"H={row['n_levels']}: {row['n_iter']}" for row in selection["table"])
                notes[name] = f"iterations {candidates}; chose H={selection['chosen']}"
            print(f"  {engine.name:5s} {name:4s} {seconds[name][-1]:.2f} s ({notes[name]})", flush=True)
    return {name: (seconds[name], notes[name]) for name in ALGORITHMS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--engines", nargs="+", default=["local", "spark"], choices=["local", "spark"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    spark = spark_session("local[2]") if "spark" in args.engines else None
    path = ds_dataset(spark, args.labels)
    results = {}
    if "local" in args.engines:
        labels = prepare_labels(pd.read_parquet(path), InputConfig(), path)
        engine = LocalEngine(local_blocks(labels.frame, None, labels.encoding, 2_000_000))
        results["local"] = timed_fits(engine, labels.encoding.n_workers, labels.encoding.n_classes, args.repeats)
        del engine, labels
    if "spark" in args.engines:
        slabels = prepare_labels_spark(read_spark_frame(spark, path, "parquet", "labels"), InputConfig(), path)
        engine = SparkEngine(block_rdd(slabels, None, args.partitions, 2_000_000))
        try:
            results["spark"] = timed_fits(engine, slabels.encoding.n_workers, slabels.encoding.n_classes,
                                          args.repeats)
        finally:
            engine.close()
    print()
    print(f"{args.labels:,} labels; machine: {machine()}; date: {date.today()}; median of {args.repeats} fit(s)")
    print("| engine | ds fit (s) | dds fit (s) | dds / ds | dds iterations |")
    print("|---|---|---|---|---|")
    for name, result in results.items():
        ds, dds = float(np.median(result["ds"][0])), float(np.median(result["dds"][0]))
        print(f"| {name} | {ds:.2f} | {dds:.2f} | {dds / ds:.2f} | {result['dds'][1]} |")
    if spark is not None:
        spark.stop()


if __name__ == "__main__":
    main()
