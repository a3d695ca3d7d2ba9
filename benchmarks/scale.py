"""End-to-end scaling on Spark local[2]: 1M, 10M and 100M labels, and the driver's memory.

    source scripts/env.sh
    .venv/bin/python -m benchmarks.scale --labels 1000000 10000000 100000000 --algorithms ds idbla-cvb0

For each size (synthetic Dawid-Skene data, ~10 labels per item, 5 classes, 1k-100k workers, generated
once under benchmarks/data/; ``--workers`` fixes the number of workers) and algorithm, runs ``spark-submit jobs/aggregate.py`` in a fresh process
with ``--iterations`` iterations (tol 0) and records wall time, the phases of ``summary.json``, seconds per
iteration, the driver Python process's peak memory (``summary.json`` ``memory``) and the peak of the run's
largest process (in local mode the JVM is driver and executor at once, so the two cannot be told apart).  Writes a log-log
plot of time against labels to ``benchmarks/results/scaling.png`` when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from datetime import date
from pathlib import Path

import numpy as np

from benchmarks.common import ROOT, ds_dataset, machine, run_measured, spark_session


def iteration_overrides(name: str, iterations: int) -> list[str]:
    if name == "ds":
        return ["--set", f"ds.max_iter={iterations}", "--set", "ds.tol=0"]
    if name.startswith("idbla-cvb"):
        return ["--set", f"{name}.max_iter={iterations}", "--set", f"{name}.tol=1e-300"]
    return ["--set", f"{name}.burn_in={iterations - 1}", "--set", f"{name}.n_samples=1"]


def run(path: str, name: str, iterations: int, driver_memory: str) -> dict:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            str(Path(sys.executable).with_name("spark-submit")), "--master", "local[2]",
            "--driver-memory", driver_memory, str(ROOT / "jobs" / "aggregate.py"),
            "--labels", path, "--algorithm", name, *iteration_overrides(name, iterations),
            "--set", "engine.small_input_bytes=0",  # the distributed engine at every size
            "--quiet", "--output", f"{tmp}/out",
        ]
        # the largest process: the JVM (in local mode driver and executor at once) or a Python worker
        wall, largest_mib, _ = run_measured(command, env)
        summary = json.loads(Path(f"{tmp}/out/summary.json").read_text())
    seconds = [h["seconds"] for h in summary["history"]]
    return {
        "wall_s": wall,
        "timings": summary["timings"],
        "iteration_s": float(np.median(seconds)) if seconds else float("nan"),
        "driver_python_peak_mib": summary["memory"]["driver_python_peak_mib"],
        "largest_process_peak_mib": largest_mib,
        "items": summary["counts"]["items"],
        "workers": summary["counts"]["workers"],
    }


def plot(rows: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in sorted({r["algorithm"] for r in rows}):
        sub = [r for r in rows if r["algorithm"] == name]
        ax.loglog([r["labels"] for r in sub], [r["wall_s"] for r in sub], "o-", label=f"{name}: end to end")
        ax.loglog([r["labels"] for r in sub], [r["iteration_s"] for r in sub], "s--", label=f"{name}: one iteration")
    ax.set_xlabel("labels")
    ax.set_ylabel("seconds")
    ax.set_title("crowdspark on Spark local[2]")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, nargs="+", default=[1_000_000, 10_000_000, 100_000_000])
    parser.add_argument("--algorithms", nargs="+", default=["ds", "idbla-cvb0"])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--workers", type=int, default=0,
                        help="workers in every dataset (0 = one per 100 items, 1k-100k); a fixed number "
                             "separates the driver's memory per item from its memory per worker")
    parser.add_argument("--json", default="scale.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    spark = spark_session("local[2]")
    paths = {n: ds_dataset(spark, n, n_workers=args.workers) for n in args.labels}
    spark.stop()
    rows = []
    for n in args.labels:
        for name in args.algorithms:
            result = run(paths[n], name, args.iterations, args.driver_memory)
            rows.append({"labels": n, "algorithm": name, **result})
            print(f"{n:>12,d} {name:10s} wall {result['wall_s']:.1f} s, {result['iteration_s']:.2f} s/iter, "
                  f"driver python peak {result['driver_python_peak_mib']:.0f} MiB", flush=True)
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / args.json).write_text(json.dumps(rows, indent=2))
    plot(rows, out / Path(args.json).with_suffix(".png").name.replace("scale", "scaling"))
    print(f"\nmachine: {machine()}; date: {date.today()}; {args.iterations} iterations, Spark local[2]")
    print("| labels | items | workers | algorithm | end to end (s) | read+validate+blocks (s) | s/iteration | write (s) "
          "| driver Python peak (MiB) | largest process peak (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        t = r["timings"]
        prep = t.get("read", 0) + t.get("validate", 0) + t.get("blocks", 0)
        print(f"| {r['labels']:,} | {r['items']:,} | {r['workers']:,} | {r['algorithm']} | {r['wall_s']:.1f} | "
              f"{prep:.1f} | {r['iteration_s']:.2f} | {t.get('write', 0):.1f} | {r['driver_python_peak_mib']:.0f} | "
              f"{r['largest_process_peak_mib']:.0f} |")


if __name__ == "__main__":
    main()
