"""What the quality signals cost a whole distributed run: ``quality.enabled`` true against false, same commit,
side by side in one run.

    source scripts/env.sh
    .venv/bin/python -m benchmarks.quality_cost --labels 10000000 --repeats 2

Each run is a fresh ``spark-submit jobs/aggregate.py`` of Dawid-Skene on ``local[2]`` (JVM start-up included),
distributed (``engine.small_input_bytes = 0``); the two settings alternate (off, on, off, on ...) so that the
machine's load falls on both alike.  ``--gold`` adds the data's truth: the evaluation pass then runs in both
settings and the quality statistics ride on it; without gold they add a pass of their own (the worst case).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from datetime import date
from pathlib import Path

from benchmarks.common import ROOT, ds_dataset, machine, median, run_measured

PHASES = ("read", "validate", "blocks", "fit", "evaluate", "write")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each setting")
    parser.add_argument("--gold", action="store_true", help="give the truth as --gold")
    return parser.parse_args(argv)


def one_run(path: str, enabled: bool, gold: bool, tmp: str, index: int) -> dict:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    out = f"{tmp}/run{index}"
    command = [str(Path(sys.executable).with_name("spark-submit")), "--master", "local[2]", "--driver-memory", "8g",
               str(ROOT / "jobs" / "aggregate.py"), "--labels", path, "--algorithm", "ds", "--quiet",
               "--set", "engine.small_input_bytes=0", "--set", f"quality.enabled={str(enabled).lower()}",
               "--output", out]
    if gold:
        command += ["--gold", path + "-truth"]
    wall, _, _ = run_measured(command, env)
    timings = json.loads(Path(out, "summary.json").read_text())["timings"]
    return {"enabled": enabled, "wall": wall, **{p: timings.get(p, 0.0) for p in PHASES}}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    path = ds_dataset(None, args.labels, n_workers=10_000)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(2 * args.repeats):
            runs.append(one_run(path, enabled=bool(index % 2), gold=args.gold, tmp=tmp, index=index))
            print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in runs[-1].items()),
                  flush=True)
    print(f"\n{args.labels:,} labels, Dawid-Skene, local[2], gold: {args.gold}; machine: {machine()}; "
          f"date: {date.today()}; load: {os.getloadavg()[0]:.1f} (1 min) at the end")
    print("| quality | " + " | ".join(PHASES) + " | wall clock (median) |")
    print("|---|" + "---|" * (len(PHASES) + 1))
    medians = {}
    for enabled in (False, True):
        mine = [r for r in runs if r["enabled"] is enabled]
        medians[enabled] = {k: median([r[k] for r in mine]) for k in ("wall", *PHASES)}
        cells = " | ".join(f"{medians[enabled][p]:.1f} s" for p in PHASES)
        print(f"| {'on' if enabled else 'off'} | {cells} | {medians[enabled]['wall']:.1f} s |")
    print(f"\non / off, wall clock: {medians[True]['wall'] / medians[False]['wall']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
