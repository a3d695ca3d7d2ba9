"""The local engine of two trees side by side, and at large sizes the job's default against the forced distributed path.

    source scripts/env.sh
    mkdir -p /tmp/old && git archive main | tar -x -C /tmp/old    # the other tree: main's code, this .venv
    .venv/bin/python -m benchmarks.local_speed --labels 10000000 --old /tmp/old --pairs 3
    .venv/bin/python -m benchmarks.local_speed --labels 100000000 --pairs 1 --runs job,distributed

Every run is a fresh process on one synthetic Dawid-Skene Parquet set (5 classes, 10 labels per item, one worker
per 100 items between 1k and 100k, or ``--workers``; seed 0), DS with ``ds.max_iter=--iterations`` and
``ds.tol=0``.  The set is the one ``benchmarks.common.ds_dataset`` writes with Spark (the same rows, from
:mod:`crowdspark.synthetic`'s chunk generator), written here without Spark, one chunk at a time, in files of
``--file-labels`` labels (never in the repository: ``--data-dir``, default ``/tmp/crowdspark-bench``).

The runs of one pair (``--runs``, default ``new`` and, with ``--old``, ``old``) alternate (in the given order in
even pairs, reversed in odd ones, so going first hits both):

* ``new``: ``python -m crowdspark aggregate --engine local`` of this tree;
* ``old``: the same command in ``--old``'s tree (run with its working directory there, so its code is imported);
* ``job``: ``spark-submit --master local[2] jobs/aggregate.py`` of this tree with the default settings (the job
  chooses its engine: ``summary.json``'s ``engine_choice``);
* ``distributed``: the same with ``engine.small_input_bytes=0`` (the forced distributed path).

It prints each run's wall seconds, CPU seconds (user + system of the whole process tree), peak RSS of the largest
process, the phases of ``summary.json``, the medians, the ratios to the first run named and whether every run's
item labels and posteriors equal the first run's bit for bit (else how far they are).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from benchmarks.common import ROOT, load_average, machine, median

DS_SETTINGS = ["--algorithm", "ds", "--set", "ds.tol=0", "--quiet"]


def dataset(n_labels: int, folder: Path, n_workers: int = 0, file_labels: int = 10_000_000) -> str:
    """The Parquet labels of ``n_labels`` labels under ``folder``, written once without Spark, a chunk of items at
    a time (the rows of :func:`crowdspark.synthetic.write_parquet` for ``ds`` with the same sizes and seed 0)."""
    import pyarrow.parquet as pq

    from crowdspark.synthetic import CHUNK_ITEMS, _chunk_codes, _cumulative_pi, _labels_table, _Names, _spec_for

    n_items = n_labels // 10
    n_workers = n_workers or int(min(100_000, max(1_000, n_items // 100)))
    path = folder / f"ds-{n_labels}-k{n_workers}-c5-s0"
    if (path / "_SUCCESS").exists():
        return str(path)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    spec = _spec_for("ds", n_items, n_workers, 5, 10, 0, None, CHUNK_ITEMS, {})
    names, cumulative = _Names.of(spec), _cumulative_pi(spec.params["pi"])
    writer, part, rows = None, 0, 0
    for chunk in range(spec.n_chunks):
        table = _labels_table(_chunk_codes(spec, chunk, cumulative), names)
        if writer is None:
            writer = pq.ParquetWriter(path / f"part-{part:05d}.parquet", table.schema)
        writer.write_table(table)
        rows += table.num_rows
        if rows >= file_labels:
            writer.close()
            writer, part, rows = None, part + 1, 0
    if writer is not None:
        writer.close()
    (path / "_SUCCESS").touch()
    return str(path)


# a wrapper whose only children are the command's: RUSAGE_CHILDREN gives that tree's peak RSS and CPU time
_WRAPPER = (
    "import json, resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
    "u = resource.getrusage(resource.RUSAGE_CHILDREN); print(json.dumps([u.ru_maxrss, u.ru_utime + u.ru_stime]))"
)


def run(name: str, command: list[str], cwd: Path, output: str) -> dict:
    """Wall seconds, CPU seconds, peak RSS (MiB) and ``summary.json`` of one fresh run of ``command``."""
    python = str(ROOT / ".venv" / "bin" / "python")
    env = {**os.environ, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("PYTHONPATH", None)
    shutil.rmtree(output, ignore_errors=True)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _WRAPPER, *command], cwd=cwd, env=env, capture_output=True,
                          text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        return {"name": name, "failed": proc.stderr.strip().splitlines()[-3:]}
    peak_kib, cpu = json.loads(proc.stdout.strip().splitlines()[-1])
    summary = json.loads(Path(output, "summary.json").read_text())
    return {"name": name, "wall_s": wall, "cpu_s": cpu, "rss_mib": peak_kib / 1024, "timings": summary["timings"],
            "engine_choice": summary.get("engine_choice"), "output": output}


def commands(labels: str, out: Path, old: Path | None, iterations: int) -> dict:
    """name -> (command, working directory, output folder) of every run a pair can hold."""
    settings = [*DS_SETTINGS, "--set", f"ds.max_iter={iterations}"]
    python = str(ROOT / ".venv" / "bin" / "python")
    local = [python, "-m", "crowdspark", "aggregate", "--labels", labels, *settings, "--engine", "local"]
    runs = {"new": ([*local, "--output", str(out / "new")], ROOT, str(out / "new"))}
    if old is not None:
        runs["old"] = ([*local, "--output", str(out / "old")], old, str(out / "old"))
    submit = [str(ROOT / ".venv" / "bin" / "spark-submit"), "--master", "local[2]", "--driver-memory", "8g",
              str(ROOT / "jobs" / "aggregate.py"), "--labels", labels, *settings]
    runs["job"] = ([*submit, "--output", str(out / "job")], ROOT, str(out / "job"))
    runs["distributed"] = ([*submit, "--set", "engine.small_input_bytes=0", "--output", str(out / "distributed")],
                               ROOT, str(out / "distributed"))
    return runs


def answers(output: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Item ids, labels and posteriors of a run's item table, sorted by item."""
    import pyarrow.parquet as pq

    table = pq.read_table(str(Path(output) / "items"), columns=["item", "label", "posterior"])
    table = table.sort_by("item")
    posterior = np.stack(table.column("posterior").to_numpy(zero_copy_only=False))
    return (table.column("item").to_numpy(zero_copy_only=False), table.column("label").to_numpy(zero_copy_only=False),
            posterior)


