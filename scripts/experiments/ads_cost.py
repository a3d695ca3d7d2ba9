"""End-to-end time of ``crowdspark aggregate --engine local`` for two source trees, side by side.

    .venv/bin/python scripts/experiments/ads_cost.py --before /tmp/old-tree --labels data/web_search/labels.csv \\
        /tmp/syn1m/labels.csv [--repeats 2] [--after-set ads.criterion=heldout ...]

Each run is a fresh process (``python -m crowdspark aggregate --algorithm ads --engine local --seed 1``) with
``PYTHONPATH`` set to the tree (``--before``: a checkout of the old code; ``--after``: this repository by
default; ``--after-set`` options go to its runs only); the runs alternate between the trees, so load on the
machine falls on both alike.  Prints the wall time of every run and the median per tree and dataset, and the
structure each run chose.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def timed_run(tree: Path, labels: Path, output: Path, extra: list[str]) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [sys.executable, "-m", "crowdspark", "aggregate", "--labels", str(labels), "--algorithm", "ads",
            "--engine", "local", "--seed", "1", "--output", str(output), "--quiet", *extra]
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env, cwd=tree, capture_output=True)
    seconds = time.perf_counter() - start
    model = json.loads((output / "summary.json").read_text())["model"]
    return seconds, model.get("structure", "?")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, type=Path)
    parser.add_argument("--after", type=Path, default=ROOT)
    parser.add_argument("--labels", nargs="+", required=True, type=Path)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--after-set", dest="overrides", action="append", default=[])
    args = parser.parse_args(argv)
    extra = [item for o in args.overrides for item in ("--set", o)]
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as work:
        for labels in args.labels:
            for repeat in range(args.repeats):
                for name, tree in (("before", args.before), ("after", args.after)):
                    out = Path(work) / f"{name}-{labels.parent.name}-{repeat}"
                    seconds, structure = timed_run(tree.resolve(), labels.resolve(), out,
                                                   extra if name == "after" else [])
                    times.setdefault((labels.parent.name, name), []).append(seconds)
                    print(f"{labels.parent.name} {name} run {repeat}: {seconds:.1f} s ({structure})", flush=True)
    print("\n| dataset | before (s) | after (s) | after / before |\n|---|---|---|---|")
    for labels in args.labels:
        before = statistics.median(times[(labels.parent.name, "before")])
        after = statistics.median(times[(labels.parent.name, "after")])
        print(f"| {labels.parent.name} | {before:.1f} | {after:.1f} | {after / before:.2f} |")


if __name__ == "__main__":
    main()
