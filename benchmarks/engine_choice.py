"""The job's default engine choice against the local engine, side by side: 10M labels, Dawid-Skene, 5 iterations.

    source scripts/env.sh
    .venv/bin/python -m benchmarks.engine_choice --labels 10000000 --repeats 3 [--distributed]

The labels are a synthetic Dawid-Skene Parquet file (``crowdspark.synthetic.dawid_skene_data``: 10 labels per
item, one worker per 100 items between 1k and 100k, 5 classes, seed 0; above 20M labels the same labels written
by Spark, ``crowdspark.synthetic.write_parquet``) written once under ``--data-dir``
(default ``/tmp/engine``; never in the repository).  Each repeat runs, one after the other, in fresh processes:

* ``spark-submit --master local[2] jobs/aggregate.py`` with the default settings (the job chooses its engine,
  :mod:`crowdspark.engine.choice`);
* ``crowdspark aggregate --engine local``;
* with ``--distributed``, the same spark-submit with ``engine.small_input_bytes=0`` (the forced distributed
  path);
* ``spark-submit --master local[2]`` of an empty script: what starting spark-submit's JVMs and Python costs.

It prints each run's wall seconds, the sum of its ``summary.json`` phases (read to write: the work after the
process started and chose its engine) and peak RSS of the largest process (``benchmarks.common.run_measured``),
the engine and reason the job chose, the medians, the ratio of the job to the local engine (target: at most
1.3) and whether the item labels and posteriors (1e-9) of the job equal the local engine's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from benchmarks.common import ROOT, load_average, machine, median, run_measured, same_answers

DS = ["--algorithm", "ds", "--set", "ds.max_iter=5", "--set", "ds.tol=0", "--quiet"]


#: above this many labels the data is written by Spark's generator (the same labels, chunk by chunk, in bounded
#: memory: the pandas generator holds every label as a Python string)
SPARK_WRITTEN = 20_000_000


def dataset(n_labels: int, folder: Path) -> str:
    """The Parquet labels of ``n_labels`` labels under ``folder`` (written once: by pandas into one file, above
    :data:`SPARK_WRITTEN` labels by :func:`crowdspark.synthetic.write_parquet` on ``local[2]``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from crowdspark.synthetic import dawid_skene_data, write_parquet

    n_items = n_labels // 10
    n_workers = int(min(100_000, max(1_000, n_items // 100)))
    path = folder / f"ds-{n_labels}-k{n_workers}-c5-s0"
    target = path / "part-0.parquet"
    if target.exists() or (path / "_SUCCESS").exists():
        return str(path)
    if n_labels > SPARK_WRITTEN:
        from benchmarks.common import spark_session

        spark = spark_session()
        try:
            write_parquet(spark, str(path), "ds", n_items, n_workers, 5, 10, 0)
        finally:
            spark.stop()
        return str(path)
    path.mkdir(parents=True, exist_ok=True)
    labels, _, _ = dawid_skene_data(n_items, n_workers, 5, 10, 0)
    partial = path / ".part-0.parquet.partial"
    pq.write_table(pa.Table.from_pandas(labels, preserve_index=False), partial)
    partial.rename(target)
    return str(path)


def commands(labels: str, out: str, distributed: bool) -> dict[str, list[str]]:
    bin_dir = Path(sys.executable).parent
    submit = [str(bin_dir / "spark-submit"), "--master", "local[2]"]
    job = [*submit, str(ROOT / "jobs" / "aggregate.py"), "--labels", labels, *DS]
    runs = {
        "spark-submit local[2], defaults": [*job, "--output", f"{out}/job"],
        "crowdspark aggregate --engine local": [sys.executable, "-m", "crowdspark", "aggregate", "--labels", labels,
                                                *DS, "--engine", "local", "--output", f"{out}/local"],
    }
    if distributed:
        runs["spark-submit local[2], engine.small_input_bytes=0"] = [
            *job, "--set", "engine.small_input_bytes=0", "--output", f"{out}/distributed"]
    runs["spark-submit local[2], an empty script"] = [*submit, str(Path(out) / "empty.py")]
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", default="/tmp/engine")
    parser.add_argument("--distributed", action="store_true", help="also time the forced distributed path")
    args = parser.parse_args()
    labels = dataset(args.labels, Path(args.data_dir))
    python = sys.executable
    env = {**os.environ, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYTHONPATH": str(ROOT)}
    print(machine())
    print(f"{args.labels:,} labels at {labels}")
    print("| repeat | command | wall (s) | phases (s) | peak RSS (MiB) | engine | reason | load |")
    print("|---|---|---|---|---|---|---|---|")
    walls: dict[str, list[float]] = {}
    rss: dict[str, list[float]] = {}
    same = []
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory(dir=args.data_dir) as out:
            Path(out, "empty.py").write_text("")
            for name, command in commands(labels, out, args.distributed).items():
                load = load_average().split()[0]
                wall, peak, _ = run_measured(command, env)
                walls.setdefault(name, []).append(wall)
                rss.setdefault(name, []).append(peak)
                engine = reason = phases = ""
                summary_path = Path(command[command.index("--output") + 1], "summary.json") \
                    if "--output" in command else None
                if summary_path is not None:
                    summary = json.loads(summary_path.read_text())
                    engine, reason = summary["engine"], summary.get("engine_choice", {}).get("reason", "")
                    phases = f"{sum(summary['timings'].values()):.1f}"
                print(f"| {repeat + 1} | {name} | {wall:.1f} | {phases} | {peak:.0f} | {engine} | {reason} | {load} |",
                      flush=True)
            same.append(same_answers(f"{out}/job", f"{out}/local"))
    print("\n| command | median wall (s) | median peak RSS (MiB) |")
    print("|---|---|---|")
    for name in walls:
        print(f"| {name} | {median(walls[name]):.1f} | {median(rss[name]):.0f} |")
    job, local = (median(walls[n]) for n in ("spark-submit local[2], defaults", "crowdspark aggregate --engine local"))
    print(f"\njob / local engine: {job / local:.2f} (target <= 1.3); same answers in every repeat: {all(same)}")
    if args.distributed:
        spread = median(walls["spark-submit local[2], engine.small_input_bytes=0"])
        print(f"job / forced distributed: {job / spread:.2f}")


if __name__ == "__main__":
    main()
