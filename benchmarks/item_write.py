"""The Spark engine's item table written two ways from the same fitted blocks, alternated in one process.

    source scripts/env.sh
    .venv/bin/python -m benchmarks.item_write --labels 10000000 --repeats 5

A Dawid-Skene fit (``--iterations``, ``tol = 0``) of the synthetic Parquet file of
``benchmarks.common.ds_dataset`` on ``local[2]`` with the distributed path, then ``--repeats`` times each,
alternated, into a new folder every time:

- ``tasks``: ``Fitted.write_items`` (the tasks that hold the blocks write the Parquet files with pyarrow);
- ``spark writer``: ``write_table`` of ``Fitted.items()`` (Arrow IPC bytes, ``createDataFrame``,
  ``mapInArrow`` and Spark's Parquet writer: the path cluster masters and remote outputs keep).

Both include the item results' computation (finishing each block with the quality columns), which is the
same in both.  Medians, minima and the ratio; the load average before and after.

With ``--relabel BUDGET``, the two ways are instead ``items/`` and ``relabel/`` (a queue of ``BUDGET`` items)
as ``write_result`` writes them, both with the tasks writing the items:

- ``queue from the tasks``: each task also keeps its partition's first ``BUDGET`` rows of the queue, and the
  driver cuts and writes ``relabel/`` from them with pandas;
- ``queue by Spark``: a Spark job reads the written items back, sorts and limits them, and Spark's writer
  writes ``relabel/`` (the path of ``relabel.budget = 0``).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from functools import partial

from benchmarks.common import ds_dataset, load_average, machine, median, spark_session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--relabel", type=int, default=0, metavar="BUDGET",
                        help="compare the two ways of cutting a relabel queue of BUDGET items instead")
    args = parser.parse_args()

    from crowdspark.config import load_config
    from crowdspark.io.tables import write_table
    from crowdspark.pipeline.quality import RELABEL_SCHEMA, relabel_queue
    from crowdspark.pipeline.run import fit_frames
    from crowdspark.pipeline.write import _written_items

    spark = spark_session()
    path = ds_dataset(spark, args.labels)
    config = load_config(overrides=[f"ds.max_iter={args.iterations}", "ds.tol=0", "engine.small_input_bytes=0"],
                         algorithm="ds", engine_name="spark", seed=0)
    fitted = fit_frames(config, spark.read.parquet(path), labels_source=path, input_format="parquet")
    ways = {
        "tasks": lambda folder: fitted.write_items(folder),
        "spark writer": lambda folder: write_table(fitted.items(), folder, "parquet", spark, fitted.item_extras),
    }
    if args.relabel:
        if fitted.quality is None:
            parser.error("--relabel needs the quality columns (quality.enabled = true)")
        items = fitted.items()

        def items_and_queue(folder: str, keep: int) -> None:
            written = fitted.write_items(folder, keep)
            queue = relabel_queue(_written_items(items, written, folder, "parquet"), args.relabel)
            write_table(queue, f"{folder}-relabel", "parquet", spark, schema=RELABEL_SCHEMA)

        ways = {"queue from the tasks": partial(items_and_queue, keep=args.relabel),
                "queue by Spark": partial(items_and_queue, keep=0)}
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    load_before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for name in (list(ways) if repeat % 2 == 0 else list(ways)[::-1]):
                folder = f"{tmp}/items"
                start = time.perf_counter()
                ways[name](folder)
                seconds[name].append(time.perf_counter() - start)
                rows = spark.read.parquet(folder).count()
                print(f"{name}: {seconds[name][-1]:.2f} s, {rows} rows", flush=True)
                shutil.rmtree(folder)
                shutil.rmtree(f"{folder}-relabel", ignore_errors=True)
    fitted.close()
    print(f"\n{args.labels:,} labels, relabel budget {args.relabel}, {args.repeats} writes each, alternated; "
          f"machine: {machine()}; load average before {load_before}, after {load_average()}")
    print("| way | median (s) | min (s) |\n|---|---|---|")
    for name, values in seconds.items():
        print(f"| {name} | {median(values):.2f} | {min(values):.2f} |")
    first, second = seconds
    print(f"{first} / {second} (medians) = {median(seconds[first]) / median(seconds[second]):.2f}")
    spark.stop()


if __name__ == "__main__":
    main()
