"""A whole default run of ``ads`` next to ``ds``'s at 10M labels on Spark ``local[2]``, side by side.

    source scripts/env.sh
    .venv/bin/python -m benchmarks.adaptive [--labels 10000000] [--workers 10000] [--repeats 2]

The data are the scaling benchmark's synthetic Dawid-Skene set (``benchmarks.common.ds_dataset``: ~10 labels
per item, 5 classes, generated once under ``benchmarks/data/``). Each repeat runs ``spark-submit
jobs/aggregate.py`` with the algorithm's defaults for ``ds`` then ``ads``, alternating, each in a fresh
process, and prints the fit phase of ``summary.json``, its iterations, the wall clock, the error on the gold,
``ads``'s structure, and the ratio of ``ads``'s fit to the ``ds`` fit of the same repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
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
