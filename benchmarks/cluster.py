"""The Spark engine on a standalone cluster against ``local[2]``, side by side in one run.

    bash scripts/package.sh && source scripts/env.sh
    .venv/bin/python -m benchmarks.cluster --repeat 3

Starts a standalone cluster on this machine (one worker with 2 cores, ``scripts/standalone_cluster.py``) and
runs, ``--repeat`` times in alternation, each measurement once with ``--master local[2]`` and once with the
cluster's master, both through ``spark-submit`` with default settings (``spark.sweep_mode = "auto"``):

- ``idbla``: ``jobs/aggregate.py`` on RTE with ``engine.small_input_bytes=0``; ``timings.fit`` of its
  ``summary.json`` (400 Gibbs sweeps);
- ``ds``: one Dawid-Skene iteration at ``--labels`` labels (median of ``--iterations``, block building
  excluded, 2 partitions; this file run as the driver, ``--driver``).

It prints every pair, the medians and their ratio cluster / local[2].
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

from benchmarks.common import ROOT, machine
from scripts.standalone_cluster import StandaloneCluster, submit_command, submit_environment

RTE = ROOT / "data" / "rte"
PACKAGE = ROOT / "dist" / "crowdspark.zip"


def submit(master: str, args: list[str], conf: dict[str, str]) -> subprocess.CompletedProcess:
    command = submit_command(master, str(PACKAGE), args[0], args[1:], conf)
    env = {**submit_environment(), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def idbla_fit(master: str, scratch: Path) -> dict:
    out = scratch / "idbla"
    submit(master, [str(ROOT / "jobs" / "aggregate.py"), "--labels", str(RTE / "labels.csv"), "--gold",
                    str(RTE / "truth.csv"), "--algorithm", "idbla", "--output", str(out), "--set",
                    "engine.small_input_bytes=0"], {})
    summary = json.loads((out / "summary.json").read_text())
    return {"seconds": summary["timings"]["fit"], "mode": summary["sweep_mode"]["chosen"],
            "error_rate": summary["metrics"]["error_rate"]}


def ds_iteration(master: str, labels: int, iterations: int, memory: dict[str, str]) -> dict:
    done = submit(master, [str(Path(__file__)), "--driver", "--labels", str(labels), "--iterations",
                           str(iterations)], memory)
    return json.loads(done.stdout.strip().splitlines()[-1])


def driver(labels: int, iterations: int) -> None:
    """Under spark-submit: one DS fit on the session spark-submit made; prints its result as JSON."""
    from benchmarks.common import ds_dataset
    from benchmarks.ds_iteration import spark_iteration
    from crowdspark.spark_session import build_session

    spark = build_session("crowdspark-bench-cluster")
    spark.sparkContext.setLogLevel("ERROR")
    result = spark_iteration(spark, ds_dataset(spark, labels), iterations, 2, "auto")
    spark.stop()
    print(json.dumps({"seconds": result["iteration_s"], "iterations": result["iterations"]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--skip", nargs="*", default=[], choices=["idbla", "ds"])
    parser.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        driver(args.labels, args.iterations)
        return
    if not PACKAGE.exists():
        sys.exit(f"{PACKAGE} is missing: run bash scripts/package.sh first")
    # local[2]: everything in the driver, as in benchmarks.ds_iteration; cluster: the blocks on the executor
    memory = {"local": {"spark.driver.memory": "8g"},
              "cluster": {"spark.driver.memory": "4g", "spark.executor.memory": "8g"}}
    rows: dict[str, dict[str, list]] = {"idbla": {"local": [], "cluster": []}, "ds": {"local": [], "cluster": []}}
    with StandaloneCluster(workers=1, cores=2, memory="10g") as cluster, \
            tempfile.TemporaryDirectory() as scratch:
        masters = {"local": "local[2]", "cluster": cluster.master_url}
        for repeat in range(args.repeat):
            for name, master in masters.items():
                if "idbla" not in args.skip:
                    rows["idbla"][name].append(idbla_fit(master, Path(scratch)))
                    print(f"idbla rte fit, {name}: {rows['idbla'][name][-1]}", flush=True)
                if "ds" not in args.skip:
                    rows["ds"][name].append(ds_iteration(master, args.labels, args.iterations, memory[name]))
                    print(f"ds iteration at {args.labels:,} labels, {name}: "
                          f"{rows['ds'][name][-1]['seconds']:.3f} s", flush=True)
    print()
    print(f"machine: {machine()}; date: {date.today()}; {args.repeat} alternating runs of each")
    print("| measurement | local[2] (s, each run) | standalone cluster (s, each run) | median cluster / median local[2] |")
    print("|---|---|---|---|")
    titles = {"idbla": "idbla on RTE, fit (400 sweeps)",
              "ds": f"one DS iteration, {args.labels:,} labels (median of {args.iterations})"}
    for key, title in titles.items():
        local, remote = ([r["seconds"] for r in rows[key][name]] for name in ("local", "cluster"))
        if not local:
            continue
        ratio = statistics.median(remote) / statistics.median(local)
        modes = sorted({r.get("mode", "auto") for r in rows[key]["cluster"]})
        print(f"| {title} | {' '.join(f'{x:.3f}' for x in local)} | {' '.join(f'{x:.3f}' for x in remote)} "
              f"(sweep mode {'/'.join(modes)}) | {ratio:.2f} |")


if __name__ == "__main__":
    main()