def same_answers(a: str, b: str) -> str:
    """``"identical"`` when two runs gave the same items, labels and posteriors bit for bit, else the labels that
    differ and the largest difference of a posterior (the Spark engine sums its blocks in another order)."""
    (items_a, labels_a, post_a), (items_b, labels_b, post_b) = answers(a), answers(b)
    if not np.array_equal(items_a, items_b):
        return "other items"
    if np.array_equal(labels_a, labels_b) and np.array_equal(post_a, post_b):
        return "identical"
    return f"{int((labels_a != labels_b).sum())} labels differ, posteriors within {np.abs(post_a - post_b).max():.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--workers", type=int, default=0, help="0: one per 100 items, between 1k and 100k")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--old", help="another tree whose local engine runs beside this one's")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--runs", help="comma-separated among new, old, job, distributed (default: new[,old])")
    parser.add_argument("--labels-path", help="an existing labels folder instead of the synthetic set of --labels")
    parser.add_argument("--data-dir", default="/tmp/crowdspark-bench")
    parser.add_argument("--file-labels", type=int, default=10_000_000, help="labels per Parquet file")
    parser.add_argument("--out", default="/tmp/crowdspark-bench/out")
    args = parser.parse_args()
    labels = args.labels_path or dataset(args.labels, Path(args.data_dir), args.workers, args.file_labels)
    names = args.runs.split(",") if args.runs else ["new", "old"] if args.old else ["new"]
    every = commands(labels, Path(args.out), Path(args.old).resolve() if args.old else None, args.iterations)
    runs = {name: every[name] for name in names}
    first = names[0]
    print(f"{labels}; machine: {machine()}; load average before: {load_average()}; "
          f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", flush=True)
    results: dict[str, list[dict]] = {name: [] for name in runs}
    same: dict[str, list[str]] = {name: [] for name in runs if name != first}
    for pair in range(args.pairs):
        order = list(runs) if pair % 2 == 0 else list(runs)[::-1]
        done = {}
        for name in order:
            command, cwd, output = runs[name]
            result = run(name, command, cwd, output)
            print(f"pair {pair + 1} {name}: " + (f"FAILED {result['failed']}" if "failed" in result else
                  f"{result['wall_s']:.1f} s wall, {result['cpu_s']:.1f} s CPU, {result['rss_mib']:.0f} MiB, "
                  f"{result['timings']}, engine {result['engine_choice']}; load {load_average()}"), flush=True)
            if "failed" not in result:
                results[name].append(result)
                done[name] = output
        for name in same:
            if name in done and first in done:
                same[name].append(same_answers(done[first], done[name]))
    print(f"\nload average after: {load_average()}")
    print(f"| run | end to end (s) | CPU (s) | peak RSS (MiB) | phases (s) | time / {first} | same answers as {first} |")
    print("|---|---|---|---|---|---|---|")
    base = median([r["wall_s"] for r in results[first]])
    for name, rs in results.items():
        if not rs:
            continue
        wall = median([r["wall_s"] for r in rs])
        phases = ", ".join(f"{k} {median([r['timings'].get(k, np.nan) for r in rs]):.1f}" for k in rs[0]["timings"])
        print(f"| {name} | {wall:.1f} | {median([r['cpu_s'] for r in rs]):.1f} | "
              f"{median([r['rss_mib'] for r in rs]):.0f} | {phases} | {wall / base:.2f} | "
              f"{'' if name == first else same[name]} |")
    for name, rs in results.items():
        if name != first and rs and results[first]:
            ratios = [n["wall_s"] / o["wall_s"] for n, o in zip(results[first], rs)]
            print(f"{first} / {name} per pair: {', '.join(f'{r:.2f}' for r in ratios)}")


if __name__ == "__main__":
    main()
