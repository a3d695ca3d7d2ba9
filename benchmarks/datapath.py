"""The data path side by side: one labels file through this tree and another commit's tree, and crowd-kit.

    source scripts/env.sh
    git worktree add --detach ../old 982ecf9 && (cd ../old && bash scripts/setup.sh)
    .venv/bin/python -m benchmarks.datapath --labels 10000000 --old ../old --repeats 2

Every run is a fresh process on the same synthetic Dawid-Skene Parquet file (``benchmarks.common.ds_dataset``),
``--iterations`` Dawid-Skene iterations with ``tol = 0``:

- ``spark``: ``spark-submit --master local[2] --driver-memory 8g jobs/aggregate.py`` with
  ``engine.small_input_bytes=0`` (the distributed path forced);
- ``local``: ``python -m crowdspark aggregate --engine local``;
- ``crowd-kit``: its ``DawidSkene`` in a pandas process (``benchmarks.crowdkit_compare``), when installed.

Each tree runs with its own ``.venv``.  The runs alternate (this tree, the other; the other, this tree; ...)
``--repeats`` times, so a change of the machine's load, and going first, hit both; the table gives medians,
wall time and peak RSS of the run's largest process, the Python driver's own peak RSS (``summary.json``'s
``memory``) and the phases of ``summary.json``.
``--skip-local`` leaves out the local engine (at 100M labels).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from datetime import date
from pathlib import Path

import numpy as np

from benchmarks.common import ROOT, ds_dataset, machine, run_measured
from benchmarks.crowdkit_compare import CROWDKIT_SCRIPT

_PHASES = ("read", "validate", "blocks", "fit", "evaluate", "tables", "write")


def _ds_settings(iterations: int) -> list[str]:
    return ["--algorithm", "ds", "--set", f"ds.max_iter={iterations}", "--set", "ds.tol=0", "--quiet"]


def _order(names: list[str], repeat: int) -> list[str]:
    """The trees' order in repeat ``repeat``: reversed every other repeat, since the tree that runs first in a
    pair can be several percent slower or faster for that alone (BENCHMARKS.md, "The block functions ...")."""
    return names if repeat % 2 == 0 else names[::-1]


def command(tree: Path, engine: str, labels: str, iterations: int, output: str, driver_memory: str) -> list[str]:
    """The command that runs ``engine`` (``spark`` or ``local``) of the tree at ``tree`` on ``labels``."""
    python = tree / ".venv" / "bin" / "python"
    if engine == "spark":
        return [str(tree / ".venv" / "bin" / "spark-submit"), "--master", "local[2]", "--driver-memory", driver_memory,
                str(tree / "jobs" / "aggregate.py"), "--labels", labels, *_ds_settings(iterations),
                "--set", "engine.small_input_bytes=0", "--output", output]
    return [str(python), "-m", "crowdspark", "aggregate", "--labels", labels, "--engine", "local",
            *_ds_settings(iterations), "--output", output]


def run(tree: Path, engine: str, labels: str, iterations: int, driver_memory: str) -> dict:
    """Wall seconds, peak RSS (MiB) and ``summary.json`` phases of one fresh run."""
    python = str(tree / ".venv" / "bin" / "python")
    env = {**os.environ, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("PYTHONPATH", None)
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tree)  # Python workers put their working directory first on sys.path: the tree's own code
        try:
            wall, rss, _ = run_measured(command(tree, engine, labels, iterations, f"{tmp}/out", driver_memory), env)
        except subprocess.CalledProcessError as exc:  # reported, and left out of the medians
            return {"failed": (exc.stderr or "").strip().splitlines()[-3:]}
        finally:
            os.chdir(here)
        summary = json.loads(Path(f"{tmp}/out/summary.json").read_text())
    return {"wall_s": wall, "rss_mib": rss, "timings": summary["timings"],
            "driver_mib": summary.get("memory", {}).get("driver_python_peak_mib", np.nan)}


def run_crowdkit(labels: str, iterations: int) -> dict | None:
    """crowd-kit's DawidSkene end to end in a fresh process (``None`` when crowd-kit is not installed)."""
    python = str(ROOT / ".venv" / "bin" / "python")
    if subprocess.run([python, "-c", "import crowdkit"], capture_output=True).returncode:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "ck.py"
        script.write_text(CROWDKIT_SCRIPT)
        wall, rss, _ = run_measured([python, str(script), labels, str(iterations), f"{tmp}/ck.parquet"], dict(os.environ))
    return {"wall_s": wall, "rss_mib": rss, "timings": {}}


