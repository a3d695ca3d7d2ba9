"""What one pass of wawa costs on Spark local[2], and what an M-MSR iteration's order statistics cost.

    source scripts/env.sh
    .venv/bin/python -m benchmarks.one_pass_cost --labels 1000000 --repeats 9

``wawa``: on the same cached blocks (synthetic Dawid-Skene labels, ``benchmarks.common.ds_dataset``), in
alternation, ``--repeats`` times each: wawa's fit (one Spark job: ``fit``), its answers pass (``evaluate``),
the same job with a block function that does nothing (the engine's ``map_reduce`` with the blocks resolved),
a Python job over a two-element RDD (Spark's floor for a job that starts Python tasks), and wawa's
kernels alone on one block in the driver (``init_block`` with the blocks' counts, and the answers'
``finish_block``).  Medians and minima; every figure of one run.

``mmsr``: on the covariance of the same labels (K x K), one M-MSR iteration (:func:`crowdspark.models.mmsr.msr_fit`),
one partition of every row of the K x K ratios at once, and the same order statistics as crowd-kit takes
them (one ``np.sort`` per row in a Python loop): the order statistics are the iteration's common work.
"""

from __future__ import annotations

import argparse
import time
import warnings
from functools import partial
from typing import Any, Callable

import numpy as np

from benchmarks.common import ds_dataset, machine, median, spark_session


def _times(calls: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    """Seconds of each call, the calls alternated ``repeats`` times."""
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def _nothing(block, state, value) -> tuple[None, dict[str, np.ndarray]]:
    return None, {"blocks": np.array(1.0)}


def _drain(elements) -> Any:
    yield sum(1 for _ in elements)


def wawa_costs(spark, path: str, repeats: int) -> tuple[dict[str, list[float]], Any]:
    """Seconds of wawa's jobs and of jobs that do nothing, alternated; and the engine's blocks' model."""
    from crowdspark.config import InputConfig
    from crowdspark.engine.loop import _init, fit
    from crowdspark.engine.spark.engine import SparkEngine
    from crowdspark.io.spark_reader import block_rdd, prepare_labels_spark, read_spark_frame
    from crowdspark.models.registry import build_model
    from crowdspark.pipeline.fit import evaluate

    labels = prepare_labels_spark(read_spark_frame(spark, path, "parquet", "labels"), InputConfig(), path)
    engine = SparkEngine(block_rdd(labels, None, 2, 2_000_000))
    engine.materialize()
    model = build_model("wawa", {}, labels.encoding.n_workers, labels.encoding.n_classes, 0)
    tiny = spark.sparkContext.parallelize([1, 2], 2).cache()
    tiny.count()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            params = fit(model, engine).params
            one = driver_blocks(path, n_blocks=2)[0][0]
            seconds = _times({
                "wawa's fit (one Spark job)": lambda: fit(model, engine),
                "wawa's answers pass": lambda: evaluate(model, engine, params),
                "the same job, a block function that does nothing": lambda: engine.map_reduce(
                    _nothing, None, stateful=False),
                "a Python job over a two-element RDD": lambda: tiny.mapPartitions(_drain).collect(),
                "wawa's fit kernels on one block, driver": lambda: _init(model, one, None, None),
                "wawa's answers kernels on one block, driver": lambda: model.finish_block(one, None, params),
            }, repeats)
    finally:
        engine.close()
    return seconds, one.n_labels


def driver_blocks(path: str, n_blocks: int = 1) -> tuple[list, int, int]:
    """The labels at ``path`` as about ``n_blocks`` blocks on the driver, with their numbers of workers and
    classes."""
    import pandas as pd

    from crowdspark.block import build_blocks

    frame = pd.read_parquet(path)
    workers, worker = np.unique(frame["worker"].to_numpy(), return_inverse=True)
    classes, label = np.unique(frame["label"].to_numpy(), return_inverse=True)
    blocks = build_blocks(frame["item"].astype(str).to_numpy(dtype=object), worker, label,
                          max_labels=-(-len(frame) // n_blocks))
    return blocks, len(workers), len(classes)


def mmsr_costs(path: str, repeats: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Seconds of one M-MSR iteration and of its order statistics two ways, on the labels' covariance."""
    from crowdspark.models.mmsr import Mmsr, msr_fit
    from crowdspark.stats import sum_stats

    blocks, n_workers, n_classes = driver_blocks(path)
    model = Mmsr(n_workers, n_classes)
    stats = sum_stats(model.init_block(b)[1] for b in blocks)
    cov = model.covariance(stats["common"], stats["agree"])
    observed = stats["common"] > 0
    trim = max(int(observed.sum(axis=0).min()) // 2 - 1, 0)
    u, _, _, _ = msr_fit(cov, observed, trim, int(stats["items"]), 3, 0.0)
    ratios = np.abs(cov) / u[None, :]
    k = len(u)

    def row_sorts() -> None:
        for row, mask in zip(ratios, observed):
            np.sort(row[mask])

    fit = partial(msr_fit, cov, observed, trim, int(stats["items"]), tol=0.0)
    seconds = _times({
        "msr_fit, 1 iteration (its setup included)": lambda: fit(max_iter=1),
        "msr_fit, 5 iterations": lambda: fit(max_iter=5),
        "one half's order statistics: every row partitioned at once": lambda: ratios.copy().partition(
            (trim - 1, k - trim), axis=1),
        "one half's order statistics: one np.sort per row (crowd-kit's way)": row_sorts,
    }, repeats)
    seconds["one M-MSR iteration (both halves): (5 iterations - 1) / 4, per repeat"] = [
        (five - one) / 4 for one, five in zip(seconds["msr_fit, 1 iteration (its setup included)"],
                                              seconds["msr_fit, 5 iterations"])]
    return seconds, {"K": k, "F": trim, "observed %": int(round(observed.mean() * 100))}


def report(title: str, seconds: dict[str, list[float]]) -> None:
    print(f"\n{title}")
    print("| measure | median (s) | min (s) |")
    print("|---|---|---|")
    for name, values in seconds.items():
        print(f"| {name} | {median(values):.4f} | {min(values):.4f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)
    print(f"machine: {machine()}")
    spark = spark_session("local[2]")
    path = ds_dataset(spark, args.labels, n_classes=5)
    seconds, block_labels = wawa_costs(spark, path, args.repeats)
    report(f"wawa at {args.labels:,} labels, Spark local[2], 2 blocks ({block_labels:,} labels in the first); "
           f"{args.repeats} repeats, alternated", seconds)
    spark.stop()
    seconds, sizes = mmsr_costs(path, args.repeats)
    report(f"M-MSR at {args.labels:,} labels: {sizes}; {args.repeats} repeats, alternated", seconds)


if __name__ == "__main__":
    main()
