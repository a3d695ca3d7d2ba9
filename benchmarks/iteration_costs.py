"""Seconds per iteration of every iterative algorithm, on the local engine and on Spark local[2].

    source scripts/env.sh
    .venv/bin/python -m benchmarks.iteration_costs --labels 10000000 --algorithms ds idbla idbla-cvb idbla-cvb0

One synthetic Dawid-Skene dataset (benchmarks/common.py: ~10 labels per item, 5 classes) is generated
once; each algorithm runs ``--iterations`` sweeps on each engine (H = 2 for the IDBLA models; tolerances
0 so every run does the same number of sweeps) and the median seconds per sweep are printed, with each
algorithm's ratio to one Dawid-Skene iteration on the same engine (the progress lines also list every
sweep's seconds, which shows warm-up).  Initialization and block building are excluded.  The last two
columns are Spark means over every sweep: a stateful model's sweep session ends every
``--session-sweeps`` sweeps (``spark.session_sweeps``, default 100), and the cost of an end
(``docs/decisions/0085-stateful-sessions.md``) does not show in a median.

The Gibbs samplers are timed two ways: ``idbla`` runs burn-in sweeps (all but the last), ``idbla-kept``
runs kept sweeps only (each also adds the Rao-Blackwellized posteriors to the items' sums; a default run
keeps 300 of its 400 sweeps).
"""

from __future__ import annotations

import argparse
import time
from datetime import date

import pandas as pd

from benchmarks.common import ds_dataset, machine, median, spark_session, timed_fit
from crowdspark.models.registry import build_model
from crowdspark.config import InputConfig
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.spark.engine import SparkEngine
from crowdspark.io.pandas_reader import prepare_labels
from crowdspark.io.spark_reader import block_rdd, prepare_labels_spark, read_spark_frame
from crowdspark.pipeline.prepare import local_blocks

# timing names of the samplers' kept sweeps -> the algorithm
KEPT = {"idbla-kept": "idbla", "fixed-idbla-kept": "fixed-idbla", "bcc-kept": "bcc"}


def sweep_params(name: str, iterations: int) -> dict:
    """Parameters that make ``name`` run exactly ``iterations`` sweeps."""
    if name == "ds":
        return {"max_iter": iterations, "tol": 0.0}
    if name.startswith("idbla-cvb"):
        return {"max_iter": iterations, "tol": 1e-300}
    if name in ("idbla", "fixed-idbla", "bcc"):
        return {"burn_in": iterations - 1, "n_samples": 1}
    if name in KEPT:
        return {"burn_in": 0, "n_samples": iterations}
    return {}


def run_all(engine, encoding, algorithms: list[str], iterations: int) -> dict[str, tuple[float, float]]:
    """(median, mean) seconds per sweep of each algorithm on ``engine``."""
    out = {}
    for name in algorithms:
        algorithm = KEPT.get(name, name)
        model = build_model(algorithm, sweep_params(name, iterations), encoding.n_workers, encoding.n_classes, 0)
        seconds, _ = timed_fit(model, engine)
        out[name] = (median(seconds), sum(seconds) / len(seconds))
        each = " ".join(f"{s:.3f}" for s in seconds)
        print(f"  {engine.name:5s} {name:11s} {out[name][0]:.3f} s/iteration, mean {out[name][1]:.3f} "
              f"(each: {each})", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--algorithms", nargs="+", default=["ds", "idbla", "idbla-cvb", "idbla-cvb0"])
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--session-sweeps", type=int, default=100,
                        help="spark.session_sweeps of the Spark engine (sweeps per session of a stateful model)")
    args = parser.parse_args()
    spark = spark_session("local[2]")
    path = ds_dataset(spark, args.labels)
    start = time.perf_counter()
    labels = prepare_labels(pd.read_parquet(path), InputConfig(), path)
    local = LocalEngine(local_blocks(labels.frame, None, labels.encoding, 2_000_000))
    print(f"local blocks built in {time.perf_counter() - start:.1f} s", flush=True)
    results = {"local": run_all(local, labels.encoding, args.algorithms, args.iterations)}
    del local
    slabels = prepare_labels_spark(read_spark_frame(spark, path, "parquet", "labels"), InputConfig(), path)
    engine = SparkEngine(block_rdd(slabels, None, args.partitions, 2_000_000), session_sweeps=args.session_sweeps)
    try:
        results["spark"] = run_all(engine, slabels.encoding, args.algorithms, args.iterations)
    finally:
        engine.close()
    print()
    print(f"{args.labels:,} labels; machine: {machine()}; date: {date.today()}; median of {args.iterations} sweeps "
          f"(mean: every sweep counted, including the ends of sweep sessions, session_sweeps={args.session_sweeps})")
    print("| algorithm | local engine (s/iter) | x DS | Spark local[2] (s/iter) | x DS | Spark / local "
          "| Spark mean (s/iter) | x DS (means) |")
    print("|---|---|---|---|---|---|---|---|")
    ds_local, ds_spark = results["local"]["ds"][0], results["spark"]["ds"]
    for name in args.algorithms:
        lo, (sp, sp_mean) = results["local"][name][0], results["spark"][name]
        print(f"| {name} | {lo:.3f} | {lo / ds_local:.2f} | {sp:.3f} | {sp / ds_spark[0]:.2f} | {sp / lo:.2f} "
              f"| {sp_mean:.3f} | {sp_mean / ds_spark[1]:.2f} |")
    spark.stop()


if __name__ == "__main__":
    main()