def _median(runs: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in runs]))


def _phases(runs: list[dict]) -> str:
    keys = [p for p in _PHASES if p in runs[0]["timings"]]
    return ", ".join(f"{p} {np.median([r['timings'].get(p, np.nan) for r in runs]):.1f}" for p in keys)


def _uptime() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--old", required=True, help="the other tree (with its own .venv)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--skip-crowdkit", action="store_true")
    args = parser.parse_args()
    path = ds_dataset(None, args.labels)
    trees = {"new": ROOT, "old": Path(args.old).resolve()}
    old_commit = subprocess.run(["git", "-C", str(trees["old"]), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    engines = ["spark"] if args.skip_local else ["spark", "local"]
    load_before = _uptime()
    runs: dict[tuple[str, str], list[dict]] = {(t, e): [] for t in trees for e in engines}
    for repeat in range(args.repeats):
        for engine in engines:
            for tree in _order(list(trees), repeat):
                result = run(trees[tree], engine, path, args.iterations, args.driver_memory)
                if "failed" in result:
                    print(f"{tree} {engine}: FAILED {result['failed']}", flush=True)
                    continue
                runs[(tree, engine)].append(result)
                print(f"{tree} {engine}: {result['wall_s']:.1f} s, {result['rss_mib']:.0f} MiB (Python driver "
                      f"{result['driver_mib']:.0f} MiB), {result['timings']}", flush=True)
    crowdkit = None if args.skip_crowdkit else run_crowdkit(path, args.iterations)
    print(f"\n{args.labels:,} labels, {args.iterations} Dawid-Skene iterations, {args.repeats} runs each (medians); "
          f"old = {old_commit}; machine: {machine()}; load average before {load_before}, after {_uptime()}; "
          f"date: {date.today()}")
    print("| run | end to end (s) | peak RSS (MiB) | Python driver's peak RSS (MiB) | phases (s) |")
    print("|---|---|---|---|---|")
    runs = {key: rs for key, rs in runs.items() if rs}
    for (tree, engine), rs in runs.items():
        print(f"| {tree} {engine} | {_median(rs, 'wall_s'):.1f} | {_median(rs, 'rss_mib'):.0f} | "
              f"{_median(rs, 'driver_mib'):.0f} | {_phases(rs)} |")
    if crowdkit is not None:
        print(f"| crowd-kit DawidSkene | {crowdkit['wall_s']:.1f} | {crowdkit['rss_mib']:.0f} | | |")
    for engine in engines:
        if ("new", engine) in runs and ("old", engine) in runs:
            new, old = _median(runs[("new", engine)], "wall_s"), _median(runs[("old", engine)], "wall_s")
            print(f"{engine}: new / old = {new / old:.2f}")
    if len(runs) == 4:
        spark, local = _median(runs[("new", "spark")], "wall_s"), _median(runs[("new", "local")], "wall_s")
        print(f"new spark / new local = {spark / local:.2f}")
        print(f"local peak RSS new / old = {_median(runs[('new', 'local')], 'rss_mib') / _median(runs[('old', 'local')], 'rss_mib'):.2f}")
    if crowdkit is not None and ("new", "spark") in runs:
        print(f"crowd-kit / new spark = {crowdkit['wall_s'] / _median(runs[('new', 'spark')], 'wall_s'):.2f}")


if __name__ == "__main__":
    main()
