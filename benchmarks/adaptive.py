"""A whole default run of ``ads`` next to ``ds``'s at 10M labels on Spark ``local[2]``, side by side.

    source scripts/env.sh
    .venv/bin/python -m benchmarks.adaptive [--labels 10000000] [--workers 10000] [--repeats 2]

The data are the scaling benchmark's synthetic Dawid-Skene set (``benchmarks.common.ds_dataset``: ~10 labels
per item, 5 classes, generated once under ``benchmarks/data/``). Each repeat runs ``spark-submit
jobs/aggregate.py`` with the algorithm's defaults for ``ds`` then ``ads``, alternating, each in a fresh
process, and prints the fit phase of ``summary.json``, its iterations, the wall clock, the error on the gold,
``ads``'s structure, and the ratio of ``ads``'s fit to the ``ds`` fit of the same repeat.

``--sweep-labels N`` measures instead, in this process, one sweep's kernels (``local_step`` over every block,
then ``global_step``) of each model on ``N`` synthetic Dawid-Skene labels, alternating ``ds`` and ``ads``
``--repeats`` times, and prints the best and the median of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import time

import numpy as np

from benchmarks.common import ROOT, ds_dataset, machine, run_measured


def run(path: str, algorithm: str) -> dict:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            str(Path(sys.executable).with_name("spark-submit")), "--master", "local[2]", "--driver-memory", "8g",
            str(ROOT / "jobs" / "aggregate.py"), "--labels", path, "--gold", path + "-truth",
            "--algorithm", algorithm, "--set", "engine.small_input_bytes=0", "--quiet", "--output", f"{tmp}/out",
        ]
        wall, _, _ = run_measured(command, env)
        summary = json.loads(Path(f"{tmp}/out/summary.json").read_text())
    return {
        "algorithm": algorithm,
        "fit": summary["timings"]["fit"],
        "iterations": summary["iterations"],
        "wall": wall,
        "error": summary["metrics"]["error_rate"],
        "structure": summary["model"].get("structure", ""),
    }


def sweep_times(n_labels: int, repeats: int) -> None:
    """Best and median seconds of one sweep of ``ds`` and of ``ads`` (alternating), one process."""
    from crowdspark.block import build_blocks
    from crowdspark.engine.local import LocalEngine
    from crowdspark.engine.loop import initialize
    from crowdspark.models.registry import build_model
    from crowdspark.stats import add_stats
    from crowdspark.synthetic import dawid_skene_data

    n_workers, n_classes = 1000, 5
    labels, _, _ = dawid_skene_data(n_labels // 10, n_workers, n_classes, 10, 0)
    blocks = build_blocks(labels["item"].to_numpy(dtype=object), labels["worker"].str[1:].astype(int).to_numpy(),
                          labels["label"].astype(int).to_numpy(), max_labels=200_000)
    models = {name: build_model(name, {}, n_workers, n_classes, 0) for name in ("ds", "ads")}
    starts = {name: initialize(m, LocalEngine(blocks), False)[0] for name, m in models.items()}
    seconds: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(repeats):
        for name, model in models.items():
            start = time.perf_counter()
            stats = None
            for block in blocks:
                _, block_stats = model.local_step(block, None, starts[name], 1)
                stats = block_stats if stats is None else add_stats(stats, block_stats)
            model.global_step(stats, starts[name], 1)
            seconds[name].append(time.perf_counter() - start)
    print(f"{machine()}; {n_labels} labels, {n_workers} workers, {n_classes} classes; load {os.getloadavg()[0]:.1f}")
    print("| model | best sweep (s) | median sweep (s) | best / ds best | median / ds median |\n|---|---|---|---|---|")
    for name, values in seconds.items():
        print(f"| {name} | {min(values):.3f} | {np.median(values):.3f} | {min(values) / min(seconds['ds']):.2f} | "
              f"{np.median(values) / np.median(seconds['ds']):.2f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--sweep-labels", type=int, default=0, help="time one sweep's kernels in-process instead")
    args = parser.parse_args(argv)
    if args.sweep_labels:
        sweep_times(args.sweep_labels, args.repeats)
        return
    path = ds_dataset(None, args.labels, n_workers=args.workers)
    print(f"{machine()}; load before: {os.getloadavg()[0]:.1f}")
    print("| repeat | algorithm | fit (s) | iterations | s / iteration | wall (s) | error on gold | structure | "
          "fit / ds fit |\n|---|---|---|---|---|---|---|---|---|")
    for repeat in range(args.repeats):
        ds = None
        for algorithm in ("ds", "ads"):
            r = run(path, algorithm)
            ds = ds or r
            print(f"| {repeat + 1} | {algorithm} | {r['fit']:.2f} | {r['iterations']} | "
                  f"{r['fit'] / max(r['iterations'], 1):.3f} | {r['wall']:.1f} | {100 * r['error']:.4f}% | "
                  f"{r['structure']} | {r['fit'] / ds['fit']:.2f} |", flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
