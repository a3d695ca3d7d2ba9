"""Small data on Spark: RTE (8,000 labels), the whole command and one iteration.

    source scripts/env.sh
    .venv/bin/python -m benchmarks.small_data --repeat 3

Runs ``spark-submit jobs/aggregate.py`` with Dawid-Skene on the bundled RTE data in a fresh process
(JVM start-up, reading, validation, fitting and writing included) ``--repeat`` times, and reports the wall
time and the median seconds per EM iteration from each run's ``summary.json``, next to the same command
on the local engine (``--engine local``, no Spark).  The Spark command runs twice: with the defaults (RTE is
local and below ``engine.small_input_bytes``, so pandas reads it and the driver fits it without a
SparkSession; spark-submit still starts its JVM) and distributed (``engine.small_input_bytes=0``: Spark
validation, blocks, and the sweep session on two tasks).  ``crowdspark aggregate`` with the default engine
(spark) shows the same small-input path without spark-submit's JVM.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

from benchmarks.common import ROOT, machine

RTE = ["--labels", str(ROOT / "data/rte/labels.csv"), "--gold", str(ROOT / "data/rte/truth.csv")]


def run(command: list[str]) -> tuple[float, dict]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run([*command, "--quiet", "--output", f"{tmp}/out"], check=True, env=env, capture_output=True)
        wall = time.perf_counter() - start
        return wall, json.loads(Path(f"{tmp}/out/summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    bin_dir = Path(sys.executable).parent
    spark_cmd = [str(bin_dir / "spark-submit"), "--master", "local[2]", str(ROOT / "jobs/aggregate.py"), *RTE, "--algorithm", "ds"]
    cli_cmd = [str(bin_dir / "crowdspark"), "aggregate", *RTE, "--algorithm", "ds"]
    local_cmd = [*cli_cmd, "--engine", "local"]
    commands = (
        ("spark-submit, local[2] (defaults: small-input path)", spark_cmd),
        ("crowdspark aggregate (defaults: engine spark, small-input path)", cli_cmd),
        ("spark-submit, local[2], distributed (engine.small_input_bytes=0)",
         [*spark_cmd, "--set", "engine.small_input_bytes=0"]),
        ("crowdspark --engine local", local_cmd),
    )
    rows = []
    for name, command in commands:
        for _ in range(args.repeat):
            wall, summary = run(command)
            per_iter = float(np.median([h["seconds"] for h in summary["history"]]))
            rows.append((name, wall, per_iter, summary["iterations"], summary["metrics"]["error_rate"], summary["timings"]))
            print(f"{name}: {wall:.1f} s, {1000 * per_iter:.0f} ms/iteration", flush=True)
    print(f"\nRTE, Dawid-Skene; machine: {machine()}; date: {date.today()}")
    print("| command | wall (s), fresh process | ms per iteration (median) | iterations | error rate | phases (s) |")
    print("|---|---|---|---|---|---|")
    for name, wall, per_iter, iters, err, timings in rows:
        phases = ", ".join(f"{k} {v:.2f}" for k, v in timings.items())
        print(f"| {name} | {wall:.1f} | {1000 * per_iter:.0f} | {iters} | {err:.4f} | {phases} |")


if __name__ == "__main__":
    main()
